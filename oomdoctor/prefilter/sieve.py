"""Which stretches of a block can hold a needle at all, before the exact search.

The exact pure-Python search (:mod:`.gates`, :mod:`.pure`) needs about ten ``re`` passes over a
block, each entering the matcher on every occurrence of a common letter: 5-13 s per GiB. Yet in
a log most stretches of 32 KiB hold no needle. The Rust ``regex`` crate that pydantic-core (a
dependency) ships for ``pattern`` constraints answers "does this text hold one of these
literals" for all the needles in one pass, at about 2 s per GiB whatever the log's letters. So
a block is cut into pieces of whole lines, each piece is asked, and only the pieces that answer
yes meet the exact search. A piece that answers no holds no needle, so nothing is lost: the
candidates are the same, found sooner.

Where most pieces answer yes (a log full of needles), asking costs more than it saves; then
the sieve steps aside for a while (``REST_CALLS``) and tries again later.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_core import ValidationError

#: bytes per piece asked (cut back to the last newline in it); smaller pieces cost a call each
#: (~1 µs), larger ones send more text to the exact search for each needle found
PIECE = 32 << 10
#: a text shorter than this is not sieved: the exact search on it costs about as much
MIN_TEXT = 64 << 10
#: pieces asked before a busy text may stop the sieve, and how many of them must have said yes
PROBE = 8
BUSY = 6
#: calls the sieve sits out after a busy text
REST_CALLS = 16


#: bytes beyond ASCII to NUL (a piece that is not UTF-8, asked about ASCII needles)
_BEYOND_ASCII_TO_NUL = bytes(range(128)) + bytes(128)


#: each character of Latin-1 but ASCII letters and digits, as a hex escape of Rust's ``regex``
_ESCAPES = {c: f"\\x{{{c:x}}}" for c in range(256) if not (chr(c).isascii() and chr(c).isalnum())}


def _escape(text: str) -> str:
    """``text`` (Latin-1 characters) as a literal in the syntax of Rust's ``regex`` crate."""
    return text.translate(_ESCAPES)


def _validator(source: str) -> Any | None:
    """pydantic-core's validator of strings matching ``source`` with the Rust engine, or None
    where this pydantic-core cannot build one."""
    try:
        from pydantic_core import SchemaValidator, core_schema  # (imported with pydantic anyway)

        try:
            schema = core_schema.str_schema(pattern=source, regex_engine="rust-regex")
        except TypeError:  # older pydantic-core: the Rust engine is the only one
            schema = core_schema.str_schema(pattern=source)
        validator = SchemaValidator(schema)
        if not hasattr(validator, "isinstance_python"):
            return None
        return validator
    except Exception:  # any failure to build only leaves the exact search to do it all
        return None


