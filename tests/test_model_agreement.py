"""The post-mortem's account (:func:`oomdoctor.advisor.memory_model.facts`) and ``fit`` use one
memory model: for every vLLM start-up of tests/data/vllm_startups whose model is in the catalog,
the weights per GPU and the KV bytes per token the advisor derives from a log's context (model,
GPU, TP, dtype, KV dtype, version; no printed weights) are the ones ``fit`` computes.

The same holds on every fixture of the corpus where both apply: a vLLM or SGLang finding whose log
names a catalog model and whose GPU memory is known (from the message or the log): the advisor's
weights, KV bytes per token and vLLM budget are the ones ``fit`` (or ``fit --engine sglang``)
computes for that log's settings, wherever the advisor took them from the model rather than from a
figure the log printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.advisor.account import account_for
from oomdoctor.advisor.catalog import find_gpu, find_model, models
from oomdoctor.advisor.fit import fit
from oomdoctor.advisor.memory_model import Facts, facts
from oomdoctor.advisor.sglang_fit import cell_bytes, fit_sglang
from oomdoctor.api import diagnose
from oomdoctor.report import Context, Finding

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "vllm_startups"
FIXTURES = ROOT.parent / "fixtures"
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


def _fixture_findings() -> list[tuple[str, Finding, Context, Facts]]:
    """(fixture, finding, its context, the advisor's facts) where both the advisor and ``fit`` apply."""
    names = {m.name.rsplit("/", 1)[-1].lower() for m in models()}
    out = []
    for log in sorted(FIXTURES.glob("vllm/*.log")) + sorted(FIXTURES.glob("sglang/*.log")):
        if not any(n in log.read_text("utf-8", "replace").lower() for n in names):
            continue  # cheap: a log that names no catalog model cannot apply
        rep = diagnose(log.read_bytes())
        for finding in rep.findings:
            ctx = rep.context_of(finding)
            f = facts(finding, ctx)
            if (finding.engine in ("vllm", "sglang") or ctx.engine in ("vllm", "sglang")) and f.geometry and f.total:
                out.append((log.stem, finding, ctx, f))
    return out


FIXTURE_FINDINGS = _fixture_findings()


def test_the_fixtures_where_both_apply() -> None:
    assert sorted({name for name, *_ in FIXTURE_FINDINGS}) == [
        "synthetic-cuda-graph-oom", "synthetic-decode-then-cuda-oom", "synthetic-v0-worker-capture-oom",
        "synthetic-v1-failed-to-load-model", "synthetic-v1-negative-kv-budget", "synthetic-v1-worker-failed-profiling",
    ]


@pytest.mark.parametrize("item", FIXTURE_FINDINGS, ids=[f"{n}:{fd.rule}" for n, fd, _, _ in FIXTURE_FINDINGS])
def test_advisor_and_fit_agree_on_the_fixture(item: tuple[str, Finding, Context, Facts]) -> None:
    _, finding, ctx, f = item
    geo = find_model(ctx.model)
    assert geo is not None and f.total is not None
    length = int(f.max_model_len.value) if f.max_model_len else None
    common: dict[str, Any] = dict(total_bytes=f.total.value, tensor_parallel_size=f.tp, gpus=f.tp, dtype=ctx.dtype,
                                  kv_cache_dtype=ctx.kv_cache_dtype, max_model_len=length, version=ctx.engine_version)
    from_model = f.weights is not None and f.weights.source not in ("context", "message")
    per_token = f.bytes_per_token is not None and f.bytes_per_token.source not in ("context", "message")
    if (finding.engine if finding.engine in ("vllm", "sglang") else ctx.engine) == "sglang":
        res = fit_sglang(geo, None, mem_fraction_static=ctx.gpu_memory_utilization, **common)
        if per_token:
            assert f.bytes_per_token is not None
            assert cell_bytes(geo, f.kv_dtype_bytes, f.tp) == f.bytes_per_token.value
    else:
        assert f.utilization is not None
        res = fit(geo, None, utilization=f.utilization.value, **common)
        assert f.requested == int(res.total_bytes * res.utilization)
        if per_token and length:
            assert f.bytes_per_token is not None
            assert res.kv_needed == f.bytes_per_token.value * -(-length // 16) * 16
    assert res.total_bytes == f.total.value
    if from_model:
        assert f.weights is not None and f.weights.value == res.weights
    # the report's account (its ledger) assumes the same weights where the log states none
    ledger = {e.name: e for e in account_for(finding, ctx).entries}
    if "weights" in ledger and ledger["weights"].source == "assumed":
        assert ledger["weights"].bytes == res.weights
    assert from_model or per_token  # something the two compute from the model


def test_fit_and_the_advisor_agree_on_a_multimodal_start_up() -> None:
    """vllm-049 (Llama-3.2-11B-Vision on an H100, --max-num-seqs 128; not in the catalog, so fit reads
    its config.json, the fields of tests/test_memory_model_mm.py): the advisor's account of the log
    (GPU total, utilization, the vLLM budget) is the one fit computes for the log's settings; the
    log's KV cache (14.65 GiB, 6001 blocks of 16 tokens at fit's 160 KiB per token) holds a
    65536-token request, and fit, whose encoder term makes the budget negative, answers "uncertain",
    not "does not fit"."""
    from oomdoctor.advisor.catalog import geometry_from_config
    from tests.test_memory_model_mm import MLLAMA_11B

    rep = diagnose((FIXTURES / "vllm" / "vllm-049.log").read_bytes())
    assert rep.findings == []
    ctx = rep.context
    f = facts(None, ctx)
    assert f.total is not None and f.utilization is not None and f.max_model_len is not None
    res = fit(geometry_from_config(MLLAMA_11B, "config.json (t)"), None, total_bytes=f.total.value,
              utilization=f.utilization.value, max_model_len=int(f.max_model_len.value),
              max_num_seqs_given=ctx.max_num_seqs, enforce_eager=bool(ctx.enforce_eager), version=ctx.engine_version)
    assert f.requested == int(res.total_bytes * res.utilization)
    per_token = res.kv_needed // 65536
    assert per_token == 40 * 2 * 8 * 128 * 2 == 163840
    assert f"{6001 * 16 * per_token / 2**30:.2f}" == "14.65" and ctx.kv_cache_bytes is not None
    assert ctx.kv_cache_bytes >= res.kv_needed  # it started with room for one request
    assert res.verdict == "uncertain" and res.kv_budget < 0
