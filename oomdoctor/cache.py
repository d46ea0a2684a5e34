"""A small on-disk cache of derived data (parsed rule files, the remedy index, parsed TOML tables).

Entries live in ``$OOMDOCTOR_CACHE_DIR`` (default ``$XDG_CACHE_HOME/oomdoctor`` or
``~/.cache/oomdoctor``), one JSON file per key. The key is a digest of everything the data was
derived from, so a changed input never meets a stale entry. An entry starts with the SHA-256 of
its payload on its own line: a truncated or corrupt entry reads as missing, and so does any
unreadable or unwritable cache directory (the caller then derives the data again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any


def toml_module() -> ModuleType:
    """``tomllib`` (``tomli`` before Python 3.11), imported when a TOML text is first parsed: a run
    whose rule files and tables all come from the cache parses none (and skips a 2 ms import)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib


#: Entries kept per kind; the oldest go first.
MAX_ENTRIES = 256


def source_key(tag: str, paths: Iterable[Path]) -> str | None:
    """A key for data that ``tag`` (what is derived, in which layout) derives from the files
    ``paths`` with this version of oomdoctor; None when one of them cannot be read: then nothing
    is cached, since an edit to that file could not be told."""
    from oomdoctor import __version__

    h = hashlib.sha256(f"{tag}\0{__version__}\0".encode())
    for path in paths:
        try:
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        except OSError:
            return None
    return h.hexdigest()[:40]


def cache_dir() -> Path:
    base = os.environ.get("OOMDOCTOR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "oomdoctor"
    )
    return Path(base)


def entry_path(kind: str, key: str) -> Path:
    return cache_dir() / f"{kind}-{key}.json"


def load(kind: str, key: str) -> Any:
    """The JSON value stored under ``kind``/``key``, or None when missing or corrupt."""
    try:
        blob = entry_path(kind, key).read_bytes()
    except OSError:
        return None
    head, nl, payload = blob.partition(b"\n")
    if not nl or hashlib.sha256(payload).hexdigest().encode("ascii") != head:
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return None


def store(kind: str, key: str, value: Any, keep: int | None = None) -> bool:
    """Store ``value`` (only if JSON carries it exactly); False when it was not stored.
    ``keep``: entries of ``kind`` kept at most (default ``MAX_ENTRIES``; big ones: fewer)."""
    try:
        payload = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        if json.loads(payload) != value:  # e.g. TOML dates or tuples: no entry
            return False
    except (TypeError, ValueError):
        return False
    path = entry_path(kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(hashlib.sha256(payload).hexdigest().encode("ascii") + b"\n" + payload)
        os.replace(tmp, path)
        _prune(path.parent, kind, MAX_ENTRIES if keep is None else keep)
    except OSError:
        return False
    return True


def _prune(folder: Path, kind: str, keep: int) -> None:
    entries = list(folder.glob(f"{kind}-*.json"))
    if len(entries) <= keep:
        return

    def age(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0
    entries.sort(key=age)
    for old in entries[: len(entries) - keep]:
        with contextlib.suppress(OSError):
            old.unlink()


def load_toml(path: Path) -> dict[str, Any]:
    """The TOML document at ``path``, as ``tomllib.loads(path.read_text("utf-8"))`` gives it.

    Parsed once per content: later reads of the same text load the JSON entry stored then, which
    costs a fraction of parsing (the advice tables and the model catalog are read on every run
    that finds a failure). A document JSON cannot carry exactly (TOML dates) is parsed every time.
    Raises what ``read_text`` and ``tomllib.loads`` raise."""
    text = path.read_text("utf-8")
    key = hashlib.sha256(b"toml\0" + text.encode("utf-8")).hexdigest()[:40]
    got = load("toml", key)
    if isinstance(got, dict):
        return got
    data: dict[str, Any] = toml_module().loads(text)
    store("toml", key, data)
    return data
