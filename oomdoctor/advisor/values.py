"""Small, named formulas shared by the calculators. Each is exact and documented."""

from __future__ import annotations

import math

#: vLLM's default KV block size (tokens); --max-model-len values are rounded down to it.
BLOCK_SIZE = 16
#: highest --gpu-memory-utilization oomdoctor recommends (headroom for the CUDA context, graphs).
MAX_UTILIZATION = 0.95
#: margin taken off free/total so that a little memory freed by another process is not relied on.
UTILIZATION_MARGIN = 0.01


def round_down(value: float, multiple: int) -> int:
    """Largest multiple of ``multiple`` that is ≤ ``value``."""
    return int(value // multiple) * multiple


def floor_to(value: float, digits: int = 2) -> float:
    """Round down to ``digits`` decimals (never up: a recommended fraction must stay inside a bound)."""
    f = 10**digits
    return math.floor(value * f + 1e-9) / f


def ceil_to(value: float, digits: int = 2) -> float:
    """Round up to ``digits`` decimals (a fraction that must reach at least a need)."""
    f = 10**digits
    return math.ceil(value * f - 1e-9) / f


def fmt_fraction(value: float) -> str:
    return f"{value:.2f}"


def ceil_div(a: int, b: int) -> int:
    """``cdiv`` as vLLM writes it: the smallest integer ≥ a / b."""
    return -(-a // b)


def ceil_gib(value: float) -> int:
    """Whole GiB, rounded up (a GiB flag value that must cover ``value`` bytes)."""
    return max(1, ceil_div(int(value), 2**30))
