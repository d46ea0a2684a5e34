"""Find the next line that normalising may change, or that holds a frame's "File ", in one pass.

The scanner sets phase-evidence lines aside unread (:meth:`oomdoctor.scanner.Scanner._between`),
except the few that normalising may change (a JSON record with escapes in it, ANSI or NUL bytes,
a character whose lower case is ASCII) or that may be a traceback frame: those it reads where
they are. This finds the first such line of a stretch: one hyperscan scan that stops at the
first hit (the ``fast`` extra), else one ``bytes.find`` per marker.

A JSON record whose only escapes end a string (docker's json-file lines: ``"log":"...\\n"``,
see :func:`oomdoctor.reader.record_only_cut`) is not such a line: unwrapping it only cuts, so
a JSON log's throughput lines are set aside like a plain log's.
"""

from __future__ import annotations

import contextlib
from typing import Any

from oomdoctor.reader import _ANSI_MARKER_BYTES, FOLDS_TO_ASCII, record_only_cut

#: bytes whose line :func:`oomdoctor.reader.only_cut_by_normalise` rejects, and a frame's "File "
#: (a JSON record with an escape that does not end a string is one too: see ``first``)
MARKERS: tuple[bytes, ...] = (b"File ", b"\x00", *_ANSI_MARKER_BYTES, *FOLDS_TO_ASCII)


def _next_record(block: bytes, pos: int, end: int) -> int:
    """Offset of the first line of ``block[pos:end]`` (``pos`` at a line start) that is a JSON
    record unwrapping may change (it starts with "{" and :func:`record_only_cut` fails), or -1;
    a Python dict ("{'") is none."""

    def next_brace(at: int) -> int:
        """Start of the first line at or after ``at`` (a line start) that starts with "{", or -1."""
        if block.startswith(b"{", at):
            return at
        found = block.find(b"\n{", at, end)
        return found + 1 if found >= 0 else -1

    at = next_brace(pos)
    while 0 <= at < end:
        stop = block.find(b"\n", at, end)
        if stop < 0:
            stop = end
        line = block[at:stop]
        if not line.startswith(b"{'") and not record_only_cut(line):
            return at
        if stop >= end:
            break
        at = next_brace(stop + 1)
    return -1


#: the markers that are not ASCII: an ASCII stretch (most) is not searched for them
_NON_ASCII = tuple(mk for mk in MARKERS if not mk.isascii())
_ASCII = tuple(mk for mk in MARKERS if mk.isascii())


class _Finds:
    """One ``bytes.find`` per marker (the non-ASCII ones only where the text is not ASCII)."""

    def first(self, block: bytes, pos: int, end: int) -> int:
        best = _next_record(block, pos, end)
        view = block[pos:end] if pos or end != len(block) else block
        for mk in _ASCII if view.isascii() else MARKERS:
            at = block.find(mk, pos, best if best >= 0 else end)
            if at >= 0:
                best = at
        return best


class _Hyperscan:
    """Every marker in one hyperscan database, which also stops at a line that starts with "{";
    from there on, a second one that also finds every backslash not starting a string-ending
    ``\\n"`` (on a JSON record's line: a marker). So a log without records (most) is scanned
    once, for the markers only."""

    def __init__(self) -> None:
        import threading

        import hyperscan

        from oomdoctor.prefilter.hsdb import database

        self._hs = hyperscan
        literals = [b"".join(b"\\x%02x" % c for c in mk) for mk in MARKERS]
        self._special = len(literals)  # ids from here on: a record's line starts / a backslash
        plain = [*literals, rb"\n\{"]
        self._plain = database(plain, [0] * len(plain), MARKERS[0])
        records = [*literals, rb"\\[^n]", rb'\\n[^"]']
        self._records = database(records, [0] * len(records), MARKERS[0])
        self._local = threading.local()

    def first(self, block: bytes, pos: int, end: int) -> int:
        if not block.startswith(b"{", pos):
            at, brace = self._scan(self._plain, "plain", block, pos, end)
            if not brace:
                return at
            pos = at  # the first line that starts with "{"
        return self._scan(self._records, "records", block, pos, end)[0]

    def _scan(self, db: Any, name: str, block: bytes, pos: int, end: int) -> tuple[int, bool]:
        """The first match of ``db`` in ``block[pos:end]`` that counts, and whether it is the
        start of a line that starts with "{" (``self._plain``); (-1, False) when none does."""
        found: list[tuple[int, bool]] = []
        special = self._special
        startswith = block.startswith
        rfind = block.rfind

        def on_match(id_: int, _start: int, stop: int, _flags: int, _ctx: object) -> bool:
            at = pos + stop - 1  # a byte of the marker's line ("{" / the byte after a backslash)
            if id_ < special:
                found.append((at, False))
            elif db is self._plain:
                found.append((at, True))
            else:  # a backslash: only a JSON record's line counts
                line = rfind(b"\n", pos, at) + 1 or pos
                if not startswith(b"{", line) or startswith(b"{'", line):
                    return False
                found.append((at, False))
            return True

        scratch = getattr(self._local, name, None)
        if scratch is None:
            scratch = self._hs.Scratch(db)
            setattr(self._local, name, scratch)
        view: Any = memoryview(block)[pos:end]
        with contextlib.suppress(self._hs.ScanTerminated):  # (stopped at the first match)
            db.scan(view, match_event_handler=on_match, scratch=scratch)
        return found[0] if found else (-1, False)


def marker_finder(prefer_hyperscan: bool) -> Any:
    """An object whose ``first(block, pos, end)`` is an offset on the first line of
    ``block[pos:end]`` (``pos`` at a line start) that holds a marker or is a JSON record
    unwrapping may change, or -1."""
    if prefer_hyperscan:
        try:
            return _Hyperscan()
        except ImportError:
            pass
    return _Finds()