class Sieve:
    """Asks pydantic-core's Rust regex, piece by piece, whether a block holds one of ``needles``.

    Needles are lower-cased literals without newlines, matched with ASCII case folding. Where
    every needle is ASCII, a piece is passed as bytes, which pydantic reads as UTF-8 (checked in
    Rust; a piece that is not UTF-8 has its bytes beyond ASCII, which cannot be part of a match,
    made NUL first). Otherwise a piece is read as Latin-1 characters, one per byte, and the
    needles' bytes likewise.
    """

    def __init__(self, needles: Sequence[bytes]) -> None:
        self._ascii = all(n.isascii() for n in needles)
        # ASCII case folding, as the exact search's lower-casing of bytes; with a needle beyond
        # ASCII, Unicode's (it folds more, so it answers yes at least as often)
        flags = "i-u" if self._ascii else "i"
        self._source = f"(?{flags}:" + "|".join(_escape(n.decode("latin-1")) for n in needles) + ")"
        self._validator: Any | None = None
        self._pid = -1  # the Rust engine's caches are not carried across fork(): one per process
        self._rest = 0
        #: the last ``ranges`` call stopped asking: most pieces said yes
        self.busy = False

    @classmethod
    def for_needles(cls, needles: Sequence[bytes]) -> Sieve | None:
        """A sieve for ``needles``, or None where it cannot be exact (a needle spans lines, or
        there is none) or this pydantic-core has no Rust regex to ask."""
        if not needles or any(b"\n" in n or not n for n in needles):
            return None
        sieve = cls(needles)
        return sieve if sieve._engine() is not None else None

    def _engine(self) -> Any | None:
        pid = os.getpid()
        if self._pid != pid:
            self._validator = _validator(self._source)
            self._pid = pid
        return self._validator

    def _asker(self, block: bytes, validator: Any) -> Callable[[int, int], bool]:
        """How to ask whether ``block[a:b]`` (whole lines) holds a needle."""
        holds = validator.isinstance_python
        if not self._ascii:
            view = memoryview(block)
            return lambda a, b: holds(str(view[a:b], "latin-1"))  # (no copy of the bytes first)
        if block.isascii():
            return lambda a, b: holds(block[a:b])
        validate = validator.validate_python

        def ask(a: int, b: int) -> bool:
            piece = block[a:b]
            try:
                validate(piece)
                return True
            except ValidationError as exc:
                if exc.errors(include_url=False)[0]["type"] != "string_unicode":
                    return False
            return holds(piece.translate(_BEYOND_ASCII_TO_NUL))  # not UTF-8

        return ask

    @staticmethod
    def _asker_noting(block: bytes, validator: Any, other: Any, held: list[bool]) -> Callable[[int, int], bool]:
        """:meth:`_asker` for an ASCII ``block``, asking ``other`` too until it says yes (noted
        in ``held``): both are asked about one text made once."""
        holds, also = validator.isinstance_python, other.isinstance_python
        view = memoryview(block)

        def ask(a: int, b: int) -> bool:
            text = str(view[a:b], "ascii")
            if not held and also(text):
                held.append(True)
            return bool(holds(text))

        return ask

    def holds(self, text: bytes) -> bool:
        """Whether ``text`` may hold a needle (ASCII case folded): False only when it holds none."""
        validator = self._engine()
        return validator is None or self._asker(text, validator)(0, len(text))

    def ranges(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
        """The stretches ``(start, end)`` of ``block[lo:hi]`` (``lo`` at a line start), each of
        whole lines, outside which no line holds a needle (ASCII case folded): the pieces that
        may hold one, adjacent ones merged. The whole range is one stretch when it is short, or
        while the sieve rests."""
        return self.ranges_noting(block, lo, hi)[0]

    def ranges_noting(
        self, block: bytes, lo: int = 0, hi: int | None = None, also: Sieve | None = None
    ) -> tuple[list[tuple[int, int]], bool | None]:
        """:meth:`ranges`, and whether the range holds one of the needles of ``also``, a sieve
        asked about each piece too, from the same text (making the text costs as much as asking
        about a few needles): None where that is not known (not every piece was asked, or the
        block or the needles of either sieve are not all ASCII)."""
        size = len(block) if hi is None else hi
        self.busy = False
        if size - lo < MIN_TEXT:
            return [(lo, size)], None
        if self._rest:
            self._rest -= 1
            return [(lo, size)], None
        validator = self._engine()
        if validator is None:
            return [(lo, size)], None
        other = also._engine() if also is not None and also._ascii and self._ascii else None
        held: list[bool] = []  # (a yes from ``also``: its one item)
        if other is not None and block.isascii():
            ask = self._asker_noting(block, validator, other, held)
        else:
            other = None
            ask = self._asker(block, validator)
        rfind, find = block.rfind, block.find
        out: list[tuple[int, int]] = []
        asked = said_yes = 0
        pos = lo
        while pos < size:
            cut = rfind(b"\n", pos, min(pos + PIECE, size))
            if cut < 0:  # a line longer than a piece: the piece runs to its end
                cut = find(b"\n", pos + PIECE, size)
            end = size if cut < 0 or cut + 1 >= size else cut + 1
            asked += 1
            if ask(pos, end):
                said_yes += 1
                if out and out[-1][1] == pos:
                    out[-1] = (out[-1][0], end)
                else:
                    out.append((pos, end))
            pos = end
            if asked == PROBE and said_yes >= BUSY and pos < size:  # a busy text: stop asking
                self._rest = REST_CALLS
                self.busy = True
                if not held:
                    other = None  # (the rest was not asked)
                if out and out[-1][1] == pos:
                    out[-1] = (out[-1][0], size)
                else:
                    out.append((pos, size))
                break
        return out, (bool(held) if other is not None else None)
