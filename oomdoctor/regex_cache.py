"""Compiled regexes kept on disk, so that a run does not parse again the patterns it compiled before.

The ``regex`` module parses a pattern in Python: the ~45 rule patterns a 50-line log reaches cost
it ~25 ms, a tenth of the whole run. A compiled pattern pickles to its compiled form, from which
``regex`` rebuilds it without parsing (about 20 µs). The forms of the patterns compiled here are
kept in one entry of :mod:`oomdoctor.cache` per ``regex`` version, Python version and machine
(the form is the engine's code: another version may read it otherwise), written at exit when a
run compiled new ones. They are read back by an unpickler that builds regex patterns and nothing
else, and a pattern rebuilt from an entry must have the source it is filed under; a damaged or
foreign entry is ignored (the entry's hash line catches a damaged one: see :func:`cache.load`).
As with the hyperscan databases (:mod:`oomdoctor.prefilter.hsdb`), the cache directory is trusted
to hold what oomdoctor wrote there.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import io
import pickle
import platform
import sys
import threading
from typing import Any

import regex

#: the layout of an entry (a new value orphans the old entries)
_TAG = "regex-forms 1"

#: forms kept at most: past this an entry starts again (a pack has about a thousand patterns)
MAX_FORMS = 4000

_lock = threading.Lock()
#: "flags\0pattern" -> the pickled compiled form (base64), as read from the entry; None: not read yet
_forms: dict[str, str] | None = None
#: forms compiled in this process and not in the entry yet
_new: dict[str, str] = {}
_saving = False


def _key() -> str:
    parts = (_TAG, str(getattr(regex, "__version__", "")), sys.version, platform.machine())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def _read() -> dict[str, str]:
    from oomdoctor import cache

    got = cache.load("regex", _key())
    if isinstance(got, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in got.items()):
        return got
    return {}


class _PatternsOnly(pickle.Unpickler):
    """An unpickler that builds nothing but regex patterns (the one global a pattern's pickle names)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("regex._regex", "compile"):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"not a regex pattern: {module}.{name}")


def _rebuild(form: str, pattern: str) -> regex.Pattern[str] | None:
    try:
        got = _PatternsOnly(io.BytesIO(base64.b64decode(form))).load()
    except Exception:  # a damaged or foreign form: compiled again
        return None
    if not isinstance(got, regex.Pattern) or got.pattern != pattern:
        return None
    return got


def compile(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    """``regex.compile(pattern, flags)``, rebuilt from its compiled form when a run compiled it before.

    Raises what ``regex.compile`` raises (nothing is stored for a pattern that does not compile)."""
    global _forms
    key = f"{flags}\0{int(regex.DEFAULT_VERSION)}\0{pattern}"
    with _lock:
        if _forms is None:
            _forms = _read()
        form = _forms.get(key) or _new.get(key)
    if form is not None:
        got = _rebuild(form, pattern)
        if got is not None:
            return got
    compiled = regex.compile(pattern, flags)
    if compiled.flags & regex.LOCALE:  # compiled for the locale in force: not kept
        return compiled
    try:
        form = base64.b64encode(pickle.dumps(compiled, protocol=4)).decode("ascii")
    except Exception:  # pragma: no cover - every regex pattern pickles
        return compiled
    _remember(key, form)
    return compiled


def _remember(key: str, form: str) -> None:
    global _saving
    with _lock:
        _new[key] = form
        if not _saving:
            _saving = True
            atexit.register(save)


def save() -> None:
    """Add the forms compiled in this process to the entry (read again first: another process
    may have added its own since). Called at exit."""
    from oomdoctor import cache

    with _lock:
        if not _new:
            return
        merged = _read()
        if len(merged) + len(_new) > MAX_FORMS:
            merged = {}
        merged.update(_new)
        _new.clear()
    cache.store("regex", _key(), merged, keep=4)
