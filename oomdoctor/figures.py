"""Turn regex groups into typed figures (sizes in bytes, counts, ratios)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oomdoctor.units import SizeError, parse_quantity, parse_size


def infer_type(name: str) -> str:
    if name.endswith("_bytes"):
        return "size"
    return "number"


def convert(name: str, text: str, types: Mapping[str, str], units: Mapping[str, str]) -> Any:
    """Convert one captured text; ``None`` when it cannot be read exactly."""
    kind = types.get(name) or infer_type(name)
    text = text.strip()
    try:
        if kind == "size":
            if units.get(name) == "quantity":  # a Kubernetes quantity: 16Gi, 16G, 1500Mi, 129e6
                return parse_quantity(text)
            return parse_size(text.replace(",", ""), units.get(name, "B"))
        if kind == "int":
            return int(text.replace(",", ""))
        if kind == "float":
            return float(text)
        if kind == "int-list":
            parts = [p for p in text.replace("(", " ").replace(")", " ").replace(",", " ").split() if p]
            return [int(p) for p in parts]
        if kind == "str":
            return text
        # number: int when it looks like one, else float
        clean = text.replace(",", "")
        try:
            return int(clean)
        except ValueError:
            return float(clean)
    except (SizeError, ValueError):
        return None


def groups_to_figures(
    groups: Mapping[str, str | None], types: Mapping[str, str], units: Mapping[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, text in groups.items():
        if text is None or name.startswith("_"):
            continue
        value = convert(name, text, types, units)
        if value is not None:
            out[name] = value
    return out
