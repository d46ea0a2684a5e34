"""Find the lines worth a closer look in one pass over a large block.

The rules' literal triggers are searched case-insensitively in a whole block of complete lines;
only the lines that hold one meet the full regexes. :func:`make_prefilter` picks hyperscan when
it is importable (the ``fast`` extra) and the pure-Python path otherwise; both return the same
line spans.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol


class Prefilter(Protocol):
    def line_spans(self, block: bytes) -> list[tuple[int, int]]:
        """Return sorted, unique ``(start, end)`` byte spans (end excludes ``\\n``) of candidate lines."""
        ...


class PurePrefilter:
    """Lower-case the block once (C speed), then one alternation regex over it."""

    def __init__(self, triggers: Sequence[str]) -> None:
        lits = sorted({t.lower().encode("utf-8") for t in triggers if t}, key=len, reverse=True)
        self._re = re.compile(b"|".join(re.escape(t) for t in lits)) if lits else None

    def line_spans(self, block: bytes) -> list[tuple[int, int]]:
        if self._re is None or not block:
            return []
        lowered = block.lower()
        spans: list[tuple[int, int]] = []
        search = self._re.search
        pos = 0
        n = len(block)
        while pos < n:
            m = search(lowered, pos)
            if m is None:
                break
            start = lowered.rfind(b"\n", 0, m.start()) + 1
            end = lowered.find(b"\n", m.end())
            if end < 0:
                end = n
            spans.append((start, end))
            pos = end + 1
        return spans


def make_prefilter(triggers: Sequence[str], prefer: str = "auto") -> Prefilter:
    """Return the fastest available prefilter (``prefer``: auto, hyperscan or python)."""
    if prefer in ("auto", "hyperscan"):
        try:
            from oomdoctor.prefilter_hs import HyperscanPrefilter
        except ImportError:
            if prefer == "hyperscan":
                raise
        else:
            return HyperscanPrefilter(triggers)
    return PurePrefilter(triggers)
