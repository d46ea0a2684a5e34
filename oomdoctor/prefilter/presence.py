"""Which of a few literals a stretch of a log holds, in one pass that does not visit each line.

The scanner asks it before it sets a stretch aside unread: a periodic context line (a scheduler's
batch line) gives its fact at its latest occurrence, so a stretch that holds one is searched
backwards for it, and one that holds none is not searched at all. Hyperscan answers with one
scan that reports each literal once (``HS_FLAG_SINGLEMATCH``); without it, pydantic-core's Rust
regex answers literal by literal (see :mod:`.sieve`); without that, the stretch is lower-cased
and searched.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from oomdoctor.prefilter.interface import with_json_forms
from oomdoctor.prefilter.sieve import Sieve


class Presence:
    """``which(block, lo, hi)``: the bit mask of the literals ``block[lo:hi]`` holds (lower-cased
    literals, ASCII case folded, as the prefilters match)."""

    def __init__(self, literals: Sequence[bytes], engine: str = "auto") -> None:
        """``engine``: ``auto`` (hyperscan when installed, else the sieve, else a search of the
        lower-cased text), ``sieve`` (the sieve where it can be exact, else the search) or
        ``find`` (the search)."""
        self.literals = tuple(literals)
        self._db: Any = None
        #: each literal and its JSON forms (a record's bytes hold one of those: see json_forms)
        forms = with_json_forms(self.literals)
        self._forms = [[form for form, j in forms if j == k] for k in range(len(self.literals))]
        self._sieves: list[Sieve | None] = [None] * len(self.literals)
        self._local = threading.local()
        if not self.literals or engine == "find":
            return
        if engine == "auto":
            try:
                import hyperscan

                from oomdoctor.prefilter.hsdb import database
            except ImportError:
                pass
            else:
                self._hs = hyperscan
                self._db = database(
                    [b"".join(b"\\x%02x" % c for c in form) for form, _ in forms],
                    [hyperscan.HS_FLAG_CASELESS | hyperscan.HS_FLAG_SINGLEMATCH] * len(forms),
                    self.literals[0],
                    [k for _, k in forms],
                )
                return
        self._sieves = [Sieve.for_needles(each) for each in self._forms]

    def which(self, block: bytes, lo: int = 0, hi: int | None = None) -> int:
        n = len(block) if hi is None else hi
        if not self.literals or n <= lo:
            return 0
        if self._db is not None:
            bits = 0

            def on_match(id_: int, _start: int, _end: int, _flags: int, _ctx: object) -> None:
                nonlocal bits
                bits |= 1 << id_

            scratch = getattr(self._local, "scratch", None)
            if scratch is None:
                scratch = self._local.scratch = self._hs.Scratch(self._db)
            self._db.scan(memoryview(block)[lo:n], match_event_handler=on_match, scratch=scratch)
            return bits
        text = block[lo:n]
        low: bytes | None = None
        bits = 0
        for i, (each, sieve) in enumerate(zip(self._forms, self._sieves, strict=True)):
            if sieve is not None:
                if sieve.holds(text):
                    bits |= 1 << i
                continue
            if low is None:
                low = text.lower()
            if any(form in low for form in each):
                bits |= 1 << i
        return bits
