"""Exact values at the boundaries a mutation run showed nothing pinned (issue 38 §3).

Each table row is one boundary, floor or fallback of a calculator users act on, with the value
worked out by hand from the formula in the row's comment: moving the boundary by one step, turning
``<=`` into ``<`` or dropping a floor changes at least one row.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from oomdoctor.advisor import prescription
from oomdoctor.advisor.catalog import ModelGeometry, _gpu_key, find_gpu, find_model, geometry_from_config
from oomdoctor.advisor.command import apply_flags, argv_from_launch_args
from oomdoctor.advisor.engine_args import (
    UNKNOWN_DEFAULT,
    FlagSpec,
    check_argv,
    default_of,
    env_of,
    flag_of_dest,
    flag_spec,
    switch_value,
    takes_value,
    value_ok,
)
from oomdoctor.advisor.engine_samples import _near, canonical, option_of_env, sampled
from oomdoctor.advisor.fit import fit
from oomdoctor.advisor.memory_model import (
    MLA_BLOCK_SIZE,
    PRINT_HALF_STEP,
    Facts,
    GiB,
    Value,
    capacity_from_figures,
    capacity_tokens,
    capture_sizes,
    counts_cudagraphs_in_budget,
    cudagraph_size_flag,
    default_max_num_seqs,
    default_utilization,
    facts,
    fp8_kv_flag_value,
    fp8_weights_min_cc,
    kv_budget,
    kv_bytes_for_len,
    parse_version,
)
from oomdoctor.advisor.prescription import Prescribe, prescribed, remedy_table, remedy_text
from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.advisor.remedies_ggml import GGML_HEADROOM_BYTES
from oomdoctor.i18n import use_lang
from oomdoctor.redaction import MASK, _entropy, _walk, redact, redact_command
from oomdoctor.report import Cause, Context, Finding, Location, Remedy
from oomdoctor.rulepack import loader
from oomdoctor.rulepack.loader import RulePackError, load_pack

MiB = 2**20


def _finding(kind: str, engine: str, phase: str, **figures: Any) -> Finding:
    return Finding(rule="test", kind=kind, engine=engine, severity="error", phase=phase, title="t",
                   message="m", location=Location(line=1, end_line=1), figures=figures)


def _calc(rid: str, f: Finding, ctx: Context, **hints: str) -> Remedy | None:
    return calculator(rid)(AdviceInput(f, ctx, dict(hints)))


def _flags(r: Remedy | None) -> dict[str, str] | None:
    return None if r is None else r.flags


# -- memory_model --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "value"),
    [
        ((0, 2, 9), None),  # no fp8 KV cache before 0.3.0
        ((0, 3, 0), "fp8_e5m2"),
        ((0, 4, 0), "fp8_e5m2"),  # the last release that only knew e5m2
        ((0, 4, 1), "fp8"),
        ((0, 7, 9), "fp8"),
        ((0, 8, 0), None),  # V1 0.8.0–0.8.1 refused an fp8 KV cache
        ((0, 8, 1), None),
        ((0, 8, 2), "fp8"),
        (None, "fp8"),  # unknown: the current release
    ],
)
def test_fp8_kv_flag_value_at_each_boundary(version: tuple[int, int, int] | None, value: str | None) -> None:
    assert fp8_kv_flag_value(version) == value


@pytest.mark.parametrize(
    ("version", "util", "graphs"),
    [((0, 19, 9), 0.9, False), ((0, 20, 0), 0.92, True), ((1, 0, 0), 0.92, True), (None, 0.9, False)],
)
def test_version_defaults_of_the_kv_budget(version: tuple[int, int, int] | None, util: float, graphs: bool) -> None:
    assert default_utilization(version) == util
    assert counts_cudagraphs_in_budget(version) is graphs


@pytest.mark.parametrize(
    ("version", "budget"),
    [
        # 80 GiB × 0.9 = 72 GiB requested; − 40 weights − 2 activation − 1 non-torch = 29 GiB
        ((0, 19, 0), 29 * GiB),
        # from 0.20.0 the 3 GiB CUDA-graph estimate comes off the budget too: 26 GiB
        ((0, 20, 0), 26 * GiB),
        # unknown version: read as a release before 0.20.0, as default_utilization reads it
        (None, 29 * GiB),
    ],
)
def test_facts_kv_budget(version: tuple[int, int, int] | None, budget: int) -> None:
    f = Facts(version=version, total=Value(80 * GiB, "t"), utilization=Value(0.9, "t"),
              weights=Value(40 * GiB, "t"), activation=Value(2 * GiB, "t"), non_torch=Value(1 * GiB, "t"),
              cudagraph=Value(3 * GiB, "t"))
    assert f.requested == 72 * GiB
    assert f.kv_budget == budget
    f.activation = f.non_torch = None
    assert f.kv_budget == (72 - 40 - (3 if version == (0, 20, 0) else 0)) * GiB  # absent terms count 0
    f.cudagraph = None
    assert f.kv_budget == 32 * GiB  # an absent graph estimate counts 0 in every version
    f.weights = None
    assert f.kv_budget is None  # no weights, no budget


@pytest.mark.parametrize(
    ("version", "graphs_counted"),
    [(None, False), ("0.19.1", False), ("0.20.0", True), ("0.33.0", True)],
)
def test_fit_and_the_post_mortem_share_one_kv_budget(version: str | None, graphs_counted: bool) -> None:
    """fit's table, the Facts the remedies read and the plan search take the same budget: requested
    − weights − activation − non-torch, less the 512 MiB graph estimate only from 0.20.0 (an unknown
    version is a release before 0.20.0 for the utilization and the graphs alike)."""
    geo, gpu = find_model("meta-llama/Llama-3.1-8B-Instruct"), find_gpu("L4")
    assert geo is not None and gpu is not None
    res = fit(geo, gpu, max_model_len=131072, utilization=0.9, version=version)
    requested = int(24 * GiB * 0.9)
    expected = requested - res.weights - res.activation - res.non_torch - (512 * MiB if graphs_counted else 0)
    assert res.kv_budget == expected
    assert kv_budget(requested, res.weights, res.activation, res.non_torch, 512 * MiB,
                     parse_version(version)) == expected
    f = Facts(version=parse_version(version), total=Value(24 * GiB, "t"), utilization=Value(0.9, "t"),
              weights=Value(res.weights, "t"), activation=Value(res.activation, "t"),
              non_torch=Value(res.non_torch, "t"), cudagraph=Value(512 * MiB, "t"))
    assert f.kv_budget == expected


def test_mla_models_default_to_128_token_blocks_unless_the_log_says() -> None:
    ctx = Context(engine="vllm", model="deepseek-ai/DeepSeek-R1")
    assert MLA_BLOCK_SIZE == 128
    f = facts(None, ctx)
    assert (f.block_size.value, f.block_size.source) == (128, "default for MLA backends")
    f = facts(None, Context(engine="vllm", model="deepseek-ai/DeepSeek-R1", block_size=64))
    assert (f.block_size.value, f.block_size.source) == (64, "context")
    f = facts(None, Context(engine="vllm", model="meta-llama/Llama-3.1-8B"))
    assert (f.block_size.value, f.block_size.source) == (16, "default")


# -- catalog -------------------------------------------------------------------------------------


def _config(**extra: Any) -> dict[str, Any]:
    return {"num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "hidden_size": 3584,
            "head_dim": 256, "vocab_size": 256000, "intermediate_size": 14336, "torch_dtype": "bfloat16", **extra}


@pytest.mark.parametrize(
    ("extra", "sliding"),
    [
        ({"model_type": "gemma2", "sliding_window": 4096}, 21),  # every other layer of 42
        ({"model_type": "gemma2", "sliding_window": 4096, "num_hidden_layers": 41}, 20),  # 41 // 2
        ({"model_type": "gemma2", "sliding_window": 4096, "layer_types": ["sliding_attention"] * 3 + ["full_attention"] * 39}, 3),
        ({"model_type": "gemma3_text", "sliding_window": 1024, "sliding_window_pattern": 6}, 35),  # 42 − 42 // 6
        ({"model_type": "mistral", "sliding_window": 4096}, 42),  # no pattern: every layer
        ({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}, 0),
        ({"model_type": "llama"}, 0),
    ],
)
def test_sliding_window_layers_from_config(extra: dict[str, Any], sliding: int) -> None:
    assert geometry_from_config(_config(**extra), "test").sliding_window_layers == sliding


@pytest.mark.parametrize(
    ("qcfg", "per_param", "method"),
    [
        ({"quant_method": "fp8"}, 1.0, "fp8"),
        ({"quant_method": "gptq", "bits": 8}, 1 + 3 / 128, "gptq 8-bit"),  # + fp16 scale and 8-bit zero per 128
        ({"quant_method": "gptq", "bits": 4}, 0.5 + 2.5 / 128, "gptq 4-bit"),
        ({"quant_method": "awq"}, 0.5 + 2.5 / 128, "awq 4-bit"),
        ({"quant_method": "mxfp4"}, 4.25 / 8, "mxfp4"),
        ({"quant_method": "bitsandbytes"}, 1.0, "bitsandbytes 8-bit"),
        ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int"}}}},
         1.0, "compressed-tensors int8"),
    ],
)
def test_bytes_per_parameter_of_quantized_configs(qcfg: dict[str, Any], per_param: float, method: str) -> None:
    from oomdoctor.advisor.weights import linear_bytes_per_param

    assert linear_bytes_per_param(qcfg) == (per_param, method)
    geo = geometry_from_config(_config(quantization_config=qcfg), "test")
    assert geo.quantization == method and geo.weights_total is not None
    plain = geometry_from_config(_config(), "test")
    assert plain.quantization is None and plain.weights_total is not None
    assert geo.weights_total < plain.weights_total  # quantized linear layers, 16-bit embeddings


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA Tesla V100-SXM2-32GB", "v100sxm232gb"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("H100 80GB HBM3", "h10080gbhbm3"),
    ],
)
def test_gpu_names_drop_vendor_and_brand_words(name: str, key: str) -> None:
    assert _gpu_key(name) == key


# -- prescription --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "engine", "phase", "applies"),
    [
        (Prescribe(remedy="r"), None, "inference", True),
        (Prescribe(remedy="r", not_phases=["inference"]), "vllm", "inference", False),
        (Prescribe(remedy="r", not_phases=["inference"]), "vllm", "warmup", True),
        (Prescribe(remedy="r", phases=["warmup"], not_phases=["inference"]), "vllm", "warmup", True),
        (Prescribe(remedy="r", phases=["warmup"]), "vllm", "inference", False),
        (Prescribe(remedy="r", engines=["vllm"]), "sglang", "warmup", False),
        (Prescribe(remedy="r", engines=["vllm"]), None, "warmup", False),
    ],
)
def test_prescribe_applies(entry: Prescribe, engine: str | None, phase: str, applies: bool) -> None:
    assert entry.applies(engine, phase) is applies


def test_not_phases_narrow_the_shipped_prescriptions() -> None:
    # causes.toml: raising the budget cannot help a capture that fails inside it, nor a request
    raise_ids = {"vllm.gpu-memory-utilization.raise", "vllm.cudagraph-estimate-off"}
    assert raise_ids <= set(prescribed("cudagraph-capture", "vllm", "warmup"))
    assert not raise_ids & set(prescribed("cudagraph-capture", "vllm", "cudagraph-capture"))
    assert not raise_ids & set(prescribed("cudagraph-capture", "vllm", "inference"))
    training = {"training.batch-accumulation", "training.gradient-checkpointing"}
    for phase in ("inference", "warmup", "weights-load"):
        assert not training & set(prescribed("activation-peak", None, phase)), phase
    assert training <= set(prescribed("activation-peak", None, "training"))


def test_summary_takes_the_first_complete_template_else_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    assert prescription.summary("cudagraph-capture", {"graphs": 3 * GiB}) == (
        "CUDA graphs take 3.00 GiB on top of the KV budget."
    )
    assert prescription.summary("cudagraph-capture", {}) == "Capturing CUDA graphs needs memory the budget did not leave."
    # every template missing a value: the last one, unfilled
    fake = SimpleNamespace(summary=["first {a}", "second {b}", "last {c}"], ja=None)
    monkeypatch.setattr(prescription, "cause_table", lambda: {"x": fake})
    assert prescription.summary("x", {"a": None}) == "last {c}"
    assert prescription.summary("x", {"b": 2}) == "second 2"


#: remedies.toml costs: the ranking's tie-break and the line between knobs and model/hardware
#: changes (cost >= 6, ranked last unless the cause is the weights). Every other remedy costs 5.
COSTS = {
    "ask.driver-facts": 0, "ask.launch-facts": 0, "ask.request-shape": 0, "ask.gpu-visible": 0, "ask.runtime-call": 0, "ask.error-line": 0, "xla.unified-memory": 3, "xla.mem-fraction": 1, "torch.expandable-segments-off": 0,
    "torch.expandable-segments": 0, "torch.memory-fraction": 0,
    "gpu.free-other-processes": 1, "gpu.rank-devices": 1, "sglang.schedule-conservativeness": 2, "vllm.deep-gemm-warmup": 2, "xpu.split-allocation": 2, "rl.rollout-gpu-memory-utilization": 1, "torch.max-split-size": 1,
    "rl.free-training-memory": 1, "forge.gpu-weights": 1, "forge.always-offload-from-vram": 2, "forge.resolution-batch": 2,
    "forge.cuda-malloc": 3,
    "vllm.gpu-memory-utilization.fit-free": 1, "vllm.kv-cache-memory-bytes": 1,
    "training.offload-pin-memory-off": 1, "monai.output-device": 1, "diffusers.vae-tiling": 1,
    # optional: the run went on (pipeline parallelism's fallback); rebalancing layers and ollama's
    # own reserve cost no speed or quality
    "ggml.ubatch-size.pipeline": 1, "ggml.tensor-split": 2, "ollama.gpu-overhead": 2,
    "host.add-swap": 2, "ray.reduce-parallelism": 2, "vllm.gpu-memory-utilization.lower": 2, "vllm.gpu-memory-utilization.raise": 2,
    "vllm.gpu-memory-utilization.raise-for-kv": 2, "vllm.enable-chunked-prefill": 2,
    "torch.reduce-batch": 3, "training.shard-state": 3, "vllm.cudagraph-capture-size": 3, "vllm.cudagraph-estimate-off": 3,
    "vllm.max-num-batched-tokens": 3, "vllm.max-num-batched-tokens.raise": 3, "vllm.max-num-seqs": 3,
    "vllm.kv-cache-dtype-fp8": 4, "vllm.max-model-len": 4, "weights.offload": 4,
    "sglang.quantization": 6, "tgi.quantize": 6, "vllm.quantization": 6, "torch.mps-high-watermark": 6,
    "sglang.tp-size": 7, "vllm.tensor-parallel-size": 7, "weights.smaller-model": 7,
    "host.smaller-model": 8, "vllm.pipeline-parallel-size": 8,
    "vllm.quantization-4bit": 9,
    "host.vllm-cpu-offload-gb": 10, "vllm.cpu-offload-gb": 10,
}


def test_remedy_costs_keep_their_order() -> None:
    got = {rid: e.cost for rid, e in remedy_table().items()}
    assert {rid: got[rid] for rid in COSTS} == COSTS
    assert {rid for rid, c in got.items() if rid not in COSTS and c != 5} == set()


# -- remedies_vllm -------------------------------------------------------------------------------

_TOTAL = 100 * GiB


def _vllm_kv(needed: int, avail: int, **figures: Any) -> Finding:
    return _finding("vllm.kv-cache.max-len-exceeds", "vllm", "kv-cache-alloc",
                    kv_cache_needed_bytes=needed, kv_cache_available_bytes=avail, **figures)


def test_raise_for_kv_steps_by_001_when_the_shortage_rounds_away() -> None:
    # 1 byte short: ceil_to(0.9 + 1/100 GiB, 2) = 0.90, not above 0.90, so 0.90 + 0.01
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9)
    r = _calc("vllm.gpu-memory-utilization.raise-for-kv", _vllm_kv(10 * GiB + 1, 10 * GiB), ctx)
    assert _flags(r) == {"--gpu-memory-utilization": "0.91"}


@pytest.mark.parametrize(
    ("missing_gib", "flags", "fits"),
    [
        # cap = floor_to(93 GiB free / 100 GiB, 2) = 0.93; 0.90 + 3/100 = 0.93 <= 0.93: fits, at the cap
        (3, {"--gpu-memory-utilization": "0.93"}, True),
        # 0.90 + 4/100 = 0.94 > 0.93: no value can be given
        (4, {}, False),
    ],
)
def test_raise_for_kv_at_the_free_memory_cap(missing_gib: int, flags: dict[str, str], fits: bool) -> None:
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9)
    f = _vllm_kv(10 * GiB + missing_gib * GiB, 10 * GiB, free_bytes=93 * GiB, total_bytes=_TOTAL)
    r = _calc("vllm.gpu-memory-utilization.raise-for-kv", f, ctx)
    assert r is not None and r.flags == flags and r.fits is fits


@pytest.mark.parametrize(
    ("requested", "flags"),
    [
        (int(0.79 * _TOTAL), {"--gpu-memory-utilization": "0.11"}),  # floor_to(0.90 − 0.79) = 0.11 > 0.1
        (int(0.105 * _TOTAL), {"--gpu-memory-utilization": "0.79"}),  # floor_to(0.795, 2): two decimals, down
        (int(0.80 * _TOTAL), None),  # 0.10: the floor, no answer
        (1, {"--gpu-memory-utilization": "0.89"}),  # floor_to(0.90 − ~0) = 0.90, not below: 0.90 − 0.01
    ],
)
def test_lower_utilization_floor_and_step(requested: int, flags: dict[str, str] | None) -> None:
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9)
    f = _finding("torch.cuda-oom", "vllm", "inference", requested_bytes=requested, total_bytes=_TOTAL)
    assert _flags(_calc("vllm.gpu-memory-utilization.lower", f, ctx)) == flags


@pytest.mark.parametrize(
    ("current", "flags"),
    [
        ("10", {"--max-cudagraph-capture-size": "8"}),  # max(8, 10 // 2): the floor of 8
        ("16", {"--max-cudagraph-capture-size": "8"}),
        ("8", None),  # max(8, 4) = 8, not below 8
        ("512", {"--max-cudagraph-capture-size": "256"}),
    ],
)
def test_capture_size_halves_down_to_8(current: str, flags: dict[str, str] | None) -> None:
    ctx = Context(engine="vllm", engine_version="0.11.1", launch_args={"max_cudagraph_capture_size": current})
    f = _finding("torch.cuda-oom", "vllm", "cudagraph-capture", requested_bytes=MiB)
    assert _flags(_calc("vllm.cudagraph-capture-size", f, ctx)) == flags


@pytest.mark.parametrize(
    ("current", "value"),
    [(512, None), (513, "512"), (600, "512"), (1100, "512"), (1600, "768"), (2000, "768"), (2048, "1024")],
)
def test_batched_tokens_halve_in_steps_of_256_not_below_512(current: int, value: str | None) -> None:
    # max(512, round_down(cur // 2, 256)); nothing for 512 and under
    ctx = Context(engine="vllm", max_num_batched_tokens=current)
    f = _finding("torch.cuda-oom", "vllm", "inference", requested_bytes=MiB)
    r = _calc("vllm.max-num-batched-tokens", f, ctx)
    assert (r.flags.get("--max-num-batched-tokens") if r else None) == value


@pytest.mark.parametrize(
    ("free_gib", "value", "fits"),
    [
        (21, "0.20", True),  # floor_to(0.21 − 0.01) = 0.20: at TAKEN_SHARE, an answer by itself
        (20, "0.19", None),  # below it: most of the card is taken, the log does not say the model fits
    ],
)
def test_fit_free_below_the_taken_share_is_no_answer_by_itself(free_gib: int, value: str, fits: bool | None) -> None:
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9)
    f = _finding("torch.cuda-oom", "vllm", "inference", free_bytes=free_gib * GiB, total_bytes=_TOTAL)
    r = _calc("vllm.gpu-memory-utilization.fit-free", f, ctx)
    assert r is not None and r.flags == {"--gpu-memory-utilization": value} and r.fits is fits
    tiny = remedy_text("vllm.gpu-memory-utilization.fit-free", "why_tiny", left=int(float(value) * _TOTAL))
    assert r.why.endswith(tiny) is (fits is None)


def test_raise_for_kv_ceils_to_two_decimals() -> None:
    # 0.90 + 1.1/100 = 0.911: up to 0.92, not 0.911 (which prints as 0.91 and would not fit)
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9)
    r = _calc("vllm.gpu-memory-utilization.raise-for-kv", _vllm_kv(10 * GiB + int(1.1 * GiB), 10 * GiB), ctx)
    assert _flags(r) == {"--gpu-memory-utilization": "0.92"}


def test_raise_for_kv_adds_two_hundredths_when_the_shortage_is_a_lower_bound() -> None:
    # no free blocks, the KV budget 2 GiB below zero and one request's size unknown: 0.90 + 2/100 = 0.92
    # is only a lower bound, so 0.02 more for a few blocks: 0.94 (under the 0.95 ceiling)
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9)
    f = _finding("vllm.kv-cache.no-blocks", "vllm", "kv-cache-alloc", kv_cache_available_bytes=-2 * GiB)
    r = _calc("vllm.gpu-memory-utilization.raise-for-kv", f, ctx)
    assert r is not None and r.flags == {"--gpu-memory-utilization": "0.94"} and r.fits is None


@pytest.mark.parametrize(("over", "noted"), [(0, False), (1, True)])
def test_raise_for_kv_notes_weights_above_the_cap(over: int, noted: bool) -> None:
    # cap = floor_to(93/100) = 0.93: weights of exactly 0.93 × total still leave the note out
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9,
                  weights_bytes=int(_TOTAL * 0.93) + over)
    f = _vllm_kv(11 * GiB, 10 * GiB, free_bytes=93 * GiB, total_bytes=_TOTAL)
    r = _calc("vllm.gpu-memory-utilization.raise-for-kv", f, ctx)
    note = remedy_text("vllm.gpu-memory-utilization.raise-for-kv", "why_weights",
                       weights=int(_TOTAL * 0.93) + over, cap="0.93")
    assert r is not None and (note in r.why) is noted


@pytest.mark.parametrize(
    ("missing", "value"),
    [
        (0, "512"),  # nothing missing: halved (round_down(1000 // 2, 256) = 256, floored at 512)
        (1, "768"),  # a byte missing: keep the peak's share that is not missing, round_down(999.99…, 256)
    ],
)
def test_batched_tokens_keep_the_share_of_the_peak_not_missing(missing: int, value: str) -> None:
    ctx = Context(engine="vllm", max_num_batched_tokens=1000, activation_peak_bytes=GiB)
    f = _vllm_kv(10 * GiB + missing, 10 * GiB)
    r = _calc("vllm.max-num-batched-tokens", f, ctx)
    assert r is not None and r.flags == {"--max-num-batched-tokens": value}


@pytest.mark.parametrize(("phase", "key"), [("kv-cache-alloc", "title_kv"), ("inference", "title")])
def test_lower_utilization_says_the_kv_cache_when_it_is_being_allocated(phase: str, key: str) -> None:
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9)
    f = _finding("torch.cuda-oom", "vllm", phase, requested_bytes=10 * GiB, total_bytes=_TOTAL)
    r = _calc("vllm.gpu-memory-utilization.lower", f, ctx)
    assert r is not None and r.title == remedy_text("vllm.gpu-memory-utilization.lower", key, fraction="0.80")


# -- remedies_sglang -----------------------------------------------------------------------------


@pytest.mark.parametrize(("suggested", "value"), [(0.83, "0.84"), (0.834, "0.84"), (0.8399, "0.84"), (0.9, "0.91")])
def test_sglang_raise_goes_one_step_above_the_suggested_fraction(suggested: float, value: str) -> None:
    f = _finding("sglang.oom", "sglang", "kv-cache-alloc", suggested_mem_fraction_static=suggested)
    r = _calc("sglang.mem-fraction-static.raise", f, Context(engine="sglang"))
    assert _flags(r) == {"--mem-fraction-static": value}


@pytest.mark.parametrize(("current", "flags"), [("0.36", {"--mem-fraction-static": "0.31"}), ("0.35", None), ("0.88", {"--mem-fraction-static": "0.83"})])
def test_sglang_lower_stops_at_030(current: str, flags: dict[str, str] | None) -> None:
    f = _finding("sglang.oom", "sglang", "cudagraph-capture")
    ctx = Context(engine="sglang", launch_args={"mem_fraction_static": current})
    assert _flags(_calc("sglang.mem-fraction-static.lower", f, ctx)) == flags


@pytest.mark.parametrize(("gpus", "tp", "flags"), [(4, 2, {"--tp-size": "4"}), (3, 2, None), (2, 1, {"--tp-size": "2"}), (1, 1, None)])
def test_sglang_tp_doubles_only_within_the_gpus(gpus: int, tp: int, flags: dict[str, str] | None) -> None:
    f = _finding("sglang.oom", "sglang", "weights-load")
    ctx = Context(engine="sglang", gpu_count=gpus, tensor_parallel_size=tp)
    assert _flags(_calc("sglang.tp-size", f, ctx)) == flags


# -- remedies_ggml -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "layers"),
    [
        (GGML_HEADROOM_BYTES + 10 * MiB, "10"),  # (free − 1 GiB headroom) // 1 MiB per layer
        (GGML_HEADROOM_BYTES + 10 * MiB - 1, "9"),
        (GGML_HEADROOM_BYTES, "0"),
        (100 * MiB, "0"),  # less than the headroom: clamped at 0 layers, never negative
        (GGML_HEADROOM_BYTES + 33 * MiB, "16"),  # all 33 fit by the figure, yet the load failed: half
        (GGML_HEADROOM_BYTES + 33 * MiB - 1, "32"),
    ],
)
def test_ngl_from_free_memory_clamped_at_zero(free: int, layers: str) -> None:
    # 33 layers offloaded, a 33 MiB load failed: 1 MiB per layer
    f = _finding("ggml.alloc-failed", "llama.cpp", "weights-load", requested_bytes=33 * MiB)
    ctx = Context(engine="llama.cpp", extra={"llama_offloaded_layers": 33, "llama_device_free_bytes": free})
    assert _flags(_calc("ggml.n-gpu-layers", f, ctx)) == {"-ngl": layers}


# -- command -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "flags", "out"),
    [
        # an unknown program's flag followed by a negative number: the number is its value
        (["prog", "--offset", "-5", "--x", "1"], {"--offset": "3"}, ["prog", "--offset", "3", "--x", "1"]),
        (["prog", "--lr", "-0.5"], {"--lr": "0.1"}, ["prog", "--lr", "0.1"]),
        # ... but an option is not
        (["prog", "--quiet", "-v"], {"--quiet": ""}, ["prog", "--quiet", "-v"]),
        (["prog", "--quiet", "-v1.2.3"], {"--quiet": ""}, ["prog", "--quiet", "-v1.2.3"]),
        # a number has one decimal point at most: "-1.2.3" is no number, so no value
        (["prog", "--quiet", "-1.2.3"], {"--quiet": ""}, ["prog", "--quiet", "-1.2.3"]),
        # the flag last on the line: nothing follows it to be its value
        (["prog", "--x"], {"--x": "1"}, ["prog", "--x", "1"]),
        (["prog", "--x"], {"--x": ""}, ["prog", "--x"]),
    ],
)
def test_negative_values_of_unknown_flags(argv: list[str], flags: dict[str, str], out: list[str]) -> None:
    assert apply_flags(argv, flags) == out


def test_a_dump_of_more_than_40_arguments_is_no_command_line() -> None:
    args = {"model": "m", **{f"opt_{i}": "1" for i in range(39)}}
    assert len(args) == 40
    argv = argv_from_launch_args(args)
    assert argv is not None and argv[:3] == ["vllm", "serve", "m"] and len(argv) == 3 + 2 * 39
    args["opt_39"] = "1"
    assert argv_from_launch_args(args) is None


# -- engine_args ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "near"),
    [
        ("0.5.9", None),  # older than every sample: the samples cannot tell
        ("0.6.0", ["0.6.0"]),
        ("0.6.5", ["0.6.0", "0.7.0"]),
        ("0.7.0", ["0.7.0"]),
        ("0.7.1", ["0.7.0"]),  # newer than every sample: as in the newest
        ("9.0.0", ["0.7.0"]),
        (None, ["0.7.0"]),  # unknown: the current release, the newest sample
        ("main", None),
    ],
)
def test_samples_that_decide_for_a_version(version: str | None, near: list[str] | None) -> None:
    assert _near(["0.6.0", "0.7.0"], version) == near


# -- memory_model: the second mutation run's survivors -------------------------------------------


@pytest.mark.parametrize(
    ("version", "capacity", "gpu", "seqs"),
    [
        ((0, 6, 4), None, None, 256),  # before 0.6.5: always 256
        ((0, 6, 5), 80 * GiB, "H100", None),  # 0.6.5–0.8.3 with V1: 1024 everywhere, not knowable
        ((0, 8, 3), 80 * GiB, "H100", None),
        ((0, 8, 4), 70 * GiB, "H100", 1024),  # exactly 70 GiB is a big GPU
        ((0, 8, 4), 70 * GiB - 1, "H100", 256),
        ((0, 8, 4), 80 * GiB, "A100-SXM4-80GB", 1024),  # A100 excluded only from 0.9.0
        ((0, 9, 0), 80 * GiB, "NVIDIA A100-SXM4-80GB", 256),
        ((0, 9, 0), 80 * GiB, None, 1024),
        (None, 80 * GiB, "H100", None),  # the version decides
        (None, 24 * GiB, "L4", 256),
        ((0, 9, 0), None, "H100", None),  # unknown capacity
    ],
)
def test_default_max_num_seqs_edges(version: tuple[int, int, int] | None, capacity: int | None,
                                    gpu: str | None, seqs: int | None) -> None:
    assert default_max_num_seqs(version, capacity, gpu) == seqs


@pytest.mark.parametrize(
    ("size", "first", "last", "count"),
    [(1, 1, 1, 1), (3, 1, 2, 2), (4, 1, 4, 3), (8, 1, 8, 4), (255, 1, 248, 34), (256, 1, 256, 35), (271, 1, 256, 35),
     (272, 1, 272, 36), (512, 1, 512, 51)],
)
def test_capture_sizes_include_the_maximum(size: int, first: int, last: int, count: int) -> None:
    sizes = capture_sizes(size)
    assert (sizes[0], sizes[-1], len(sizes)) == (first, last, count)


@pytest.mark.parametrize(
    ("version", "cc"), [(None, 80), ((0, 5, 9), 89), ((0, 6, 0), 80), ((0, 19, 9), 80), ((0, 20, 0), 75)],
)
def test_fp8_weights_min_cc_at_each_boundary(version: tuple[int, int, int] | None, cc: int) -> None:
    assert fp8_weights_min_cc(version) == cc


def test_facts_default_to_one_gpu_per_stage() -> None:
    f = Facts()
    assert (f.tp, f.pp, f.kv_dtype_bytes, f.block_size.value) == (1, 1, 2, 16)


#: 4 layers, 2 of them sliding (window 1025), 1 KV head of 64 dims: 256 B a token per layer at 2 bytes
_SLIDING = ModelGeometry(name="s", layers=4, attention_heads=8, kv_heads=1, head_dim=64, source="t",
                         sliding_window=1025, sliding_window_layers=2)


def test_sliding_layers_hold_the_window_plus_the_default_batch() -> None:
    page = 16 * 256
    # full: cdiv(8192, 16) = 512 pages × 2 layers; sliding: cdiv(min(1024 + 2048, 8192), 16) + 1 = 193 pages × 2
    # (3072 tokens: exactly 192 pages, one more batched token would take a 194th)
    assert kv_bytes_for_len(_SLIDING, 8192, 2) == (512 * 2 + 193 * 2) * page
    assert kv_bytes_for_len(_SLIDING, 8192, 2, max_num_batched_tokens=4096) == (512 * 2 + 321 * 2) * page
    assert kv_bytes_for_len(_SLIDING, 8192, 2, max_num_batched_tokens=2049) == (512 * 2 + 194 * 2) * page
    assert kv_bytes_for_len(_SLIDING, 100, 2) == (7 * 2 + 8 * 2) * page  # a short request: its own length
    # the capacity search uses the same default batch: 1410 pages of budget fit 512 + 193 pages × 2 layers
    assert capacity_tokens(_SLIDING, (512 * 2 + 193 * 2) * page, 2, limit=8192) == 8192
    assert capacity_tokens(_SLIDING, (512 * 2 + 193 * 2) * page - 1, 2) == 8176
    assert capacity_tokens(_SLIDING, (512 * 2 + 193 * 2) * page, 2) == 8192  # no limit: the same search


# -- redaction -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "out"),
    [
        ("12345", "12345"),  # a number under a secret-named key is a figure, not a secret
        ("1.5", "1.5"),  # one decimal point: still a number
        ("1.2.3", MASK),  # two: no number, so a value to hide
        ("none", "none"),
        ("", ""),
        ("abcdef", MASK),
    ],
)
def test_numbers_under_secret_named_keys_stay(value: str, out: str) -> None:
    assert _walk({"api_key": value}) == {"api_key": out}
    assert _walk({"latency": value}) == {"latency": value}  # a key that names no secret


@pytest.mark.parametrize(
    ("argv", "out"),
    [
        (["--api-key", "abc123"], ["--api-key", MASK]),  # the last pair of the list is checked too
        (["vllm", "--api-key", "--port", "8000"], ["vllm", "--api-key", "--port", "8000"]),  # a flag is no value
        (["--api-key", "12345"], ["--api-key", "12345"]),
        (["--api-key", "[REDACTED]x"], ["--api-key", "[REDACTED]x"]),  # already redacted
        (["--hf-token", "abcdef", "x"], ["--hf-token", MASK, "x"]),
    ],
)
def test_the_value_after_a_secret_flag_in_an_argv_list(argv: list[str], out: list[str]) -> None:
    assert _walk(argv) == out


@pytest.mark.parametrize(
    ("text", "out"),
    [
        ("vllm serve m --api-key abcdefgh", 'vllm serve m --api-key "$VLLM_API_KEY"'),
        ("python x.py a b vllm --api-key abcdefgh", 'python x.py a b vllm --api-key "$API_KEY"'),  # vllm past argv[:4]
        ("python x.py a vllm --api-key abcdefgh", 'python x.py a vllm --api-key "$VLLM_API_KEY"'),
        ("cmd --hf-token=abcd1234", 'cmd --hf-token="$HF_TOKEN"'),
        ("cmd --my-secret=abcd1234", 'cmd --my-secret="$MY_SECRET"'),
        ("HF_TOKEN=hf_abcdefghijklmnopqrstuv cmd", 'HF_TOKEN="$HF_TOKEN" cmd'),
        ("cmd --api-key --port 1", "cmd --api-key --port 1"),  # the flag after it is no value
        ("echo 'unclosed", "echo 'unclosed"),  # no shell words: redacted as text
    ],
)
def test_redact_command_refers_to_the_environment(text: str, out: str) -> None:
    assert redact_command(text) == out
    assert _walk({"command": text}) == {"command": out}


@pytest.mark.parametrize(
    ("url", "out"),
    [
        ("postgres://user:pass@host/db", "postgres://user:[REDACTED]@host/db"),
        ("redis://:p@ss@host:1/0", "redis://:[REDACTED]@host:1/0"),  # the password runs to the last '@'
        ("http://host:8080/a@b", "http://host:8080/a@b"),  # a port, then a path with '@'
        ("x://u:123@h", "x://u:123@h"),  # digits only: a port
        ("x://u:1/2@h", "x://u:1/2@h"),
        ("x://u:@h", "x://u:@h"),  # nothing before the '@'
        ("x://u:@pw@host/db", "x://u:[REDACTED]@host/db"),  # a password that starts with '@'
        ("x://u:p@host", "x://u:[REDACTED]@host"),  # one character
        ("x://u:pw", "x://u:pw"),  # no '@' at all
    ],
)
def test_url_credentials(url: str, out: str) -> None:
    assert redact(url) == out


@pytest.mark.parametrize(
    ("key", "masked"),
    [
        ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", True),  # mixed case and digits, 4.66 bits a character
        ("wjalrxutnfemi/k7mdeng/bpxrficyexamplekey", False),  # no upper case
        ("WJALRXUTNFEMI/K7MDENG/BPXRFICYEXAMPLEKEY", False),  # no lower case
        ("wJalrXUtnFEMI/KzMDENG/bPxRfiCYEXAMPLEKEY", False),  # no digit
        ("aaaaaaaaaaaaaaaaaaaaAAAAAAAAAAAAAAAAAAA1", False),  # too regular: entropy 1.1
    ],
)
def test_bare_aws_secret_needs_mixed_characters_and_randomness(key: str, masked: bool) -> None:
    assert redact(f"k {key} v") == ("k [REDACTED] v" if masked else f"k {key} v")


def test_entropy_edges() -> None:
    assert _entropy("") == 0.0
    assert _entropy("aaaa") == 0.0
    assert _entropy("ab") == 1.0
    assert _entropy("abcd") == 2.0
    # 20 distinct characters twice each: log2(20) = 4.32 bits, over the 4.0 an AWS secret needs
    v = "aB1cD2eF3gH4iJ5kL6mN" * 2
    assert _entropy(v) == pytest.approx(4.3219, abs=1e-4)
    assert redact(f"k {v} v") == "k [REDACTED] v"
    # 16 distinct characters, uneven: 3.97 bits, under it
    v = "aB1cD2eF3gH4iJ5k" * 2 + "aB1cD2eF"
    assert len(v) == 40 and _entropy(v) == pytest.approx(3.9710, abs=1e-4)
    assert redact(f"k {v} v") == f"k {v} v"


@pytest.mark.parametrize(("dtype", "per"), [("fp8", 1), ("fp8_e5m2", 1), ("auto", 2), (None, 2), ("float32", 4)])
def test_the_kv_dtype_of_the_log_sets_the_bytes_per_entry(dtype: str | None, per: float) -> None:
    f = facts(_finding("vllm.kv", "vllm", "kv-cache-alloc"), Context(engine="vllm", kv_cache_dtype=dtype), {})
    assert f.kv_dtype_bytes == per


_DENSE = ModelGeometry(name="d", layers=1, attention_heads=1, kv_heads=1, head_dim=1, source="t")  # 4 B a token


@pytest.mark.parametrize(
    ("budget", "block", "limit", "tokens"),
    [
        (4, 1, None, 1),  # one token fits at block size 1
        (3, 1, None, 0),
        (4, 1, 1, 1),
        (3, 1, 1, 0),  # nothing fits: 0, even at a limit of 1
        (4 * 100, 16, 100, 96),  # 100 tokens need 7 blocks = 448 B: 96 fit
        (4 * 112, 16, 100, 100),  # the whole limit fits: the limit itself, not rounded to blocks
        (4 * 112, 16, 112, 112),
        (1, 16, None, 0),
    ],
)
def test_capacity_search_edges(budget: int, block: int, limit: int | None, tokens: int) -> None:
    assert capacity_tokens(_DENSE, budget, 2, block, limit=limit) == tokens


def test_capacity_search_without_a_limit_stops_at_2_to_the_24() -> None:
    assert capacity_tokens(_DENSE, 10**12, 2, 16) == 1 << 24


@pytest.mark.parametrize(
    ("needed", "available", "tokens"),
    [
        (16 * GiB, PRINT_HALF_STEP, 0),  # nothing left once the half step comes off
        (16 * GiB, PRINT_HALF_STEP - 1, 0),
        (16 * GiB, 0, 0),
        # (8 GiB − half step) / ((16 GiB + half step) / 131072 tokens) = 65475.6: 65472 in blocks
        (16 * GiB, 8 * GiB, 65472),
    ],
)
def test_capacity_from_figures_edges(needed: int, available: int, tokens: int) -> None:
    assert capacity_from_figures(needed, available, 131072) == tokens


@pytest.mark.parametrize(
    ("version", "flag"),
    [
        (None, None),
        ((0, 8, 9), None),
        ((0, 9, 0), "--cuda-graph-sizes"),
        ((0, 11, 0), "--cuda-graph-sizes"),
        ((0, 11, 1), "--max-cudagraph-capture-size"),
        ((0, 12, 0), "--max-cudagraph-capture-size"),
        ((0, 20, 0), "--max-cudagraph-capture-size"),
    ],
)
def test_cudagraph_size_flag_per_version(version: tuple[int, int, int] | None, flag: str | None) -> None:
    assert cudagraph_size_flag(version) == flag


# -- rulepack/loader -----------------------------------------------------------------------------


def _rule(rid: str, word: str = "zzqq") -> str:
    return (f'[[rule]]\nid = "{rid}"\ntitle = "A test rule"\nengine = "test"\nkind = "test"\n'
            f"triggers = [\"{word}\"]\npattern = '{word} (?P<count>\\\\d+)'\n"
            f'[[rule.match]]\nlog = "{word} 7"\nfigures = {{ count = 7 }}\n')


def test_a_user_rule_replaces_the_built_in_of_its_id_in_place(tmp_path: Any) -> None:
    builtin = load_pack()
    first = builtin.rules[0]
    (tmp_path / "a.toml").write_text(_rule(first.rule.id) + _rule("test.new"), encoding="utf-8")
    pack = load_pack([tmp_path])
    assert len(pack.rules) == len(builtin.rules) + 1  # replaced, not added; the new one appended
    assert pack.rules[0].rule.id == first.rule.id and pack.rules[0].order == first.order == 0
    assert pack.rules[0].builtin is False and pack.rules[0].rule.title == "A test rule"
    assert pack.rules[-1].rule.id == "test.new" and pack.rules[-1].order == len(builtin.rules)
    replaced = [w for w in pack.warnings if "replaces the built-in rule" in w]
    assert len(replaced) == 1 and replaced[0].endswith(
        f'a.toml: rule "{first.rule.id}": replaces the built-in rule of that id '
        "(give it an id of its own to add a rule beside it)")
    # a later user directory replaces an earlier user rule without the built-in warning
    other = tmp_path / "b"
    other.mkdir()
    (other / "b.toml").write_text(_rule("test.new", "qqzz"), encoding="utf-8")
    pack = load_pack([tmp_path, other])
    assert sum("replaces the built-in rule" in w for w in pack.warnings) == 1
    assert pack.rules[-1].rule.triggers == ["qqzz"] and pack.rules[-1].order == len(builtin.rules)


def test_user_rule_count_limit_is_inclusive(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "MAX_USER_RULES", 2)
    (tmp_path / "a.toml").write_text(_rule("test.one") + _rule("test.two", "qqzz"), encoding="utf-8")
    assert len(load_pack([tmp_path], include_builtin=False).rules) == 2
    (tmp_path / "b.toml").write_text(_rule("test.three", "zzxx"), encoding="utf-8")
    with pytest.raises(RulePackError, match="the rule directories hold more than 2 "):
        load_pack([tmp_path], include_builtin=False)


def test_duplicate_ids_in_one_directory_are_an_error(tmp_path: Any) -> None:
    (tmp_path / "a.toml").write_text(_rule("test.one"), encoding="utf-8")
    (tmp_path / "b.toml").write_text(_rule("test.one", "qqzz"), encoding="utf-8")
    with pytest.raises(RulePackError, match=r'rule "test.one": id: duplicate rule id \(also in '):
        load_pack([tmp_path], include_builtin=False)
    alone = load_pack([tmp_path / "a.toml"], include_builtin=False)  # a file is a directory of one
    assert [r.rule.id for r in alone.rules] == ["test.one"] and alone.rules[0].order == 0


_F32 = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "hidden_size": 256, "intermediate_size": 512, "vocab_size": 1000,
        "torch_dtype": "float32", "max_position_embeddings": 4096}


@pytest.mark.parametrize(
    ("kv_dtype", "per", "per_token"),
    [
        (None, 4, 2048),  # the model's dtype: 2 layers × 2 (K, V) × 2 heads × 64 dims × 4 B
        ("auto", 4, 2048),
        ("fp8", 1, 512),  # the log's KV dtype wins over the model's
        ("weird", 2, 1024),  # an unknown KV dtype: 2 bytes, vLLM's 16-bit default
    ],
)
def test_kv_bytes_per_entry_from_the_log_else_the_model(tmp_path: Any, kv_dtype: str | None, per: float,
                                                         per_token: int) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(_F32), encoding="utf-8")
    f = facts(None, Context(engine="vllm", kv_cache_dtype=kv_dtype), {"model-config": str(cfg)})
    assert f.kv_dtype_bytes == per
    assert f.bytes_per_token == Value(per_token, "config")
    assert f.weights is not None and f.weights.source == "config"  # the geometry's weights, when the log has none


@pytest.mark.parametrize(
    ("text", "version"),
    [("0.5", (0, 5, 0)), ("v0.11.1rc2", (0, 11, 1)), (" 1.2.3 ", (1, 2, 3)), ("", None), (None, None), ("main", None)],
)
def test_parse_version(text: str | None, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


# -- prescription: the second run's survivors ----------------------------------------------------


def test_summary_and_remedy_texts_in_japanese() -> None:
    with use_lang("ja"):
        assert prescription.summary("cudagraph-capture", {"graphs": 3 * GiB}) == "CUDAグラフがKVの予算とは別に3.00 GiBを使います。"
        assert prescription.summary("cudagraph-capture", {}) == "CUDAグラフのキャプチャに必要なメモリが予算に残っていませんでした。"
        ja = prescription.remedy_text("vllm.max-model-len", "title", tokens=4096)
    assert ja != prescription.remedy_text("vllm.max-model-len", "title", tokens=4096)
    assert "4096" in ja and not ja.isascii()
    # a key the translation lacks falls back to English
    entry = prescription.RemedyEntry(text={"a": "A {n}"}, ja={})
    assert prescription._localized(entry, "a", "ja") == "A {n}"
    assert prescription._localized(prescription.RemedyEntry(text={"a": "A"}, ja={"a": "エー"}), "a", "ja") == "エー"


def test_every_advice_text_has_its_japanese() -> None:
    assert prescription.untranslated("ja") == []


def test_render_template_names_the_missing_values() -> None:
    assert prescription.render_template("{a} and {b:size} at {c:frac}", {"a": 1, "b": GiB, "c": 0.5}) == (
        "1 and 1.00 GiB at 0.50")
    with pytest.raises(KeyError, match=r"no value for \['b', 'c'\]"):
        prescription.render_template("{a} {b:size} {c}", {"a": 1, "b": None})


def test_a_translated_summary_must_keep_the_placeholders(tmp_path: Any) -> None:
    text = prescription.table_path().read_text(encoding="utf-8")
    at = text.index("CUDAグラフがKVの予算とは別に{graphs:size}")
    bad = tmp_path / "causes.toml"
    bad.write_text(text[:at] + text[at:].replace("{graphs:size}", "{graph:size}", 1), encoding="utf-8")
    with pytest.raises(ValueError, match=r'cause "cudagraph-capture": ja.summary'):
        prescription.load_table(bad)
    assert "cudagraph-capture" in prescription.load_table(prescription.table_path())


# -- remedies_sglang: the second run's survivors -------------------------------------------------


@pytest.mark.parametrize(
    ("figures", "extra", "current", "flags", "fits", "confidence"),
    [
        ({"suggested_mem_fraction_static": 0.94}, {}, None, {"--mem-fraction-static": "0.95"}, True, "high"),  # at the ceiling
        ({"suggested_mem_fraction_static": 0.95}, {}, None, {}, False, "low"),  # 0.96: over it
        # measured: 1 − 20/80 = 0.75 of the GPU before the KV pool, + 0.05 for it
        ({}, {"sglang_avail_before_load_bytes": 80 * GiB, "sglang_avail_after_load_bytes": 20 * GiB}, None,
         {"--mem-fraction-static": "0.80"}, True, "medium"),
        ({}, {}, "0.87", {"--mem-fraction-static": "0.88"}, True, "medium"),  # below the default: the default
        ({}, {}, "0.88", {"--mem-fraction-static": "0.90"}, None, "low"),  # at it: one 0.02 step
        ({}, {}, "0.94", {}, False, "low"),  # 0.96 is over the ceiling
        ({"suggested_mem_fraction_static": 0.5}, {}, "0.9", None, None, None),  # not above the current value
        ({"suggested_mem_fraction_static": 0.5}, {}, "0.51", None, None, None),  # 0.51 <= 0.51
        ({"suggested_mem_fraction_static": 0.5}, {}, "0.5", {"--mem-fraction-static": "0.51"}, True, "high"),
    ],
)
def test_sglang_raise_fraction_table(figures: dict[str, Any], extra: dict[str, Any], current: str | None,
                                     flags: dict[str, str] | None, fits: bool | None, confidence: str | None) -> None:
    f = _finding("sglang.oom", "sglang", "kv-cache-alloc", **figures)
    ctx = Context(engine="sglang", extra=extra, launch_args={"mem_fraction_static": current} if current else {})
    r = _calc("sglang.mem-fraction-static.raise", f, ctx)
    if flags is None:
        assert r is None
        return
    assert r is not None and (r.flags, r.fits, r.confidence) == (flags, fits, confidence)


@pytest.mark.parametrize(
    ("available", "current", "value"),
    [(128, None, "128"), (191, None, "128"), (127, None, None), (None, 256, "128"), (None, 255, None), (4096, 1024, "512")],
)
def test_sglang_chunked_prefill_not_below_128(available: int | None, current: int | None, value: str | None) -> None:
    # round_down(min(current // 2, available), 64), nothing under 128 tokens
    figures = {"available_tokens": available} if available else {}
    f = _finding("sglang.oom", "sglang", "inference", **figures)
    ctx = Context(engine="sglang", launch_args={"chunked_prefill_size": str(current)} if current else {})
    r = _calc("sglang.chunked-prefill-size", f, ctx)
    assert (r.flags["--chunked-prefill-size"] if r else None) == value


@pytest.mark.parametrize(
    ("current", "requested", "flags"),
    [
        # step = max(0.05, ceil_to(10.1 GiB / 100 GiB, 2) = 0.11): floor_to(0.885 − 0.11, 2) = 0.77
        ("0.885", int(0.101 * 100 * GiB), {"--mem-fraction-static": "0.77"}),
        ("0.885", int(0.01 * 100 * GiB), {"--mem-fraction-static": "0.83"}),  # the 0.05 step is larger
    ],
)
def test_sglang_lower_steps_by_the_request_rounded_up(current: str, requested: int, flags: dict[str, str]) -> None:
    f = _finding("sglang.oom", "sglang", "cudagraph-capture", requested_bytes=requested, total_bytes=100 * GiB)
    r = _calc("sglang.mem-fraction-static.lower", f, Context(engine="sglang", launch_args={"mem_fraction_static": current}))
    assert _flags(r) == flags


def test_sglang_max_running_requests_names_the_limit_when_running_equals_it() -> None:
    f = _finding("sglang.oom", "sglang", "inference")
    ctx = Context(engine="sglang", launch_args={"max_running_requests": "8", "sglang_running_requests": "8"})
    r = _calc("sglang.max-running-requests", f, ctx)
    assert r is not None and r.flags == {"--max-running-requests": "4"}
    assert r.why == prescription.remedy_text("sglang.max-running-requests", "why_limit", current=8)
    ctx = Context(engine="sglang", launch_args={"max_running_requests": "8", "sglang_running_requests": "6"})
    r = _calc("sglang.max-running-requests", f, ctx)
    assert r is not None and r.flags == {"--max-running-requests": "3"}
    assert r.why == prescription.remedy_text("sglang.max-running-requests", "why_running", current=6)


def test_sglang_tp_defaults_to_one() -> None:
    f = _finding("sglang.oom", "sglang", "weights-load")
    assert _flags(_calc("sglang.tp-size", f, Context(engine="sglang", gpu_count=2))) == {"--tp-size": "2"}


@pytest.mark.parametrize(("quant", "flags"), [(None, {"--quantization": "fp8"}), ("None", {"--quantization": "fp8"}), ("awq", None)])
def test_sglang_quantization_only_when_none_is_set(quant: str | None, flags: dict[str, str] | None) -> None:
    f = _finding("sglang.oom", "sglang", "weights-load")
    ctx = Context(engine="sglang", launch_args={"quantization": quant} if quant else {})
    assert _flags(_calc("sglang.quantization", f, ctx)) == flags


@pytest.mark.parametrize(("current", "flags"), [("2", {"--max-running-requests": "1"}), ("1", None)])
def test_sglang_max_running_requests_halves_from_2(current: str, flags: dict[str, str] | None) -> None:
    f = _finding("sglang.oom", "sglang", "inference")
    ctx = Context(engine="sglang", launch_args={"max_running_requests": current})
    assert _flags(_calc("sglang.max-running-requests", f, ctx)) == flags


@pytest.mark.parametrize(
    ("before", "after", "current", "flags"),
    [
        # 1 − 21/80 = 0.7375, + 0.05 = 0.7875, rounded up to 0.79: above a current 0.789
        (80 * GiB, 21 * GiB, "0.789", {"--mem-fraction-static": "0.79"}),
        (1, 0, None, {}),  # a minimum of the whole GPU: over the ceiling
    ],
)
def test_sglang_raise_from_the_measured_memory_rounds_up(before: int, after: int, current: str | None,
                                                         flags: dict[str, str]) -> None:
    f = _finding("sglang.oom", "sglang", "kv-cache-alloc")
    ctx = Context(engine="sglang", extra={"sglang_avail_before_load_bytes": before, "sglang_avail_after_load_bytes": after},
                  launch_args={"mem_fraction_static": current} if current else {})
    assert _flags(_calc("sglang.mem-fraction-static.raise", f, ctx)) == flags


def test_sglang_lower_fits_when_the_freed_share_equals_the_request() -> None:
    # step = ceil_to(1 GiB / 4 GiB, 2) = 0.25: 0.75 → 0.50 frees exactly the 1 GiB asked for
    f = _finding("sglang.oom", "sglang", "cudagraph-capture", requested_bytes=GiB, total_bytes=4 * GiB)
    r = _calc("sglang.mem-fraction-static.lower", f, Context(engine="sglang", launch_args={"mem_fraction_static": "0.75"}))
    assert r is not None and (r.flags, r.fits, r.saves_bytes) == ({"--mem-fraction-static": "0.50"}, True, GiB)


def test_sglang_raise_step_rounds_to_two_decimals_before_the_ceiling() -> None:
    # round(0.9349 + 0.02, 2) = 0.95: at the ceiling, allowed (0.9549 unrounded would be over it)
    f = _finding("sglang.oom", "sglang", "kv-cache-alloc")
    r = _calc("sglang.mem-fraction-static.raise", f, Context(engine="sglang", launch_args={"mem_fraction_static": "0.9349"}))
    assert _flags(r) == {"--mem-fraction-static": "0.95"}


@pytest.mark.parametrize(
    ("current", "sizes", "value"),
    [("2", None, "1"), ("1", None, None), (None, "1 2 4 8 16", "8"), (None, "1 2 4 8 12", "4"), ("24", "1 2 4 8 16 24", "8")],
)
def test_sglang_cuda_graph_max_bs_halves_to_a_captured_size(current: str | None, sizes: str | None, value: str | None) -> None:
    f = _finding("sglang.oom", "sglang", "cudagraph-capture")
    ctx = Context(engine="sglang", launch_args={"cuda_graph_max_bs": current} if current else {},
                  extra={"sglang_cuda_graph_bs": sizes} if sizes else {})
    r = _calc("sglang.cuda-graph-max-bs", f, ctx)
    assert (r.flags["--cuda-graph-max-bs"] if r else None) == value


@pytest.mark.parametrize(("phase", "fits"), [("cudagraph-capture", True), ("inference", None)])
def test_sglang_disable_cuda_graph_fits_a_capture_failure(phase: str, fits: bool | None) -> None:
    r = _calc("sglang.disable-cuda-graph", _finding("sglang.oom", "sglang", phase), Context(engine="sglang"))
    assert r is not None and r.fits is fits


def test_sglang_tp_and_quantization_wording() -> None:
    f = _finding("sglang.oom", "sglang", "weights-load")
    r = _calc("sglang.tp-size", f, Context(engine="sglang", gpu_count=4, tensor_parallel_size=2))
    assert r is not None
    assert r.title == prescription.remedy_text("sglang.tp-size", "title", gpus=4)
    assert r.why == prescription.remedy_text("sglang.tp-size", "why", gpus=4, new_tp=4, tp=2)
    r = _calc("sglang.quantization", f, Context(engine="sglang", weights_bytes=16 * GiB))
    assert r is not None and r.saves_bytes == 8 * GiB
    assert r.why == prescription.remedy_text("sglang.quantization", "why_sized", weights=16 * GiB, half=8 * GiB)


@pytest.mark.parametrize(("current", "key"), [("1", "why_both"), (None, "why_pool")])
def test_sglang_chunked_prefill_says_what_it_halved(current: str | None, key: str) -> None:
    f = _finding("sglang.oom", "sglang", "inference", available_tokens=200)
    ctx = Context(engine="sglang", launch_args={"chunked_prefill_size": current} if current else {})
    r = _calc("sglang.chunked-prefill-size", f, ctx)
    assert r is not None and r.flags == {"--chunked-prefill-size": "192"}
    assert r.why == prescription.remedy_text("sglang.chunked-prefill-size", key, current=int(current) if current else None,
                                             available=200)


# -- remedies_vllm: tensor parallelism when the log does not say how many GPUs -------------------


@pytest.mark.parametrize(
    ("weights_gib", "tp", "fits"),
    [
        (100, "2", True),  # 50 GiB a GPU <= 72 GiB (80 GiB × 0.9)
        (500, "8", True),  # 62.5 GiB at 8
        (600, "8", False),  # 75 GiB even at 8: one node's 8 GPUs at most are assumed, never 16
    ],
)
def test_tensor_parallel_assumes_at_most_8_gpus(weights_gib: int, tp: str, fits: bool) -> None:
    f = _finding("torch.cuda-oom", "vllm", "weights-load", requested_bytes=GiB)
    f.cause = Cause(id="weights-exceed-device", summary="s")
    ctx = Context(engine="vllm", weights_bytes=weights_gib * GiB, gpu_total_bytes=80 * GiB, gpu_memory_utilization=0.9)
    r = _calc("vllm.tensor-parallel-size", f, ctx)
    assert r is not None and (r.flags, r.fits, r.confidence) == ({"--tensor-parallel-size": tp}, fits, "low")
    assert r.title == prescription.remedy_text("vllm.tensor-parallel-size", "title_assumed", gpus=int(tp))
    # the log names no cause of weights: no count is assumed, no remedy
    f.cause = None
    assert _calc("vllm.tensor-parallel-size", f, ctx) is None


# -- engine_args: what the sampled parsers say ---------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "flag", "version", "default"),
    [
        ("vllm", "--gpu-memory-utilization", "0.11.0", "0.9"),
        ("vllm", "--gpu-memory-utilization", "0.1.0", UNKNOWN_DEFAULT),  # older than every sample
        ("vllm", "--nonexistent", None, UNKNOWN_DEFAULT),
        ("vllm", "--max-model-len", "0.11.0", "None"),
        ("sglang", "--page-size", "0.4.6", "1"),
        ("sglang", "--page-size", "0.5.0", UNKNOWN_DEFAULT),  # between 0.4.6 (1) and 0.5.10 (None): they disagree
        ("llama.cpp", "-c", "bogus-version", UNKNOWN_DEFAULT),
        ("nosuch", "--x", None, UNKNOWN_DEFAULT),
    ],
)
def test_default_of_per_version(engine: str, flag: str, version: str | None, default: str) -> None:
    assert default_of(engine, flag, version) == default


@pytest.mark.parametrize(
    ("engine", "flag", "version", "takes"),
    [
        ("vllm", "--enforce-eager", "0.11.0", False),
        ("vllm", "--dtype", "0.11.0", True),
        ("vllm", "--bogus", "0.11.0", None),
        ("vllm", "--dtype", "0.0.1", True),  # older than every sample: the kind all samples agree on
        ("llama.cpp", "-fa", "5590", False),  # a switch up to b5590
        ("llama.cpp", "-fa", "6431", True),  # -fa on|off|auto from b6431
        ("llama.cpp", "-fa", "6000", None),  # between the two samples: a switch in one, a value in the other
        ("llama.cpp", "-fa", None, True),
    ],
)
def test_takes_value_per_version(engine: str, flag: str, version: str | None, takes: bool | None) -> None:
    assert takes_value(engine, flag, version) is takes
    assert switch_value(engine, flag, version, "on") == ("on" if takes else "")


@pytest.mark.parametrize(
    ("engine", "flag", "version", "said"),
    [
        ("llama.cpp", "LLAMA_ARG_BOGUS", None, False),  # no variable of common/arg.cpp
        ("llama.cpp", "LLAMA_ARG_CTX_SIZE", None, True),  # stands for --ctx-size
        ("vllm", "PATH", None, None),  # not an option
        ("vllm", "--dtype=bfloat16", "0.11.0", True),
        ("vllm", "--dtype=xx", "0.11.0", False),  # not one of the choices
        ("vllm", "--dtype=bfloat16=x", "0.11.0", False),  # the value is all after the first '='
        ("vllm", "--dtype", "0.0.1", None),  # older than every sample
        ("vllm", "--no-enable-prefix-caching", "0.11.0", True),  # the --no- form of a boolean flag
        ("vllm", "--no-such-thing", "0.11.0", False),
        ("nosuch", "--x", None, None),
    ],
)
def test_sampled_per_version(engine: str, flag: str, version: str | None, said: bool | None) -> None:
    assert sampled(engine, flag, version) is said


def test_environment_and_destination_names() -> None:
    assert env_of("llama.cpp", "-c") == "LLAMA_ARG_CTX_SIZE"
    assert env_of("vllm", "--dtype") is None
    assert option_of_env("llama.cpp", "LLAMA_ARG_CTX_SIZE") == "--ctx-size"
    assert option_of_env("llama.cpp", "llama_arg_ctx_size") is None  # variables are upper case
    assert flag_of_dest("vllm", "max_model_len") == "--max-model-len"
    assert flag_of_dest("vllm", "nope") is None
    assert canonical("vllm", "--max_model_len=5") == "--max-model-len"
    assert canonical("sglang", "--max_model_len") == "--max_model_len"  # only vLLM takes both spellings


def test_flag_spec_choices_are_the_samples_in_common() -> None:
    assert flag_spec("vllm", "--kv-cache-dtype", "0.8.5") == FlagSpec(
        "--kv-cache-dtype", "value", ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"))
    assert flag_spec("llama.cpp", "-fa", "6000") == FlagSpec("-fa", "optional", None)


@pytest.mark.parametrize(
    ("flag", "version", "spec"),
    [
        # older than every sample, or no release number: the oldest sample that holds the flag
        # (0.5.5 alone: 0.6.6 dropped 256 to 2048 and added 64)
        ("--block-size", "0.5.4", FlagSpec("--block-size", "value", ("1024", "128", "16", "2048", "256", "32", "512", "8"))),
        ("--block-size", "dev", FlagSpec("--block-size", "value", ("1024", "128", "16", "2048", "256", "32", "512", "8"))),
        ("--block-size", "0.6.6", FlagSpec("--block-size", "value", ("128", "16", "32", "64", "8"))),
        # the --no- form of a boolean flag is written as the flag it turns off: a switch
        ("--no-enable-prefix-caching", "0.11.0", FlagSpec("--enable-prefix-caching", "switch", None)),
    ],
)
def test_flag_spec_per_version(flag: str, version: str, spec: FlagSpec) -> None:
    assert flag_spec("vllm", flag, version) == spec


@pytest.mark.parametrize(
    ("argv", "problems"),
    [
        (["--dtype"], ["--dtype: needs a value"]),  # the last token: nothing follows
        (["--enforce-eager"], []),
        (["--max-model-len", "-1"], []),  # a negative number is a value
        (["--max-model-len", "-1.5"], []),
        # two dots make no number: a flag, and the flag before it has no value
        (["--max-model-len", "-1.2.3"], ["--max-model-len: needs a value", "-1.2.3: not a flag of vllm"]),
        (["--bogus", "3", "--dtype", "half"], ["--bogus: not a flag of vllm"]),  # its value is skipped
        (["serve", "m", "x"], []),  # the program and positionals come first
        (["--dtype", "half", "x"], ["'x': not a flag or its value"]),
    ],
)
def test_check_argv_edges(argv: list[str], problems: list[str]) -> None:
    assert check_argv("vllm", argv, "0.11.0") == problems


def test_a_model_dtype_the_table_does_not_know_is_16_bits(tmp_path: Any) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**_F32, "torch_dtype": "mystery"}), encoding="utf-8")
    f = facts(None, Context(engine="vllm"), {"model-config": str(cfg)})
    assert (f.kv_dtype_bytes, f.bytes_per_token) == (2, Value(1024, "config"))


def _pool(step: str, requested: int, available: int) -> Finding:
    f = _finding("sglang.kv-pool-exhausted", "sglang", "inference", step=step, requested_tokens=requested,
                 available_tokens=available)
    return f.model_copy(update={"rule": "sglang.kv-pool-exhausted"})


@pytest.mark.parametrize(
    ("available", "args", "value"),
    [
        (2048, {}, "32"),  # ⌊2048 / 64⌋ = 32 fresh pages, below the 48 running
        (64, {}, "1"),  # one page
        (63, {}, None),  # not one whole page: no paged answer (and no limit to halve)
        (2048, {"max_running_requests": "32"}, "16"),  # 32 is the limit already: half of it instead
        (2048, {"max_running_requests": "33"}, "32"),
        (2048, {"sglang_running_requests": "10"}, "32"),  # decode: the running count is the message's 48
    ],
)
def test_sglang_running_requests_from_whole_pages(available: int, args: dict[str, str], value: str | None) -> None:
    ctx = Context(engine="sglang", launch_args={"page_size": "64", **args})
    r = _calc("sglang.max-running-requests", _pool("Decode", 48, available), ctx)
    assert (r.flags["--max-running-requests"] if r else None) == value


@pytest.mark.parametrize(
    ("request_mib", "offloaded", "layers"),
    [
        (3, 10, "7"),  # 1 MiB a layer: drop ceil(3 MiB / 1 MiB) = 3 of the 10
        (9, 10, "1"),
        (10, 10, "5"),  # dropping every layer is no answer: half of them
        (None, 2, "1"),  # nothing to size a layer by: half
        (None, 1, None),  # one layer: nothing to halve
    ],
)
def test_ngl_drops_the_layers_that_free_the_failed_request(request_mib: int | None, offloaded: int,
                                                            layers: str | None) -> None:
    figures = {"requested_bytes": request_mib * MiB} if request_mib else {}
    f = _finding("ggml.alloc-failed", "llama.cpp", "inference", **figures)
    ctx = Context(engine="llama.cpp", extra={"llama_offloaded_layers": offloaded,
                                             "llama_gpu_weights_bytes": offloaded * MiB if request_mib else None})
    r = _calc("ggml.n-gpu-layers", f, ctx)
    assert (r.flags["-ngl"] if r else None) == layers


@pytest.mark.parametrize(
    ("extra", "experts", "per_token", "intermediate"),
    [
        ({}, 1, 1, 200),  # dense: one expert, its own intermediate size
        ({"moe_intermediate_size": 100}, 1, 1, 200),  # a MoE size in a dense config is not read
        ({"moe_intermediate_size": 100, "num_local_experts": 2, "num_experts_per_tok": 2}, 2, 2, 100),
    ],
)
def test_config_experts_and_intermediate_size(extra: dict[str, Any], experts: int, per_token: int,
                                              intermediate: int) -> None:
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256, "intermediate_size": 200, **extra}
    geo = geometry_from_config(cfg, "t")
    assert (geo.experts, geo.experts_per_token, geo.intermediate_size) == (experts, per_token, intermediate)
    assert geo.head_dim == 64  # hidden / heads


def test_config_without_head_dim_or_hidden_size_has_no_head_dim() -> None:
    geo = geometry_from_config({"num_hidden_layers": 2, "num_attention_heads": 4}, "t")
    assert (geo.head_dim, geo.kv_heads, geo.hidden_size) == (0, 4, None)


# -- remedies_vllm: the named region's survivors -------------------------------------------------


@pytest.mark.parametrize(
    ("estimate", "max_len", "block", "value"),
    [
        (4096, 4096, None, None),  # capacity equals the length: it already fits, no remedy
        (4095, 4096, None, "4080"),  # rounded down to 16-token blocks
        (10, 4096, None, None),  # under one block: 0 tokens is no answer
        (1, 4096, 1, "1"),  # one token at block size 1 is
    ],
)
def test_max_model_len_at_capacity(estimate: int, max_len: int, block: int | None, value: str | None) -> None:
    f = _finding("vllm.kv-cache.max-len-exceeds", "vllm", "kv-cache-alloc", estimated_max_model_len=estimate)
    ctx = Context(engine="vllm", max_model_len=max_len, block_size=block)
    r = _calc("vllm.max-model-len", f, ctx)
    assert (r.flags["--max-model-len"] if r else None) == value


def test_raise_for_kv_needs_a_shortage() -> None:
    ctx = Context(engine="vllm", gpu_total_bytes=_TOTAL, gpu_memory_utilization=0.9)
    assert _calc("vllm.gpu-memory-utilization.raise-for-kv", _vllm_kv(10 * GiB, 10 * GiB), ctx) is None


@pytest.mark.parametrize(
    ("missing_gib", "value", "fits", "saves_gib"),
    [
        (4, "1024", False, 2),  # the whole 4 GiB peak is missing: halving cannot do it alone
        (3, "512", True, 3),  # keep a quarter of the peak: 2048 × 1/4 = 512 tokens, the floor itself
        (1, "1536", True, 1),
    ],
)
def test_batched_tokens_from_the_activation_share(missing_gib: int, value: str, fits: bool, saves_gib: int) -> None:
    f = _finding("torch.cuda-oom", "vllm", "inference", requested_bytes=missing_gib * GiB)
    ctx = Context(engine="vllm", max_num_batched_tokens=2048, activation_peak_bytes=4 * GiB)
    r = _calc("vllm.max-num-batched-tokens", f, ctx)
    assert r is not None and (r.flags, r.fits, r.saves_bytes) == ({"--max-num-batched-tokens": value}, fits,
                                                                  saves_gib * GiB)


@pytest.mark.parametrize(("current", "value"), [(None, "256"), ("abc", "256"), ("[8,16,64]", "32")])
def test_capture_size_default_512(current: str | None, value: str) -> None:
    ctx = Context(engine="vllm", engine_version="0.11.1",
                  launch_args={"max_cudagraph_capture_size": current} if current else {})
    f = _finding("torch.cuda-oom", "vllm", "cudagraph-capture", requested_bytes=MiB)
    r = _calc("vllm.cudagraph-capture-size", f, ctx)
    assert r is not None and r.flags == {"--max-cudagraph-capture-size": value}
    if current != "[8,16,64]":
        assert "512" in r.why


def test_value_ok_and_the_kind_outside_the_flags_versions() -> None:
    assert value_ok("llama.cpp", "-fa", "", "6000") is True  # optional: may stand alone
    assert value_ok("vllm", "--dtype", "", "0.11.0") is False  # needs one
    assert value_ok("vllm", "--enforce-eager", "", "0.11.0") is True
    assert value_ok("vllm", "--enforce-eager", "x", "0.11.0") is False  # a switch takes none
    # a flag at a version that lacks it: no spec, yet the samples that have it agree it takes a value
    assert flag_spec("vllm", "--max-cudagraph-capture-size", "0.6.6") is None
    assert takes_value("vllm", "--max-cudagraph-capture-size", "0.6.6") is True
    assert check_argv("vllm", ["--bogus"], "0.11.0") == ["--bogus: not a flag of vllm"]  # last on the line
