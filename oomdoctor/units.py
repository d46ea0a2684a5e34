"""Size parsing and formatting.

Every size in oomdoctor is an integer number of bytes. The units that GPU tools print are binary
even when they say "GB" or "MB" (vLLM, PyTorch, MPS, SGLang, TRT-LLM and ggml all divide by 2**30
or 2**20), so ``GB`` means 2**30 here too. Only the spelled-out SI forms a caller asks for
explicitly (``si=True``) are decimal.
"""

from __future__ import annotations

import math
import re

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
