"""The model and GPU catalogs and config.json reading, value by value (issue 38 §4).

Written against a whole-module mutation run of ``oomdoctor/advisor/catalog.py``: each row is worked
out by hand; changing a byte width, a boundary or a spelling changes at least one row.
"""

from __future__ import annotations

from typing import Any

import pytest

from oomdoctor.advisor.catalog import ModelGeometry
from oomdoctor.advisor.memory_model import facts
from oomdoctor.report import Context

DTYPES = [
    # (spelling, bytes per element)
    ("float32", 4), ("fp32", 4), ("float", 4),
    ("bfloat16", 2), ("bf16", 2), ("float16", 2), ("fp16", 2), ("half", 2), ("auto", 2),
    ("fp8", 1), ("fp8_e4m3", 1), ("fp8_e5m2", 1), ("fp8_inc", 1), ("fp8_ds_mla", 1), ("int8", 1),
]  # fmt: skip


def _geo(**kw: Any) -> ModelGeometry:
    base: dict[str, Any] = {"name": "m", "layers": 2, "attention_heads": 4, "kv_heads": 4, "head_dim": 8,
                            "source": "test"}
    return ModelGeometry(**{**base, **kw})


@pytest.mark.parametrize(("dtype", "width"), DTYPES)
def test_dtype_widths(dtype: str, width: int) -> None:
    # a checkpoint of 1 billion parameters in that dtype
    assert _geo(params=1.0, dtype=dtype).weight_bytes() == 10**9 * width
    if dtype != "auto":  # --kv-cache-dtype auto follows the model's dtype
        assert facts(None, Context(engine="vllm", kv_cache_dtype=dtype)).kv_dtype_bytes == width
