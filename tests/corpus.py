"""Helpers to read the real-log fixtures and their labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

#: label key -> report figure name (shared/corpus/README.md)
LABEL_FIGURES = {
    "requested": "requested_bytes",
    "total": "total_bytes",
    "free": "free_bytes",
    "allocated_by_pytorch": "allocated_bytes",
    "reserved_by_pytorch": "reserved_bytes",
    "reserved_unallocated": "reserved_unallocated_bytes",
    "non_pytorch": "non_pytorch_bytes",
    "in_use": "in_use_bytes",
    "private_pools": "private_pool_bytes",
    "allowed": "allowed_bytes",
    "kv_cache_needed": "kv_cache_needed_bytes",
    "kv_cache_available": "kv_cache_available_bytes",
    "desired": "desired_bytes",
    "mps_allocated": "mps_allocated_bytes",
    "other_allocations": "other_allocations_bytes",
    "max_allowed": "max_allowed_bytes",
    "dummy_requests": "num_dummy_requests",
    "gpu_index": "gpu_index",
    "max_seq_len": "max_seq_len",
    "kv_cache_tokens": "kv_cache_tokens",
    "estimated_max_model_len": "estimated_max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "prefill_tokens": "prefill_tokens",
    "other_processes": "other_processes",
}

PHASE_ALIASES = {"serving": "inference", None: "unknown", "-": "unknown"}


def label_value(v: Any) -> Any:
    if isinstance(v, dict) and "bytes" in v:
        return v["bytes"]
    if isinstance(v, list):
        out = []
        for item in v:
            if isinstance(item, dict):
                out.append({LABEL_FIGURES.get(k, k): label_value(x) for k, x in item.items()})
            else:
                out.append(item)
        return out
    return v


def expected_figures(label: dict[str, Any]) -> dict[str, Any]:
    """The figures a finding must carry, from the label's numbers (mapped keys only)."""
    out = {}
    for k, v in label.get("numbers", {}).items():
        if k in LABEL_FIGURES:
            out[LABEL_FIGURES[k]] = label_value(v)
    return out


def labelled_cases() -> list[Path]:
    return sorted(FIXTURES.glob("*/*.label.json"))


def log_for(label_path: Path) -> Path:
    return label_path.with_name(label_path.name.replace(".label.json", ".log"))
