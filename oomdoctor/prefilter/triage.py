"""Tell at C speed whether a chunk of input may hold a failure (pipe mode under a flood).

When input arrives faster than it can be analysed, pipe mode still passes every byte through and
skips the oldest queued input for analysis. What it skips is *sifted* first: a chunk that holds
none of the rules' triggers (nor those of a context rule that reads a fact: a start-up banner)
cannot start a failure, so only its line count is kept, while a chunk that does is kept for the scanner (and, once the
analyser takes chunks off a flooded queue itself, the one after it too: the rest of its
message). Sifting is one hyperscan scan per chunk that stops at the first hit and releases the
GIL (about 1.6 GB/s here). Without hyperscan (the ``fast`` extra) there is no sifting.

A context rule that only votes for an engine (no group: a traceback frame in ``.../vllm/...``,
ollama's ``source=server.go`` on every line) does not keep a chunk, nor does a periodic one
(SGLang's ``Decode batch`` line): such lines may be on every chunk of a log, and keeping them all
would fill the queue and push out the chunks that do hold a failure.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomllib

from oomdoctor.paths import builtin_rules_dir
from oomdoctor.prefilter.interface import json_forms, needles


class Triage:
    """``holds(data)``: whether ``data`` holds one of the literals (ASCII case folded), or one of
    their JSON forms (a JSON log record's escaped message)."""

    def __init__(self, literals: Iterable[str]) -> None:
        import hyperscan

        from oomdoctor.prefilter.hsdb import database

        self._hs = hyperscan
        lits = needles(list(literals))
        self.size = len(lits)
        lits += [form for form, _ in json_forms(lits)]
        self._db = database(
            [b"".join(b"\\x%02x" % c for c in lit) for lit in lits],
            [hyperscan.HS_FLAG_CASELESS | hyperscan.HS_FLAG_SINGLEMATCH] * len(lits),
            lits[0] if lits else b"",
        )
        self._local = threading.local()

    def holds(self, data: bytes) -> bool:
        found: list[int] = []

        def on_match(_id: int, _start: int, _end: int, _flags: int, _ctx: object) -> bool:
            found.append(_id)
            return True  # one is enough

        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._hs.Scratch(self._db)
        with contextlib.suppress(self._hs.ScanTerminated):
            self._db.scan(data, match_event_handler=on_match, scratch=scratch)
        return bool(found)


def _literals_of_files(paths: list[Path]) -> list[str]:
    """The triggers of every rule, and of every context rule that reads a fact, in the TOML rule
    files ``paths`` (cached)."""
    from oomdoctor import cache
    from oomdoctor.rulepack.loader import reads_a_fact

    key = cache.source_key("triage-literals 3", paths)
    got = cache.load("triage", key) if key else None
    if isinstance(got, list) and all(isinstance(x, str) for x in got):
        return got
    out: list[str] = []
    for path in paths:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        for entry in data.get("rule", []):
            out.extend(t for t in entry.get("triggers", []) if isinstance(t, str))
        for entry in data.get("context", []):
            if reads_a_fact(str(entry.get("pattern", ""))) and not entry.get("periodic"):
                out.extend(t for t in entry.get("triggers", []) if isinstance(t, str))
    if key:
        cache.store("triage", key, out)
    return out


def builtin_triage() -> Triage | None:
    """Sifting for the shipped rule pack (read from its files, without loading the pack), or
    None without hyperscan."""
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return None
    paths = sorted(p for p in builtin_rules_dir().glob("*.toml") if not p.name.startswith("phases."))
    return Triage(_literals_of_files(paths))


def triage_for(rules: Iterable[Any], contexts: Iterable[Any]) -> Triage | None:
    """Sifting for a loaded rule pack's rules and the context rules that read a fact, or None
    without hyperscan."""
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return None
    reading = [c for c in contexts if not c.votes_only and not c.rule.periodic]
    return Triage([t for r in [*rules, *reading] for t in r.triggers])
