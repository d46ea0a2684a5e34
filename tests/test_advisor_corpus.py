"""Acceptance: the advice for every vLLM KV-cache and startup case of the corpus agrees with the log.

The finding comes from scanning the fixture when the pack has a rule for it; otherwise it is built
from the label's figures, with the context the scanner collected from the same log.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from oomdoctor.advisor import rank_remedies
from oomdoctor.advisor.catalog import find_model
from oomdoctor.advisor.fit import KV_IDS, NO_BLOCKS_IDS
from oomdoctor.advisor.memory_model import GiB, capacity_from_figures, facts
from oomdoctor.advisor.registry import AdviceInput
from oomdoctor.api import diagnose
from oomdoctor.report import Finding, Location, Remedy
from tests.corpus import FIXTURES, expected_figures

CASES = ["vllm-001", "vllm-002", "vllm-008", "vllm-016", "vllm-019", "vllm-021", "vllm-054"]
STARTUP_IDS = ["vllm.gpu-memory-utilization.fit-free", "vllm.max-model-len", "vllm.kv-cache-dtype-fp8"]


def _case(case: str) -> tuple[dict[str, Any], Any, Finding, list[Remedy]]:
    label = json.loads((FIXTURES / "vllm" / f"{case}.label.json").read_text())
    report = diagnose((FIXTURES / "vllm" / f"{case}.log").read_text(errors="replace"))
    found = [f for f in report.findings if f.kind == label["kind"]]
    figures = expected_figures(label)
    if found:
        finding = found[0]
        finding.figures = {**figures, **finding.figures}
    else:
        finding = Finding(rule="corpus", kind=label["kind"], engine="vllm", severity="error", phase=label["phase"],
                          title="t", message="m", location=Location(line=1, end_line=1), figures=figures)
    ids = {"vllm.kv-cache.max-len-exceeds": KV_IDS, "vllm.kv-cache.no-blocks": NO_BLOCKS_IDS}.get(
        label["kind"], STARTUP_IDS)
    rems = rank_remedies(ids, AdviceInput(finding, report.context, {}))
    return label, report, finding, rems


@pytest.mark.parametrize("case", CASES)
def test_top_remedy_is_consistent_with_the_log(case: str) -> None:
    label, _, _, rems = _case(case)
    assert rems, "no remedy"
    top = rems[0]
    assert top.fits is not False
    n = label["numbers"]
    cap = n.get("estimated_max_model_len") or n.get("kv_cache_tokens")
    if "--max-model-len" in top.flags:
        value = int(top.flags["--max-model-len"])
        assert value < n["max_seq_len"]
        assert value % 16 == 0
        if cap:
            assert value <= cap
        if "kv_cache_needed" in n:  # never more than the available bytes hold
            per_token = n["kv_cache_needed"]["bytes"] / (-(-n["max_seq_len"] // 16) * 16)
            assert value * per_token <= n["kv_cache_available"]["bytes"]
    for r in rems:
        if "--gpu-memory-utilization" in r.flags:
            u = float(r.flags["--gpu-memory-utilization"])
            assert u <= 0.95
            if "free" in n:
                assert u <= n["free"]["bytes"] / n["total"]["bytes"]


def test_exact_top_values() -> None:
    assert _case("vllm-001")[3][0].flags == {"--max-model-len": "4512"}
    assert _case("vllm-002")[3][0].flags == {"--max-model-len": "3664"}
    assert _case("vllm-054")[3][0].flags == {"--max-model-len": "81392"}
    # 9.97 GiB available, 24.00 GiB for 1048576 tokens, both at their unfavourable rounding edge
    assert _case("vllm-008")[3][0].flags == {"--max-model-len": "435280"}
    assert _case("vllm-019")[3][0].flags == {"--gpu-memory-utilization": "0.93"}
    assert _case("vllm-021")[3][0].flags == {"--gpu-memory-utilization": "0.88"}


def test_v0_budget_formula_reproduces_the_logged_kv_figure() -> None:
    # vllm-016: 8.00 GiB × 0.70 − 5.20 − 0.03 − 1.42 = −1.05 GiB, as vLLM prints
    _, report, finding, rems = _case("vllm-016")
    f = facts(finding, report.context, {})
    assert f.kv_budget is not None and report.context.kv_cache_bytes is not None
    assert abs(f.kv_budget - report.context.kv_cache_bytes) <= 0.01 * GiB
    top = rems[0]
    assert top.id == "vllm.gpu-memory-utilization.raise-for-kv"
    # lacks ≥ 1.05 GiB of 8 GiB: 0.70 + 0.1318 → 0.84, + 0.02 for the KV of at least one request
    # an LLM(...) script: the engine argument as its keyword
    assert top.settings == {"gpu_memory_utilization": "0.86"} and top.fits is None


def test_v0_cpu_blocks_match_the_model_geometry() -> None:
    # vllm-016 (Qwen2.5-7B): "# CPU blocks: 4681" = 4 GiB default swap // (16 tokens × 56 KiB)
    text = (FIXTURES / "vllm" / "vllm-016.log").read_text()
    assert "# CPU blocks: 4681" in text
    qwen = find_model("Qwen/Qwen2.5-7B")
    assert qwen is not None
    assert 4 * GiB // int(16 * qwen.kv_entry_bytes(2) * qwen.layers) == 4681


def test_v1_needed_bytes_match_llama_geometry() -> None:
    # rule example of vllm.v1.kv-cache.max-len-exceeds: 16.00 GB needed for 131072 tokens = 128 KiB/token,
    # Llama-3.1-8B's 2 × 32 layers × 8 KV heads × 128 × 2 bytes
    llama = find_model("meta-llama/Llama-3.1-8B")
    assert llama is not None
    assert llama.kv_entry_bytes(2) * llama.layers == 17179869184 / 131072


def test_v1_figures_reproduce_the_printed_estimate() -> None:
    label = json.loads((FIXTURES / "vllm" / "vllm-054.label.json").read_text())["numbers"]
    cap = capacity_from_figures(label["kv_cache_needed"]["bytes"], label["kv_cache_available"]["bytes"],
                                label["max_seq_len"])
    assert label["estimated_max_model_len"] * 0.999 <= cap <= label["estimated_max_model_len"]
