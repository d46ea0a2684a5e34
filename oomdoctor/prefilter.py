"""Find the lines worth a closer look in one pass over a large block.

The rules' literal triggers are searched case-insensitively (ASCII case folding) in a whole block
of complete lines; only the lines that hold one meet the full regexes. :func:`make_prefilter`
picks hyperscan when it is importable (the ``fast`` extra) and the pure-Python path otherwise;
both return the same line spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol


class Prefilter(Protocol):
    #: the literals searched (see :func:`needles`); bit ``i`` of a candidate's mask is ``needles[i]``
    needles: list[bytes]

    def candidates(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
        """Return the candidate lines of ``block[lo:hi]`` (``lo`` at a line start), sorted and
        unique, as ``(start, end, mask)``: byte offsets into ``block`` (end excludes ``\\n``) and
        the bit mask of the needles the line holds (ASCII case folded)."""
        ...

    def line_spans(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
        """The ``(start, end)`` spans of :meth:`candidates`."""
        ...


class SpansMixin:
    """``line_spans`` for a prefilter that implements ``candidates``."""

    def candidates(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
        raise NotImplementedError

    def line_spans(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int]]:
        return [(start, end) for start, end, _ in self.candidates(block, lo, hi)]


def needles(triggers: Sequence[str]) -> list[bytes]:
    """The literals to search: lower-cased UTF-8, without blanks, duplicates, and literals that
    contain another one (a line holding the longer one holds the shorter one too)."""
    lits = sorted({t.lower().encode("utf-8") for t in triggers if t}, key=len)
    kept: list[bytes] = []
    for lit in lits:
        if not any(k in lit for k in kept):
            kept.append(lit)
    return kept


class PurePrefilter(SpansMixin):
    """Lower-case the block once (C speed), then one ``bytes.find`` pass per literal.

    ``bytes.find`` over a whole block runs at memory speed (a few hundred MB/s to GB/s per
    literal), far faster than a regex alternation or any per-line Python work. After a hit the
    search for that literal resumes at the end of the line, so a literal that appears on many
    lines costs one ``find`` per line holding it.
    """

    def __init__(self, triggers: Sequence[str]) -> None:
        self.needles = needles(triggers)

    def candidates(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
        n = len(block) if hi is None else hi
        if not self.needles or n <= lo:
            return []
        lowered = block.lower()
        find = lowered.find
        rfind = lowered.rfind
        found: dict[int, list[int]] = {}  # line start -> [end, mask]
        for i, needle in enumerate(self.needles):
            bit = 1 << i
            pos = find(needle, lo, n)
            while pos >= 0:
                start = rfind(b"\n", 0, pos) + 1  # >= lo: lo starts a line
                slot = found.get(start)
                if slot is None:
                    end = find(b"\n", pos + len(needle), n)
                    if end < 0:
                        end = n
                    found[start] = [end, bit]
                else:
                    end = slot[0]
                    slot[1] |= bit
                if end >= n:
                    break
                pos = find(needle, end + 1, n)
        return [(start, end, mask) for start, (end, mask) in sorted(found.items())]


@lru_cache(maxsize=8)
def _cached(triggers: tuple[str, ...], prefer: str) -> Prefilter:
    if prefer in ("auto", "hyperscan"):
        try:
            from oomdoctor.prefilter_hs import HyperscanPrefilter
        except ImportError:
            if prefer == "hyperscan":
                raise
        else:
            return HyperscanPrefilter(triggers)
    return PurePrefilter(triggers)


def make_prefilter(triggers: Sequence[str], prefer: str = "auto") -> Prefilter:
    """Return the fastest available prefilter (``prefer``: auto, hyperscan or python).

    Prefilters hold no per-scan state, so one is compiled per set of triggers and reused.
    ``OOMDOCTOR_PREFILTER=python`` (or ``hyperscan``) overrides ``auto``.
    """
    if prefer == "auto":
        import os

        prefer = os.environ.get("OOMDOCTOR_PREFILTER", "auto") or "auto"
    if prefer not in ("auto", "hyperscan", "python"):
        raise ValueError(f"unknown prefilter {prefer!r} (choose auto, hyperscan or python)")
    return _cached(tuple(triggers), prefer)
