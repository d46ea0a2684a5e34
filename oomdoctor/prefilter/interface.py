"""What every prefilter answers: the candidate lines of a block, with the needles each holds.

A prefilter searches the rules' literal triggers case-insensitively (ASCII case folding) in a
whole block of complete lines; only the lines that hold one meet the full regexes. Every
implementation (:mod:`.hyperscan_path`, :mod:`.pure`, :class:`.pool.Precomputed`) returns the
same spans for the same block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Prefilter(Protocol):
    """Finds a block's candidate lines.

    A prefilter may also have ``mask(text: bytes) -> int``, the bit mask of the needles ``text``
    holds anywhere (ASCII case folded), where one call costs much less than testing each trigger
    (hyperscan: one scan). The scanner asks it about lines that normalising changed; without it,
    every trigger is tested on such a line."""

    #: the literals searched (see :func:`needles`); bit ``i`` of a candidate's mask is ``needles[i]``
    needles: list[bytes]

    def candidates(self, block: bytes, lo: int = 0, hi: int | None = None) -> list[tuple[int, int, int]]:
        """Return the candidate lines of ``block[lo:hi]`` (``lo`` at a line start), sorted and
        unique, as ``(start, end, mask)``: byte offsets into ``block`` (end excludes ``\\n``) and
        the bit mask of the needles the line holds (ASCII case folded)."""
        ...


def needles(triggers: Sequence[str]) -> list[bytes]:
    """The literals to search: lower-cased UTF-8, without blanks, duplicates, and literals that
    contain another one (a line holding the longer one holds the shorter one too); shortest
    first, in an order that does not change from run to run (a mask's bits name them, and a
    compiled database is cached under them)."""
    lits = sorted({t.lower().encode("utf-8") for t in triggers if t}, key=lambda lit: (len(lit), lit))
    kept: list[bytes] = []
    for lit in lits:
        if not any(k in lit for k in kept):
            kept.append(lit)
    return kept
