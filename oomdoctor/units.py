"""Size parsing and formatting.

Every size in oomdoctor is an integer number of bytes. The units that GPU tools print are binary
even when they say "GB" or "MB" (vLLM, PyTorch, MPS, SGLang, TRT-LLM and ggml all divide by 2**30
or 2**20), so ``GB`` means 2**30 here too. Kubernetes quantities (``16Gi``, ``16G``) say which
they mean: :func:`parse_quantity` reads them exactly (a figure with ``units = "quantity"``).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BINARY = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "k": 2**10,
    "kb": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tb": 2**40,
    "tib": 2**40,
    # Kubernetes' binary suffixes (Ki, Mi, Gi, Ti) mean the same here; its decimal ones need
    # parse_quantity, since a bare G here is binary
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
}

_SIZE = re.compile(r"^\s*(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*(?P<unit>[a-zA-Z]*)\s*$")


class SizeError(ValueError):
    """Raised when a text is not a size oomdoctor can read exactly."""


def parse_size(text: str, default_unit: str = "B") -> int:
    """Return the number of bytes in ``text`` (``"1.70 GiB"``, ``"0 bytes"``, ``"78521468kB"``).

    A bare number takes ``default_unit``. The result is the printed value times the unit,
    rounded to the nearest byte, which is exactly how the corpus labels were made.
    """
    m = _SIZE.match(text)
    if not m:
        raise SizeError(f"not a size: {text!r}")
    unit = (m.group("unit") or default_unit).lower()
    if unit not in _BINARY:
        raise SizeError(f"unknown unit {m.group('unit')!r} in {text!r}")
    value = float(m.group("num")) * _BINARY[unit]
    if not math.isfinite(value):
        raise SizeError(f"not a finite size: {text!r}")
    return round(value)


#: Kubernetes quantity suffixes for memory (k8s.io/apimachinery resource.Quantity): binary Ki..Ei,
#: decimal k..E; "m" is milli (a thousandth of a byte), never mega
QUANTITY_SUFFIXES: dict[str, int | Fraction] = {
    "": 1,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "m": Fraction(1, 1000),
}

_QUANTITY = re.compile(r"^\s*(?P<num>\+?(?:\d+(?:\.\d*)?|\.\d+))(?:(?P<suffix>[KMGTPE]i|[kMGTPEm])|[eE](?P<exp>[-+]?\d+))?\s*$")


def parse_quantity(text: str) -> int:
    """Bytes in a Kubernetes memory quantity, exactly: ``"16Gi"`` = 16 × 2**30, ``"16G"`` = 16 × 10**9,
    ``"1.5Gi"``, ``"129e6"``, ``"128974848"``. Case matters (``M`` is mega, ``m`` milli); a
    fraction of a byte rounds up, as Kubernetes does."""
    m = _QUANTITY.match(text)
    if not m:
        raise SizeError(f"not a Kubernetes quantity: {text!r}")
    value = Fraction(m.group("num"))
    if m.group("exp") is not None:
        exp = int(m.group("exp"))
        if abs(exp) > 30:
            raise SizeError(f"not a plausible memory quantity: {text!r}")
        value *= Fraction(10) ** exp
    else:
        value *= QUANTITY_SUFFIXES[m.group("suffix") or ""]
    return math.ceil(value)


def format_quantity(n: int) -> str:
    """``n`` bytes as a Kubernetes quantity, exactly, in the largest unit that divides it
    (``34359738368`` -> ``32Gi``, ``32000000000`` -> ``32G``)."""
    best = ("", 1)
    for suffix, factor in QUANTITY_SUFFIXES.items():
        if isinstance(factor, int) and factor > best[1] and n % factor == 0:
            best = (suffix, factor)
    return f"{n // best[1]}{best[0]}"


def format_size(n: int | float | None) -> str:
    """Render bytes as a short binary size, e.g. ``1.50 GiB``."""
    if n is None:
        return "?"
    sign = "-" if n < 0 else ""
    v = abs(float(n))
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if v >= factor:
            return f"{sign}{v / factor:.2f} {unit}"
    return f"{sign}{int(v)} B"
