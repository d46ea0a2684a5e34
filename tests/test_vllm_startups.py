"""``fit`` against real vLLM start-ups: every figure vLLM printed (tests/data/vllm_startups/cases.json,
copied from research/vllm-startups) compared with what ``fit`` computes for the logged settings.

Run with ``-s`` to see the table of errors (the README shows it).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.advisor.catalog import ModelGeometry, find_gpu, find_model, load_config
from oomdoctor.advisor.fit import FitResult, fit

DATA = Path(__file__).resolve().parent / "data" / "vllm_startups"
CASES: list[dict[str, Any]] = json.loads((DATA / "cases.json").read_text("utf-8"))["cases"]
GiB = 2**30


def geometry(case: dict[str, Any]) -> ModelGeometry:
    if "cfg" in case:
        return load_config(DATA / case["cfg"])
    geo = find_model(case["model"])
    assert geo is not None, case["model"]
    return geo


def run(case: dict[str, Any]) -> FitResult:
    """``oomdoctor fit`` with the settings the start-up logged (the GPU by name, as a user gives it)."""
    gpu = find_gpu(case["gpu"])
    assert gpu is not None, case["gpu"]
    return fit(
        geometry(case), gpu, tensor_parallel_size=case["tp"], gpus=case["tp"], max_model_len=case["len"],
        utilization=case["util"], version=case["ver"], kv_cache_dtype=case.get("kvd"), dtype=case.get("dtype"),
        max_num_batched_tokens=case.get("batched"),
    )


@dataclass
class Row:
    id: str
    weights_err: float | None
    kv_err: float | None  # KV cache tokens (or GiB where vLLM printed no tokens)
    kv_what: str
    verdict: str  # "right", "WRONG" or "" (outcome unknown)


def rel(pred: float, actual: float) -> float:
    return (pred - actual) / actual


def evaluate(case: dict[str, Any]) -> Row:
    res = run(case)
    w = rel(res.weights / GiB, case["w"]) if "w" in case else None
    kv, what = None, ""
    if "tok" in case:
        kv, what = rel(res.kv_tokens, case["tok"]), "tokens"
    elif case.get("kv", 0) > 0:
        kv, what = rel(res.kv_budget / GiB, case["kv"]), "GiB"
    verdict = ""
    if "fits" in case:
        verdict = "right" if res.fits == case["fits"] else "WRONG"
    return Row(case["id"], w, kv, what, verdict)


def table(rows: list[Row]) -> str:
    def pct(x: float | None) -> str:
        return "" if x is None else f"{x * 100:+.1f} %"

    out = ["| case | weights | KV cache | verdict |", "|---|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r.id} | {pct(r.weights_err)} | {pct(r.kv_err)}{' (GiB)' if r.kv_what == 'GiB' else ''} "
                   f"| {r.verdict} |")
    ws = [abs(r.weights_err) for r in rows if r.weights_err is not None]
    ks = [abs(r.kv_err) for r in rows if r.kv_err is not None]
    vs = [r.verdict for r in rows if r.verdict]
    out.append(f"\nweights: worst {max(ws) * 100:.1f} % over {len(ws)} cases; KV cache: median "
               f"{statistics.median(ks) * 100:.1f} %, worst {max(ks) * 100:.1f} % over {len(ks)} cases; "
               f"verdicts right: {vs.count('right')} of {len(vs)}")
    return "\n".join(out)


ROWS = [evaluate(c) for c in CASES]
#: start-ups whose non-KV memory the model does not reach (README, "What the model misses"): vLLM
#: 0.2.4 at TP 4 (B6: 13 GiB more than the weights and activations explain)
NOT_MODELLED = {"B6"}


def test_print_the_error_table() -> None:
    print("\n" + table(ROWS))
    assert len(ROWS) == len(CASES) == 22


@pytest.mark.parametrize("row", [r for r in ROWS if r.weights_err is not None], ids=lambda r: r.id)
def test_weights_within_3_percent(row: Row) -> None:
    assert row.weights_err is not None and abs(row.weights_err) <= 0.03


def test_kv_cache_median_within_5_percent_and_worst_within_20() -> None:
    errs = [abs(r.kv_err) for r in ROWS if r.kv_err is not None and r.id not in NOT_MODELLED]
    assert len(errs) == 19
    assert statistics.median(errs) <= 0.05
    assert max(errs) <= 0.20


def test_the_cases_left_out_are_still_off() -> None:
    """When the model learns vLLM 0.2.4's TP start-up, this fails: move the case back into the thresholds."""
    off = {r.id for r in ROWS if (r.kv_err is not None and abs(r.kv_err) > 0.20) or r.verdict == "WRONG"}
    assert off == NOT_MODELLED


@pytest.mark.parametrize("row", [r for r in ROWS if r.verdict and r.id not in NOT_MODELLED],
                         ids=lambda r: r.id)
def test_verdict_right(row: Row) -> None:
    assert row.verdict == "right"


@pytest.mark.parametrize(("version", "per_logit"), [("0.6.5", 38), ("0.11.0", 38), ("0.16.0", 38), ("0.17.0", 16),
                                                    ("0.19.0", 16), (None, 16)])
def test_the_sampler_warm_up_sorts_the_vocabulary_before_0_17(version: str | None, per_logit: int) -> None:
    """gpt-oss-120b on an H100 at 1024 rows: 7.36 GiB of sampler where the warm-up sorts (B10, B11 leave
    1.71 GiB of KV cache, or -2.14, only with it), 3.07 GiB with 0.17.0's Triton top-k/top-p."""
    from oomdoctor.advisor.memory_model import parse_version
    from oomdoctor.advisor.vllm_budget import activation_peak

    geo = find_model("openai/gpt-oss-120b")
    assert geo is not None
    term = activation_peak(geo, 1024, 1024, 1, parse_version(version))
    assert term.bytes == 1024 * 201088 * per_logit
    assert f"× {per_logit} B" in term.source
