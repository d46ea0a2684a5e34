"""Bounds on every computed remedy value, as properties over all fixtures and over generated logs.

The bounds are what a user relies on when pasting a value:

- a utilization raised above the run's, or fitted to the free memory at start-up, is at most
  floor(free/total) at its two decimals (rounding it up would recommend memory that is not there);
- ``--max-model-len`` is a multiple of the KV block size (16) and at most the KV capacity;
- SGLang's raised static fraction covers the weights' share plus the KV share;
- a saving is never negative and never larger than what it acts on (a quantization saves at most
  the weights);
- a value has no more digits than its flag takes (fractions at two decimals, counts as integers).

Everything goes through public surfaces: ``oomdoctor.diagnose`` on fixture logs and on generated
log text, and ``oomdoctor.advisor.advise`` on a report whose finding states free memory (no
built-in rule extracts free memory beside a KV shortage yet, but a message or user rule may).
Generated inputs include KV capacities that are not multiples of 16 and free/total ratios just
above a rounding step, where ``round`` and ``floor`` disagree.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import oomdoctor
from oomdoctor.advisor import advise
from oomdoctor.advisor.code_lines import is_words
from tests.corpus import FIXTURES

GiB = 2**30
BLOCK = 16
#: the KV share SGLang's raised fraction adds on top of the weights' share (remedies_sglang.SGLANG_MIN_KV_SHARE)
SGLANG_KV_SHARE = Decimal("0.05")
#: float noise allowed at a bound: byte figures are parsed from two-decimal GiB, far coarser than this
NOISE = Decimal("1e-9")
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: flags, env vars and settings whose value is a fraction of memory, written with at most two decimals
FRACTIONS = {
    "--gpu-memory-utilization",
    "--mem-fraction-static",
    "--cuda-memory-fraction",
    "--kv_cache_free_gpu_memory_fraction",
    "--kv-cache-free-gpu-memory-fraction",
    "KvCacheConfig.free_gpu_memory_fraction",
    "kv_cache_free_gpu_mem_fraction (Triton config.pbtxt)",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "RAY_memory_usage_threshold",
}
#: XLA's pool with TF_FORCE_UNIFIED_MEMORY=1: a multiple of the GPU, at most ColabFold's 4.0
UNIFIED_FRACTION_MAX = 4.0
#: ratios with an upper bound above 1: PyTorch's MPS high watermark is a multiple of the device's
#: recommended working set, 0.0 (no limit) up to 2.0 (torch 2.5.1 MPSAllocator.h
#: default_high_watermark_upper_bound), written with one decimal
RATIOS = {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": 2.0}
#: flags whose value is a count (tokens, sequences, layers, GPUs, GiB): a plain non-negative integer
COUNTS = {
    "--max-model-len",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--max-batch-prefill-tokens",
    "--max-input-tokens",
    "--max-input-length",
    "--max-total-tokens",
    "--max-batch-total-tokens",
    "--chunked-prefill-size",
    "--cuda-graph-max-bs",
    "--max-running-requests",
    "--cpu-offload-gb",
    "--max_num_tokens",
    "--max_batch_size",
    "--max_seq_len",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--tp-size",
    "-b",
    "-ub",
    "-c",
    "-ngl",
    "num_ctx",
    "num_gpu",
    "OLLAMA_NUM_PARALLEL",
}
_TWO_DECIMALS = re.compile(r"^(0|1)(\.\d{1,2})?$")


def floor2(x: float) -> Decimal:
    """floor(x) at two decimals, exactly (no float rounding at the edge)."""
    return Decimal(math.floor(Decimal(repr(x)) * 100)) / 100


def _values(remedy: dict[str, Any]) -> dict[str, str]:
    return {**remedy.get("flags", {}), **remedy.get("env", {}), **remedy.get("settings", {})}


def _current_utilization(finding: dict[str, Any], context: dict[str, Any]) -> float | None:
    u = finding["figures"].get("gpu_memory_utilization")
    return float(u) if u is not None else context.get("gpu_memory_utilization")


def check_bounds(report: dict[str, Any]) -> None:
    """Assert every bound above on every remedy of a JSON report."""
    context = report["context"]
    for finding in report["findings"]:
        fig = finding["figures"]
        for remedy in finding["remedies"]:
            where = f"{finding['rule']} / {remedy['id']}"
            values = _values(remedy)
            for name, value in values.items():
                if name == "XLA_PYTHON_CLIENT_MEM_FRACTION" and values.get("TF_FORCE_UNIFIED_MEMORY") == "1":
                    # with unified memory the pool may exceed the GPU (ColabFold 1.5.5's 4.0)
                    assert re.match(r"^\d\.\d$", value), f"{where}: {name} {value!r} is not a ratio at one decimal"
                    assert 1 < float(value) <= UNIFIED_FRACTION_MAX, f"{where}: {name} {value} out of (1, 4.0]"
                    continue
                if name in FRACTIONS:
                    assert _TWO_DECIMALS.match(value), f"{where}: {name} {value!r} is not a fraction at two decimals"
                    assert 0 <= float(value) <= 1, f"{where}: {name} {value} out of [0, 1]"
                if name in RATIOS:
                    assert re.match(r"^\d(\.\d{1,2})?$", value), f"{where}: {name} {value!r} is not a ratio at two decimals"
                    assert 0 <= float(value) <= RATIOS[name], f"{where}: {name} {value} out of [0, {RATIOS[name]}]"
                if name in COUNTS and not (name in remedy.get("settings", {}) and is_words(value)):
                    # a setting may be words about its value (the log lacks it; shown as prose), a
                    # flag or a variable never: its value is a value or it is absent
                    assert value.isdigit(), f"{where}: {name} {value!r} is not a plain count"
            saves = remedy.get("saves_bytes")
            if saves is not None:
                assert saves >= 0, f"{where}: negative saving {saves}"
                weights = context.get("weights_bytes") or fig.get("weights_bytes")
                if "quantiz" in remedy["id"] and weights:
                    assert saves <= weights, f"{where}: saves {saves} > the weights {weights} it acts on"
            _check_max_model_len(where, fig, context, values)
            _check_lowered_limits(where, fig, context, values)
            _check_utilization(where, finding, context, remedy, values)
            _check_sglang_fraction(where, finding, context, values)


def _check_max_model_len(where: str, fig: dict[str, Any], context: dict[str, Any], values: dict[str, str]) -> None:
    if "--max-model-len" not in values:
        return
    n = int(values["--max-model-len"])
    assert n > 0 and n % BLOCK == 0, f"{where}: --max-model-len {n} is not a positive multiple of {BLOCK}"
    if "--kv-cache-dtype" in values:
        return  # a larger capacity: fp8 halves the bytes per token
    cap = fig.get("estimated_max_model_len") or fig.get("kv_cache_tokens") or context.get("kv_cache_tokens")
    if cap:
        assert n <= cap, f"{where}: --max-model-len {n} > the KV capacity {cap}"
    if fig.get("max_seq_len"):
        assert n < fig["max_seq_len"], f"{where}: --max-model-len {n} does not lower {fig['max_seq_len']}"


def _check_lowered_limits(where: str, fig: dict[str, Any], context: dict[str, Any], values: dict[str, str]) -> None:
    """A token limit offered to stop a failure is positive and below the value that failed."""
    prefill = values.get("--max-batch-prefill-tokens")
    if prefill is not None and fig.get("prefill_tokens"):
        assert 0 < int(prefill) < fig["prefill_tokens"], f"{where}: prefill {prefill} vs {fig['prefill_tokens']} failing"
    total = values.get("--max-batch-total-tokens")
    if total is not None:
        assert int(total) > 0 and int(total) % BLOCK == 0, f"{where}: --max-batch-total-tokens {total}"
        if context.get("kv_cache_tokens"):
            assert int(total) < context["kv_cache_tokens"], f"{where}: {total} does not lower {context['kv_cache_tokens']}"
    # lowering one limit never raises another: the input limit offered with it only goes down
    current = (context.get("extra") or {}).get("tgi_max_input_tokens")
    for flag in ("--max-input-tokens", "--max-input-length"):
        if flag in values:
            assert int(values[flag]) > 0, f"{where}: {flag} {values[flag]}"
            if current is not None:
                assert int(values[flag]) < current, f"{where}: {flag} {values[flag]} does not lower {current}"
            if "--max-total-tokens" in values:
                assert int(values[flag]) < int(values["--max-total-tokens"]), f"{where}: {flag} >= --max-total-tokens"


def _check_utilization(
    where: str, finding: dict[str, Any], context: dict[str, Any], remedy: dict[str, Any], values: dict[str, str]
) -> None:
    fig = finding["figures"]
    value = values.get("--gpu-memory-utilization")
    if value is None or remedy.get("fits") is False or not (fig.get("free_bytes") and fig.get("total_bytes")):
        return
    current = _current_utilization(finding, context)
    # a raise: above the run's known utilization, or a remedy that says it raises (default unknown)
    raised = (current is not None and float(value) > current) or "raise" in remedy["id"]
    if finding["kind"].startswith("vllm.startup.") or raised:
        cap = floor2(fig["free_bytes"] / fig["total_bytes"])
        assert Decimal(value) <= cap, (
            f"{where}: --gpu-memory-utilization {value} > floor(free/total) = {cap} "
            f"({fig['free_bytes']} / {fig['total_bytes']})"
        )


def _check_sglang_fraction(where: str, finding: dict[str, Any], context: dict[str, Any], values: dict[str, str]) -> None:
    value = values.get("--mem-fraction-static")
    if value is None:
        return
    extra = context.get("extra") or {}
    pre, post = extra.get("sglang_avail_before_load_bytes"), extra.get("sglang_avail_after_load_bytes")
    current = finding["figures"].get("mem_fraction_static")
    if current is not None and Decimal(value) <= Decimal(str(current)):
        return  # lowered (CUDA-graph headroom): the weights bound is about raising
    suggested = finding["figures"].get("suggested_mem_fraction_static")
    if suggested is not None:
        assert Decimal(value) > Decimal(str(suggested)), f"{where}: {value} does not raise above {suggested}"
    elif pre and post is not None:
        need = 1 - Decimal(post) / Decimal(pre) + SGLANG_KV_SHARE
        assert Decimal(value) >= need - NOISE, f"{where}: --mem-fraction-static {value} < weights' share + KV share = {need:.4f}"


# --- over every fixture ------------------------------------------------------------------------

LOGS = sorted(FIXTURES.glob("*/*.log"))


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_fixture_remedy_is_within_bounds(log: Path) -> None:
    report = json.loads(oomdoctor.diagnose(log.read_bytes(), source=log.name).model_dump_json())
    check_bounds(report)


def _report(text: str) -> dict[str, Any]:
    return json.loads(oomdoctor.diagnose(text).model_dump_json())


def _quantize(text: str) -> dict[str, Any] | None:
    """TGI's --quantize as its calculator values it for the log's first finding (the activation-peak
    cause withholds quantization from the ranked list: the value is still bounded)."""
    from oomdoctor.advisor.registry import AdviceInput, calculator

    report = oomdoctor.diagnose(text)
    r = calculator("tgi.quantize")(AdviceInput(report.findings[0], report.context))
    return json.loads(r.model_dump_json()) if r is not None else None


def _remedy(report: dict[str, Any], flag: str) -> dict[str, Any] | None:
    for f in report["findings"]:
        for r in f["remedies"]:
            if flag in r["flags"]:
                return r
    return None


# --- vLLM: --max-model-len from a capacity that is not a multiple of the block ----------------


@PROPS
@given(capacity=st.integers(min_value=BLOCK + 1, max_value=2**20).filter(lambda c: c % BLOCK), extra=st.integers(1, 2**20))
@example(capacity=4513, extra=3679)
def test_max_model_len_is_a_block_multiple_within_the_stated_capacity(capacity: int, extra: int) -> None:
    max_len = capacity + extra
    report = _report(
        f"ValueError: The model's max seq len ({max_len}) is larger than the maximum number of tokens that can be "
        f"stored in KV cache ({capacity}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
        "when initializing the engine.\n"
    )
    r = _remedy(report, "--max-model-len")
    assert r is not None, "no --max-model-len remedy"
    # the largest multiple of 16 that fits: 4513 -> 4512
    assert int(r["flags"]["--max-model-len"]) == capacity // BLOCK * BLOCK
    check_bounds(report)


@PROPS
@given(estimate=st.integers(min_value=BLOCK + 1, max_value=2**20).filter(lambda c: c % BLOCK), extra=st.integers(1, 2**20))
@example(estimate=81393, extra=121359)
def test_max_model_len_from_vllms_estimate_is_a_block_multiple(estimate: int, extra: int) -> None:
    max_len = estimate + extra
    report = _report(
        f"ValueError: To serve at least one request with the models's max seq len ({max_len}), (71.16 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (28.57 GiB). Based on the available memory, "
        f"the estimated maximum model length is {estimate}. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.\n"
    )
    r = _remedy(report, "--max-model-len")
    assert r is not None
    assert int(r["flags"]["--max-model-len"]) == estimate // BLOCK * BLOCK
    check_bounds(report)


# --- vLLM: start-up free memory just above a rounding step ------------------------------------


def _gib_text(x: Decimal) -> str:
    return f"{x:.2f}"


@PROPS
@given(
    total_centi=st.integers(800, 19200),  # 8.00 .. 192.00 GiB as printed
    step=st.integers(5, 94),  # floor(free/total) = step/100
    above=st.floats(0.0051, 0.0099),  # just above the step: round() would go up, floor() must not
    want=st.integers(1, 4),
)
def test_startup_utilization_never_exceeds_free_over_total(total_centi: int, step: int, above: float, want: int) -> None:
    total = Decimal(total_centi) / 100
    free = (total * (Decimal(step) / 100 + Decimal(repr(above)))).quantize(Decimal("0.01"))
    util = min(Decimal("0.99"), Decimal(step + want) / 100 + Decimal("0.01"))
    report = _report(
        f"ValueError: Free memory on device ({_gib_text(free)}/{_gib_text(total)} GiB) on startup is less than "
        f"desired GPU memory utilization ({util}, {_gib_text(total * util)} GiB). Decrease GPU memory utilization "
        "or reduce GPU memory used by other processes.\n"
    )
    assert report["findings"], "the start-up check was not detected"
    check_bounds(report)


# --- vLLM: raising the utilization for the KV cache, with free memory stated ------------------


def _kv_report_with_free(total: int, free: int, util: Decimal, missing: int) -> dict[str, Any]:
    """A V1 max-len failure whose finding also states free memory, advised again."""
    report = oomdoctor.diagnose(
        "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (9.67 GiB). Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n"
    )
    (finding,) = report.findings
    available = 8 * GiB
    finding.figures.update(
        total_bytes=total,
        free_bytes=free,
        gpu_memory_utilization=float(util),
        kv_cache_available_bytes=available,
        kv_cache_needed_bytes=available + missing,
    )
    return json.loads(advise(report).model_dump_json())


@PROPS
@given(
    total_gib=st.integers(16, 192),
    step=st.integers(50, 93),
    above=st.floats(0.0051, 0.0099),
    below=st.integers(1, 10),
)
@example(total_gib=80, step=87, above=0.006, below=7)  # free/total = 0.876: round() says 0.88, floor() 0.87
def test_raised_utilization_that_fits_stays_within_free_memory(total_gib: int, step: int, above: float, below: int) -> None:
    total = total_gib * GiB
    free = int(total * (step / 100 + above))
    util = Decimal(step - below) / 100
    # the KV cache lacks (below + 0.5)% of the GPU: util + missing/total lands between the step and the next
    missing = int(total * (below + 0.5) / 100)
    report = _kv_report_with_free(total, free, util, missing)
    raise_ = next(r for r in report["findings"][0]["remedies"] if r["id"] == "vllm.gpu-memory-utilization.raise-for-kv")
    value = raise_["flags"].get("--gpu-memory-utilization")
    if value is not None and raise_["fits"] is not False:
        assert Decimal(value) <= floor2(free / total)
    check_bounds(report)


def test_a_raise_beyond_free_memory_is_refused_not_rounded_in() -> None:
    # 80 GiB GPU, 0.876 free, running at 0.80, missing 7.5% of the GPU: 0.80 + 0.075 -> 0.88 > floor(0.876) = 0.87
    total = 80 * GiB
    report = _kv_report_with_free(total, int(total * 0.876), Decimal("0.80"), int(total * 0.075))
    raise_ = next(r for r in report["findings"][0]["remedies"] if r["id"] == "vllm.gpu-memory-utilization.raise-for-kv")
    assert raise_["fits"] is False
    assert "--gpu-memory-utilization" not in raise_["flags"]
    assert "0.87" in raise_["why"]


# --- SGLang: the raised static fraction covers the weights plus a KV pool ---------------------


@PROPS
@given(
    pre_centi=st.integers(2000, 19000),  # GB free before loading, as printed (x100)
    weights_share=st.integers(100, 8500),  # 1e-4 of the free memory taken by the weights
)
@example(pre_centi=7868, weights_share=1914)  # 1 - 63.62/78.68 + 0.05 = 0.2414: round() says 0.24
def test_sglang_static_fraction_covers_weights_and_kv(pre_centi: int, weights_share: int) -> None:
    pre = Decimal(pre_centi) / 100
    post = (pre * (1 - Decimal(weights_share) / 10000)).quantize(Decimal("0.01"))
    report = _report(
        f"[2025-06-01 10:00:01 TP0] Load weight begin. avail mem={pre:.2f} GB\n"
        f"[2025-06-01 10:00:05 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem={post:.2f} GB, "
        f"mem usage={pre - post:.2f} GB.\n"
        "[2025-06-01 10:00:06 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
    )
    extra = report["context"]["extra"]
    assert extra.get("sglang_avail_before_load_bytes") and extra.get("sglang_avail_after_load_bytes") is not None
    r = _remedy(report, "--mem-fraction-static")
    if r is not None:
        need = 1 - Decimal(extra["sglang_avail_after_load_bytes"]) / Decimal(extra["sglang_avail_before_load_bytes"])
        assert Decimal(r["flags"]["--mem-fraction-static"]) >= need + SGLANG_KV_SHARE - NOISE
    check_bounds(report)


def test_sglang_fraction_rounds_up_at_the_edge() -> None:
    # 78.68 GB free before loading, 63.62 GB after: the weights take 1 - 63.62/78.68 = 0.19141;
    # + 0.05 KV share = 0.24141 -> 0.25 (rounded up; 0.24 would leave the KV pool short)
    report = _report(
        "[2025-06-01 10:00:01 TP0] Load weight begin. avail mem=78.68 GB\n"
        "[2025-06-01 10:00:05 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.62 GB, "
        "mem usage=15.06 GB.\n"
        "[2025-06-01 10:00:06 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
    )
    r = _remedy(report, "--mem-fraction-static")
    assert r is not None and r["flags"] == {"--mem-fraction-static": "0.25"}


# --- TGI: quantizing saves at most the weights ------------------------------------------------

TGI_PREFILL_OOM = (
    '2025-01-01T10:00:00.000000Z  INFO text_generation_launcher: Args {{ model_id: "m", quantize: None, '
    "max_batch_prefill_tokens: Some({n}) }}\n"
    "{weights}"
    "2025-01-01T10:01:30.000000Z ERROR warmup: text_generation_client: router/client/src/lib.rs:46: Server error: "
    "Not enough memory to handle {n} prefill tokens. You need to decrease `--max-batch-prefill-tokens`\n"
)


def _tgi_text(weights_centi: int, n: int = 4096) -> str:
    line = f"2025-01-01T10:00:30.000000Z  INFO text_generation_launcher: Model loading took {weights_centi / 100:.2f} GiB memory and 4.5 seconds\n"
    return TGI_PREFILL_OOM.format(n=n, weights=line)


def _tgi_with_weights(weights_centi: int, n: int = 4096) -> dict[str, Any]:
    # TGI prints no weights size of its own; a "Model loading took" line is the log's weights fact
    line = f"2025-01-01T10:00:30.000000Z  INFO text_generation_launcher: Model loading took {weights_centi / 100:.2f} GiB memory and 4.5 seconds\n"
    return _report(TGI_PREFILL_OOM.format(n=n, weights=line))


@PROPS
@given(weights_centi=st.integers(1, 100_000))
def test_tgi_quantize_saves_at_most_the_weights(weights_centi: int) -> None:
    report = _tgi_with_weights(weights_centi)
    weights = report["context"]["weights_bytes"]
    assert weights, "the weights line was not read"
    q = _quantize(_tgi_text(weights_centi))
    assert q is not None and q["saves_bytes"] is not None
    assert 0 <= q["saves_bytes"] <= weights
    check_bounds(report)


def test_tgi_eetq_saves_half_of_16bit_weights() -> None:
    # 14.99 GiB = 16095389942 bytes of fp16 weights; 8-bit EETQ keeps half: saves 16095389942 // 2 = 8047694971
    report = _tgi_with_weights(1499)
    assert report["context"]["weights_bytes"] == 16095389942
    q = _quantize(_tgi_text(1499))
    assert q is not None and q["saves_bytes"] == 8047694971


@PROPS
@given(n=st.integers(2, 200_000))
@example(n=2)  # the smallest prefill that can be halved: 1 token
@example(n=1000)  # half is 500: rounded down to one 256-token step
@example(n=511)  # half is 255.5: below one 256-token step, the value must still be a whole count
def test_tgi_prefill_limit_is_a_whole_count_below_the_failing_prefill(n: int) -> None:
    report = _report(TGI_PREFILL_OOM.format(n=n, weights=""))
    r = _remedy(report, "--max-batch-prefill-tokens")
    assert r is not None
    value = r["flags"]["--max-batch-prefill-tokens"]
    assert value.isdigit() and 0 < int(value) <= n // 2
    if n // 2 >= 256:
        assert int(value) % 256 == 0
    check_bounds(report)


def test_tgi_offers_no_prefill_limit_for_a_single_token() -> None:
    # half of 1 token is 0: no limit can help
    assert _remedy(_report(TGI_PREFILL_OOM.format(n=1, weights="")), "--max-batch-prefill-tokens") is None


@pytest.mark.parametrize("m", [1000, 4096])
def test_tgi_prefill_limit_leaves_a_smaller_input_limit_alone(m: int) -> None:
    # 8192 / 2 = 4096 prefill tokens; an input limit of at most 4096 already satisfies prefill >= input
    report = _report(TGI_PREFILL_OOM.format(n=8192, weights="").replace(
        "max_batch_prefill_tokens", f"max_input_tokens: Some({m}), max_batch_prefill_tokens"))
    assert report["context"]["extra"]["tgi_max_input_tokens"] == m
    r = _remedy(report, "--max-batch-prefill-tokens")
    assert r is not None and r["flags"] == {"--max-batch-prefill-tokens": "4096"}


TGI_MAX_TOTAL = (
    '2025-01-01T10:00:00.000000Z  INFO text_generation_launcher: Args {{ model_id: "m", max_input_tokens: Some({m}), '
    "max_total_tokens: Some({w}), max_batch_prefill_tokens: Some({w}), cuda_memory_fraction: 1.0 }}\n"
    "{capacity}"
    "Error: Backend(NotEnoughMemory({w}))\n"
    "2025-01-01T10:00:21.000000Z ERROR text_generation_launcher: Not enough memory to handle `max_total_tokens={w}`\n"
)
_CAPACITY = ("2025-01-01T10:00:21.000000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:125: "
             "Setting max batch total tokens to {c}\n")


@PROPS
@given(c=st.integers(64, 2**20), more=st.integers(1, 2**16), m=st.integers(16, 2**21))
@example(c=21504, more=10496, m=1000)  # the input limit 1000 is below the 21504-token capacity: left alone
@example(c=21504, more=10496, m=31999)  # 31999 >= 21504: the input must drop to 21503
def test_tgi_max_total_tokens_is_the_capacity_and_the_input_stays_below(c: int, more: int, m: int) -> None:
    w = c + more
    m = min(m, w - 1)
    report = _report(TGI_MAX_TOTAL.format(m=m, w=w, capacity=_CAPACITY.format(c=c)))
    r = _remedy(report, "--max-total-tokens")
    assert r is not None
    want = {"--max-total-tokens": str(c)}
    if m >= c:
        want["--max-input-tokens"] = str(c - 1)
    assert r["flags"] == want
    check_bounds(report)


@pytest.mark.parametrize("c", [32000, 40000])
def test_tgi_max_total_tokens_is_never_raised_to_the_capacity(c: int) -> None:
    # the KV cache holds c >= 32000 tokens: lowering --max-total-tokens to c would not lower it
    report = _report(TGI_MAX_TOTAL.format(m=31999, w=32000, capacity=_CAPACITY.format(c=c)))
    assert report["context"]["kv_cache_tokens"] == c
    assert _remedy(report, "--max-total-tokens") is None


def test_tgi_max_total_tokens_without_a_capacity_offers_no_guess() -> None:
    report = _report(TGI_MAX_TOTAL.format(m=31999, w=32000, capacity=""))
    assert report["findings"] and _remedy(report, "--max-total-tokens") is None


def test_tgi_offers_no_memory_fraction_that_leaves_nothing() -> None:
    # 896 MiB of 23.68 GiB: 1.0 - 0.037 - 0.01 = 0.953 -> 0.95 is offered;
    # 22.00 GiB of 23.68 GiB: 1.0 - 0.929 - 0.01 = 0.061, below 0.1 -> no --cuda-memory-fraction at all
    small = _report(TGI_DECODE_OOM.format(n=4096))
    assert _remedy(small, "--cuda-memory-fraction") is not None
    assert _remedy(small, "--cuda-memory-fraction")["flags"] == {"--cuda-memory-fraction": "0.95"}  # type: ignore[index]
    large = _report(TGI_DECODE_OOM.format(n=4096).replace("896.00 MiB", "22.00 GiB"))
    assert large["context"]["engine"] == "tgi" and large["findings"]
    assert _remedy(large, "--cuda-memory-fraction") is None
    # 21.00 GiB of 23.68 GiB: 1.0 - 0.8868 - 0.01 = 0.1032 -> 0.10, still too little to size a KV cache from
    edge = _report(TGI_DECODE_OOM.format(n=4096).replace("896.00 MiB", "21.00 GiB"))
    assert edge["findings"] and _remedy(edge, "--cuda-memory-fraction") is None


def test_tgi_graph_warmup_failure_keeps_the_small_graphs() -> None:
    # TGI's default sizes go up to 32; the warning's remedy keeps 1, 2, 4 and 8
    report = _report("2025-01-01T10:00:00.000000Z ERROR text_generation_launcher: Decode cuda graph warmup failed\n")
    r = _remedy(report, "--cuda-graphs")
    assert r is not None and r["flags"] == {"--cuda-graphs": "1,2,4,8"}


def test_tgi_offers_no_quantization_to_a_quantized_model() -> None:
    report = _report(TGI_PREFILL_OOM.format(n=4096, weights="").replace("quantize: None", "quantize: Some(Eetq)"))
    assert report["context"]["quantization"] == "Eetq"
    assert _quantize(TGI_PREFILL_OOM.format(n=4096, weights="").replace("quantize: None", "quantize: Some(Eetq)")) is None
    assert _quantize(TGI_PREFILL_OOM.format(n=4096, weights="")) is not None


TGI_DECODE_OOM = (
    '2025-01-01T10:00:00.000000Z  INFO text_generation_launcher: Args {{ model_id: "m", quantize: None }}\n'
    "2025-01-01T10:00:21.000000Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:125: Setting max batch "
    "total tokens to {n}\n"
    "2025-01-01T10:05:00.000000Z ERROR text_generation_launcher: Method Decode encountered an error.\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 23.68 GiB "
    "of which 412.06 MiB is free. Including non-PyTorch memory, this process has 23.27 GiB memory in use. Of the "
    "allocated memory 21.50 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated.\n"
)


@PROPS
@given(n=st.integers(32, 2**22))
def test_tgi_total_tokens_are_lowered_to_a_block_multiple(n: int) -> None:
    report = _report(TGI_DECODE_OOM.format(n=n))
    assert report["context"]["kv_cache_tokens"] == n
    r = _remedy(report, "--max-batch-total-tokens")
    assert r is not None, "no --max-batch-total-tokens remedy for a TGI decode OOM"
    value = int(r["flags"]["--max-batch-total-tokens"])
    assert 0 < value < n and value % BLOCK == 0
    check_bounds(report)


def test_tgi_total_tokens_keep_nine_tenths() -> None:
    # 421328 tokens in flight x 0.9 = 379195.2, rounded down to 16: 23699 x 16 = 379184
    r = _remedy(_report(TGI_DECODE_OOM.format(n=421328)), "--max-batch-total-tokens")
    assert r is not None and r["flags"] == {"--max-batch-total-tokens": "379184"}


def test_tgi_remedies_stay_out_of_other_engines_reports() -> None:
    # the same PyTorch OOM without TGI's lines: no TGI flag may be offered
    report = _report(TGI_DECODE_OOM.format(n=421328).split("\n", 3)[3])
    flags = {k for f in report["findings"] for r in f["remedies"] for k in r["flags"]}
    assert report["findings"] and not flags & {"--max-batch-total-tokens", "--quantize", "--max-batch-prefill-tokens",
                                               "--cuda-memory-fraction", "--cuda-graphs"}


# --- the checker itself must be able to fail --------------------------------------------------


def _one(kind: str, figures: dict[str, Any], flags: dict[str, str], **remedy: Any) -> dict[str, Any]:
    return {
        "context": {"weights_bytes": 10 * GiB, "extra": {}},
        "findings": [
            {"rule": "r", "kind": kind, "figures": figures,
             "remedies": [{"id": remedy.pop("id", "x"), "flags": flags, "env": {}, "settings": {}, **remedy}]}
        ],
    }


@pytest.mark.parametrize(
    ("report", "why"),
    [
        (_one("vllm.kv-cache.max-len-exceeds", {"kv_cache_tokens": 4513}, {"--max-model-len": "4513"}), "multiple"),
        (_one("vllm.kv-cache.max-len-exceeds", {"kv_cache_tokens": 4500}, {"--max-model-len": "4512"}), "capacity"),
        (_one("vllm.startup.free-memory-below-target", {"free_bytes": 876, "total_bytes": 1000},
              {"--gpu-memory-utilization": "0.88"}, fits=True), "floor"),
        (_one("x", {}, {"--gpu-memory-utilization": "0.875"}), "two decimals"),
        (_one("x", {}, {"--max-num-seqs": "12.5"}), "count"),
        (_one("x", {}, {}, id="vllm.quantization", saves_bytes=11 * GiB), "weights"),
        (_one("x", {}, {}, saves_bytes=-1), "negative"),
    ],
    ids=["not-block-multiple", "above-capacity", "above-free", "three-decimals", "fractional-count",
         "saves-more-than-weights", "negative-saving"],
)
def test_the_bound_checker_rejects_out_of_bound_values(report: dict[str, Any], why: str) -> None:
    with pytest.raises(AssertionError, match=why):
        check_bounds(report)
