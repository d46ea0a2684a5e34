"""Pick a prefilter: hyperscan when it is importable (the ``fast`` extra), else the pure path."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache

from oomdoctor.prefilter.interface import Prefilter
from oomdoctor.prefilter.pure import PurePrefilter


@lru_cache(maxsize=8)
def _cached(triggers: tuple[str, ...], prefer: str, present: tuple[bytes, ...]) -> Prefilter:
    if prefer in ("auto", "hyperscan"):
        try:
            from oomdoctor.prefilter.hyperscan_path import HyperscanPrefilter
        except ImportError:
            if prefer == "hyperscan":
                raise
        else:
            return HyperscanPrefilter(triggers, present)
    return PurePrefilter(triggers, present)


def make_prefilter(triggers: Sequence[str], prefer: str = "auto", present: Sequence[bytes] = ()) -> Prefilter:
    """Return the fastest available prefilter (``prefer``: auto, hyperscan or python).

    Prefilters hold no per-scan state, so one is compiled per set of triggers and reused.
    ``OOMDOCTOR_PREFILTER=python`` (or ``hyperscan``) overrides ``auto``. ``present``: literals
    each scan also notes (hyperscan: where each first occurs; the pure path: whether the range
    holds one, where it sieved all of it), for ``present_in`` (lower-cased; none of them is
    reported as a candidate).
    """
    if prefer == "auto":
        prefer = os.environ.get("OOMDOCTOR_PREFILTER", "auto") or "auto"
    if prefer not in ("auto", "hyperscan", "python"):
        raise ValueError(f"unknown prefilter {prefer!r} (choose auto, hyperscan or python)")
    return _cached(tuple(triggers), prefer, tuple(present))
