"""The ``fast`` prefilter: every trigger, caseless, in one hyperscan block-mode database.

Importing this module raises :class:`ImportError` when hyperscan is not installed; the caller
(:func:`oomdoctor.prefilter.make_prefilter`) then falls back to the pure-Python path. Both
give the same line spans: a line is a candidate when it holds a trigger, ASCII case folded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import hyperscan

from oomdoctor.prefilter.hsdb import database
from oomdoctor.prefilter.interface import needles, with_json_forms


def _literal(lit: bytes) -> bytes:
    # every byte escaped: no regex syntax can leak in from a trigger
    return b"".join(b"\\x%02x" % b for b in lit)


class HyperscanPrefilter:
    """All triggers in one database, each needle's JSON forms under its own id (see
    :func:`~oomdoctor.prefilter.interface.json_forms`); a scan reports each match's end offset,
    in order."""

    #: not in worker processes (pool.py): measured on 2 CPUs, a GiB took 1.76 s in one process
    #: and 2.15 s with two workers, whose reading, scanning and counting cost more than they
    #: spared the scanning process (1.7 s of CPU in all, against 2.1 s)
    runs_in_workers = False

    def __init__(self, triggers: Sequence[str], present: Sequence[bytes] = ()) -> None:
        self.needles = lits = needles(triggers)
        self._db: hyperscan.Database | None = None
        #: literals whose first occurrence each scan notes, as ids from ``len(lits)`` on (see present_in)
        self.present_literals = tuple(present)
        if lits:
            searched = with_json_forms(lits)
            # (a present literal's JSON forms too, under its id: a record's bytes hold one of them)
            noted = [(form, len(lits) + k) for form, k in with_json_forms(self.present_literals)]
            self._db = database(
                [_literal(form) for form, _ in [*searched, *noted]],
                [hyperscan.HS_FLAG_CASELESS] * len(searched)
                + [hyperscan.HS_FLAG_CASELESS | hyperscan.HS_FLAG_SINGLEMATCH] * len(noted),
                lits[0],
                [id_ for _, id_ in [*searched, *noted]],
            )
        # hyperscan scratch space may be used by one scan at a time: one per thread (the HTTP
        # service shares the cached prefilter between request threads)
        self._local = threading.local()

    def mask(self, text: bytes) -> int:
        """The needles ``text`` holds anywhere (ASCII case folded), as a bit mask: one scan."""
        if self._db is None or not text:
            return 0
        bits = 0

        def on_match(id_: int, _start: int, _end: int, _flags: int, _ctx: object) -> None:
            nonlocal bits
            bits |= 1 << id_

        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._db)
        self._db.scan(text, match_event_handler=on_match, scratch=scratch)
        return bits & ((1 << len(self.needles)) - 1)  # (not the ``present`` literals)

    def present_in(self, block: bytes, a: int, b: int) -> int | None:
        """Which ``present`` literals may be in ``block[a:b]``, from this thread's latest scan (bit
        ``k``: literal ``k``): those whose first occurrence in the scanned range ends by ``b``
        (one that ends later is not in it); None when that scan did not cover ``block[a:b]``."""
        got = getattr(self._local, "first", None)
        if got is None or got[0] is not block or not got[1] <= a <= b <= got[2]:
            return None
        return sum(1 << k for k, end in got[3].items() if end <= b)

    def candidates(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
        n = len(block) if hi is None else hi
        if self._db is None or n <= lo:
            return []
        hits: list[tuple[int, int]] = []
        add = hits.append

        def on_match(id_: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
            add((end, id_))

        view: Any = block if (lo == 0 and n == len(block)) else memoryview(block)[lo:n]  # no copy
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = hyperscan.Scratch(self._db)
        self._db.scan(view, match_event_handler=on_match, scratch=scratch)
        if self.present_literals:
            first: dict[int, int] = {}
            for end, id_ in hits:
                if id_ >= len(self.needles):  # (a literal and its forms: the earliest)
                    k = id_ - len(self.needles)
                    first[k] = min(first.get(k, end + lo), end + lo)
            self._local.first = (block, lo, n, first)
            if first:
                hits = [hit for hit in hits if hit[1] < len(self.needles)]
        if not hits:
            return []
        hits.sort()
        out: list[tuple[int, int, int]] = []
        rfind = block.rfind
        find = block.find
        start = line_end = -1
        mask = 0
        for rel, id_ in hits:
            e = rel + lo
            if e <= line_end:
                mask |= 1 << id_  # another match on the same line
                continue
            if mask:
                out.append((start, line_end, mask))
            start = rfind(b"\n", 0, e) + 1  # >= lo: lo starts a line
            line_end = find(b"\n", e - 1, n)
            if line_end < 0:
                line_end = n
            mask = 1 << id_
        out.append((start, line_end, mask))
        return out
