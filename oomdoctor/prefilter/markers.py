"""Find the next line that normalising may change, or that holds a frame's "File ", in one pass.

The scanner sets phase-evidence lines aside unread (:meth:`oomdoctor.scanner.Scanner._between`),
except the few that normalising may change (a JSON record, ANSI or NUL bytes, a character whose
lower case is ASCII) or that may be a traceback frame: those it reads where they are. This finds
the first such line of a stretch: one hyperscan scan that stops at the first hit (the ``fast``
extra), else one ``bytes.find`` per marker.
"""

from __future__ import annotations

import contextlib
from typing import Any

from oomdoctor.reader import _ANSI_MARKER_BYTES, FOLDS_TO_ASCII

#: bytes whose line :func:`oomdoctor.reader.only_cut_by_normalise` rejects, and a frame's "File "
#: (a line starting with "{" other than a Python dict's "{'" is rejected too: see ``first``)
MARKERS: tuple[bytes, ...] = (b"File ", b"\x00", *_ANSI_MARKER_BYTES, *FOLDS_TO_ASCII)


def _next_record(block: bytes, pos: int, end: int) -> int:
    """Offset of the first line of ``block[pos:end]`` (``pos`` at a line start) that starts with
    "{" (a JSON record, which normalising unwraps), or -1; a Python dict ("{'") is none."""
    if block.startswith(b"{", pos) and not block.startswith(b"{'", pos):
        return pos
    at = pos
    while True:
        at = block.find(b"\n{", at, end)
        if at < 0 or at + 1 >= end:
            return -1
        if not block.startswith(b"{'", at + 1):
            return at + 1
        at += 1


class _Finds:
    """One ``bytes.find`` per marker."""

    def first(self, block: bytes, pos: int, end: int) -> int:
        best = _next_record(block, pos, end)
        for mk in MARKERS:
            at = block.find(mk, pos, best if best >= 0 else end)
            if at >= 0:
                best = at
        return best


class _Hyperscan:
    """Every marker in one hyperscan database; a scan stops at its first match."""

    def __init__(self) -> None:
        import threading

        import hyperscan

        from oomdoctor.prefilter.hsdb import database

        self._hs = hyperscan
        literals = [b"".join(b"\\x%02x" % c for c in mk) for mk in MARKERS]
        patterns = [*literals, rb"\n\{[^']", rb"^\{[^']"]
        self._db = database(patterns, [0] * len(patterns), MARKERS[0])
        self._local = threading.local()

    def first(self, block: bytes, pos: int, end: int) -> int:
        found: list[int] = []

        def on_match(_id: int, _start: int, stop: int, _flags: int, _ctx: object) -> bool:
            found.append(stop - 1)  # a byte of the marker's line (a record's: the byte after "{")
            return True

        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._hs.Scratch(self._db)
        view: Any = memoryview(block)[pos:end]
        with contextlib.suppress(self._hs.ScanTerminated):  # (stopped at the first match)
            self._db.scan(view, match_event_handler=on_match, scratch=scratch)
        return pos + found[0] if found else -1


def marker_finder(prefer_hyperscan: bool) -> Any:
    """An object whose ``first(block, pos, end)`` is an offset on the first line of
    ``block[pos:end]`` (``pos`` at a line start) that holds a marker or starts a JSON record,
    or -1."""
    if prefer_hyperscan:
        try:
            return _Hyperscan()
        except ImportError:
            pass
    return _Finds()
