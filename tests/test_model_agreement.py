"""The post-mortem's account (:func:`oomdoctor.advisor.memory_model.facts`) and ``fit`` use one
memory model: for every vLLM start-up of tests/data/vllm_startups whose model is in the catalog,
the weights per GPU and the KV bytes per token the advisor derives from a log's context (model,
GPU, TP, dtype, KV dtype, version; no printed weights) are the ones ``fit`` computes.

The fixture corpus has no log that names both a catalog model and a catalog GPU (checked: the
logs name local paths or checkpoints outside the catalog), so the start-ups stand in for it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.advisor.catalog import find_gpu, find_model
from oomdoctor.advisor.fit import fit
from oomdoctor.advisor.memory_model import facts
from oomdoctor.report import Context

DATA = Path(__file__).resolve().parent / "data" / "vllm_startups"
CASES = [c for c in json.loads((DATA / "cases.json").read_text("utf-8"))["cases"] if find_model(c.get("model"))]


def test_enough_cases_have_both() -> None:
    assert len(CASES) == 18


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_advisor_and_fit_agree(case: dict[str, Any]) -> None:
    geo, gpu = find_model(case["model"]), find_gpu(case["gpu"])
    assert geo is not None and gpu is not None
    ctx = Context(engine="vllm", engine_version=case["ver"], model=case["model"], gpu_name=case["gpu"],
                  tensor_parallel_size=case["tp"], dtype=case.get("dtype"), kv_cache_dtype=case.get("kvd"),
                  max_model_len=case["len"], gpu_memory_utilization=case["util"])
    f = facts(None, ctx)
    res = fit(geo, gpu, tensor_parallel_size=case["tp"], gpus=case["tp"], dtype=case.get("dtype"),
              version=case["ver"], max_model_len=case["len"], kv_cache_dtype=case.get("kvd"),
              utilization=case["util"])
    assert f.weights is not None and f.weights.value == res.weights
    assert f.total is not None and f.total.value == res.total_bytes
    assert f.requested == int(res.total_bytes * res.utilization)
    if not geo.sliding_window_layers:
        assert f.bytes_per_token is not None
        assert res.kv_needed == f.bytes_per_token.value * -(-case["len"] // 16) * 16
