"""Pieces every human-readable renderer shares."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from oomdoctor.report import Finding, Remedy
from oomdoctor.units import format_size

#: figures shown first, in this order, with a label
FIGURE_LABELS: dict[str, str] = {
    "requested_bytes": "requested",
    "total_bytes": "GPU total",
    "free_bytes": "free",
    "in_use_bytes": "this process",
    "allocated_bytes": "allocated by PyTorch",
    "reserved_bytes": "reserved by PyTorch",
    "reserved_unallocated_bytes": "reserved, unallocated",
    "private_pool_bytes": "private pools",
    "max_seq_len": "max seq len",
    "kv_cache_tokens": "KV cache tokens",
    "kv_cache_needed_bytes": "KV cache needed",
    "kv_cache_available_bytes": "KV cache available",
    "estimated_max_model_len": "estimated max model len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "desired_bytes": "desired",
}


def figure_value(name: str, value: Any) -> str:
    if name == "other_processes" and isinstance(value, list):
        return ", ".join(f"pid {p.get('pid')}: {format_size(p.get('in_use_bytes'))}" for p in value[:6]) + (
            f" (+{len(value) - 6} more)" if len(value) > 6 else ""
        )
    if name.endswith("_bytes") and isinstance(value, int):
        return format_size(value)
    return str(value)


def figure_items(f: Finding) -> list[tuple[str, str]]:
    names = [n for n in FIGURE_LABELS if n in f.figures] + [n for n in f.figures if n not in FIGURE_LABELS]
    return [(FIGURE_LABELS.get(n, n.replace("_bytes", "").replace("_", " ")), figure_value(n, f.figures[n])) for n in names]


def remedy_snippet(r: Remedy) -> str:
    """The copy-pasteable part of a remedy: env assignments and flags."""
    parts: list[str] = []
    parts += [f"{k}={shlex.quote(v)}" for k, v in r.env.items()]
    for k, v in r.flags.items():
        parts.append(k if v == "" else f"{k} {shlex.quote(v)}")
    parts += [f"{k}={v}" for k, v in r.settings.items()]
    return " ".join(parts)


def remedy_headline(r: Remedy, code: Callable[[str], str], esc: Callable[[str], str] = str) -> str:
    """``N. Title: `flags` _(fits, saves X)_``, the first line of a remedy in chat renderers."""
    snippet = remedy_snippet(r)
    saves = f", saves {format_size(r.saves_bytes)}" if r.saves_bytes else ""
    return f"{r.rank}. {esc(r.title)}" + (f": {code(snippet)}" if snippet else "") + f" _({fits_label(r)}{saves})_"


def fits_label(r: Remedy) -> str:
    return {True: "fits", False: "not enough alone", None: "may help"}[r.fits]


def where(f: Finding) -> str:
    loc = f.location
    span = f"{loc.line}" if loc.end_line == loc.line else f"{loc.line}-{loc.end_line}"
    return f"{loc.source}:{span}"


def occurrences_note(f: Finding) -> str:
    if f.occurrences <= 1:
        return ""
    ranks = f" on {len(f.ranks)} ranks/workers" if len(f.ranks) > 1 else ""
    return f"{f.occurrences}×{ranks}"
