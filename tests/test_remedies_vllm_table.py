"""vLLM's calculators, value by value at their boundaries, floors, fallbacks and flag spellings.

Written against a whole-module mutation run of ``oomdoctor/advisor/remedies_vllm.py`` (issue 38 §4:
``python tools/mutate.py oomdoctor/advisor/remedies_vllm.py``): each row is worked out from the
formula in its comment, and moving a boundary by one step, flipping a comparison or changing a
constant changes at least one row.
"""

from __future__ import annotations

from typing import Any

import pytest

from oomdoctor.advisor import remedies_vllm as rv
from oomdoctor.advisor.catalog import find_model
from oomdoctor.advisor.memory_model import PRINT_HALF_STEP, kv_bytes_for_len
from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Cause, Context, Finding, Location, Remedy

GiB = 2**30
MiB = 2**20
#: Llama-3.1-8B in bf16: 32 layers × 8 KV heads × 128 × (K + V) × 2 bytes
LLAMA8_BPT = 32 * 8 * 128 * 2 * 2
LLAMA8 = "meta-llama/Llama-3.1-8B"


def _f(kind: str = "vllm.kv-cache.max-len-exceeds", phase: str = "kv-cache-alloc", engine: str = "vllm",
       rule: str = "test", message: str = "m", cause: str | None = None, **figures: Any) -> Finding:
    return Finding(rule=rule, kind=kind, engine=engine, severity="error", phase=phase, title="t", message=message,
                   location=Location(line=1, end_line=1), figures=figures,
                   cause=Cause(id=cause, summary="s") if cause else None)


def _inp(f: Finding, ctx: Context | None = None, **hints: str) -> AdviceInput:
    return AdviceInput(f, ctx or Context(engine="vllm"), dict(hints))


def _calc(rid: str, f: Finding, ctx: Context | None = None, **hints: str) -> Remedy | None:
    return calculator(rid)(_inp(f, ctx, **hints))


def _vllm(**kw: Any) -> Context:
    return Context(engine="vllm", **kw)


# -- the KV capacity, the shortage and whether a saving covers it ------------------------------------


def test_capacity_sliding_window_tolerance_is_inclusive() -> None:
    """Gemma-2's window layers are searched when the message's need is within max(half a printed
    step, 1 %) of the model's own need for that length, both edges included."""
    geo = find_model("google/gemma-2-9b-it")
    assert geo is not None
    need = kv_bytes_for_len(geo, 8192, 2, 16, 1, 1)
    assert need == 2469003264
    # needed − need == needed // 100 exactly: 2493942690 − 2469003264 = 24939426
    at_edge = 2493942690
    assert at_edge - need == at_edge // 100 > PRINT_HALF_STEP
    ctx = _vllm(model="google/gemma-2-9b-it")
    cap = rv.kv_capacity_tokens(_inp(_f(kv_cache_needed_bytes=at_edge, kv_cache_available_bytes=need // 2,
                                         max_seq_len=8192), ctx))
    assert cap is not None and cap[0] == 3552 and "window" in cap[1]
    # one byte further: the printed figures alone (unfavourable edges)
    cap = rv.kv_capacity_tokens(_inp(_f(kv_cache_needed_bytes=at_edge + 1, kv_cache_available_bytes=need // 2,
                                         max_seq_len=8192), ctx))
    assert cap is not None and cap[0] == 4016 and "window" not in cap[1]


@pytest.mark.parametrize(("model", "basis"), [
    (None, "8192 tokens need 2.30 GiB and 1 B is available"),
    ("google/gemma-2-9b-it", "1 B available holds 0 tokens of google/gemma-2-9b-it"),
])
def test_capacity_from_a_single_byte(model: str | None, basis: str) -> None:
    f = _f(kv_cache_needed_bytes=2469003264, kv_cache_available_bytes=1, max_seq_len=8192)
    cap = rv.kv_capacity_tokens(_inp(f, _vllm(model=model)))
    assert cap is not None and cap[0] == 0 and cap[1].startswith(basis)


@pytest.mark.parametrize("model", [None, "google/gemma-2-9b-it"])
def test_capacity_none_when_nothing_is_available(model: str | None) -> None:
    # Gemma-2-9B's own need for 8192 tokens: the window branch would be taken if anything were available
    f = _f(kv_cache_needed_bytes=2469003264, kv_cache_available_bytes=0, max_seq_len=8192)
    assert rv.kv_capacity_tokens(_inp(f, _vllm(model=model))) is None


SHORTAGES = [
    # (figures, context, bytes missing)
    ({"kv_cache_needed_bytes": 3 * GiB, "kv_cache_available_bytes": 0}, {}, 3 * GiB),
    ({"kind": "torch.cuda-oom", "desired_bytes": 10 * GiB, "free_bytes": 0}, {}, 10 * GiB),
    # free == request: the request itself (free memory is not known to be usable), 1 byte less: the gap
    ({"kind": "torch.cuda-oom", "requested_bytes": GiB, "free_bytes": GiB}, {}, GiB),
    ({"kind": "torch.cuda-oom", "requested_bytes": GiB, "free_bytes": GiB - 1}, {}, 1),
    ({"kind": "vllm.kv-cache.no-blocks"}, {"kv_cache_bytes": -GiB}, GiB),
    ({"kind": "vllm.kv-cache.no-blocks"}, {"kv_cache_bytes": 0}, 0),
    ({"kind": "vllm.kv-cache.no-blocks"}, {"kv_cache_bytes": GiB}, 0),
    # one request of 1000 tokens on top of the negative budget
    ({"kind": "vllm.kv-cache.no-blocks"}, {"kv_cache_bytes": -GiB, "max_model_len": 1000, "model": LLAMA8},
     GiB + 1000 * LLAMA8_BPT),
    ({"kv_cache_tokens": 1000, "max_seq_len": 1016}, {"model": LLAMA8}, 16 * LLAMA8_BPT),
]


@pytest.mark.parametrize(("figs", "ctx", "missing"), SHORTAGES)
def test_shortage(figs: dict[str, Any], ctx: dict[str, Any], missing: int) -> None:
    short = rv.shortage(_inp(_f(**figs), _vllm(**ctx)))
    assert short is not None and short[0] == missing


def test_covers_at_the_shortage() -> None:
    inp = _inp(_f(kind="torch.cuda-oom", requested_bytes=GiB, free_bytes=0))
    assert (rv.covers(GiB, inp), rv.covers(GiB - 1, inp), rv.covers(None, inp)) == (True, False, None)
    # a single byte missing is a shortage like any other
    inp = _inp(_f(kind="torch.cuda-oom", requested_bytes=1, free_bytes=0))
    assert rv.covers(1, inp) is True
    # nothing missing: unknown, whatever the saving (a lower bound or an exact need)
    inp = _inp(_f(kind="vllm.kv-cache.no-blocks"), _vllm(kv_cache_bytes=GiB))
    assert rv.covers(GiB, inp) is None
    inp = _inp(_f(kv_cache_needed_bytes=GiB, kv_cache_available_bytes=GiB))
    assert rv.covers(GiB, inp) is None
    # no blocks without one request's size: a lower bound, so enough is only "maybe"
    inp = _inp(_f(kind="vllm.kv-cache.no-blocks"), _vllm(kv_cache_bytes=-GiB))
    assert rv.shortage_is_lower_bound(inp)
    assert (rv.covers(GiB, inp), rv.covers(GiB - 1, inp)) == (None, False)


def test_kv_cache_memory_bytes_rounds_up_to_a_hundredth_of_a_gib() -> None:
    # step GiB // 100 = 10737418 bytes; 1 GiB is 100.0000022 steps: 101 steps
    ctx = _vllm(extra={"kv_cache_memory_set": True})
    r = _calc("vllm.kv-cache-memory-bytes", _f(kv_cache_needed_bytes=GiB, kv_cache_available_bytes=0), ctx)
    assert r is not None and r.flags == {"--kv-cache-memory-bytes": str(101 * 10737418)}
    r = _calc("vllm.kv-cache-memory-bytes", _f(kv_cache_needed_bytes=100 * 10737418), ctx)
    assert r is not None and r.flags == {"--kv-cache-memory-bytes": "1073741800"}


# -- the utilization ceiling and the raises ---------------------------------------------------------


@pytest.mark.parametrize(("free", "total", "cap", "basis"), [
    # free / total exactly at 0.95: oomdoctor's own ceiling is the reason, not the free memory
    (95 * GiB, 100 * GiB, 0.95, "oomdoctor's ceiling"),
    (94 * GiB, 100 * GiB, 0.94, "free/total = 94.00 GiB / 100.00 GiB"),
])
def test_util_cap_at_the_ceiling(free: int, total: int, cap: float, basis: str) -> None:
    inp = _inp(_f(kind="torch.cuda-oom", free_bytes=free, total_bytes=total))
    got, why = rv._util_cap(rv.get_facts(inp), inp)
    assert (got, why) == (cap, basis)


TOLD = "Try increasing gpu_memory_utilization"
RAISES = [
    # (message, context, flag, confidence): util + 0.05, capped at 0.95; "told" by vLLM's own words
    (TOLD, {"gpu_memory_utilization": 0.8}, "0.85", "medium"),
    ("m", {"gpu_memory_utilization": 0.8}, "0.85", "low"),
    ("m", {"gpu_memory_utilization": 0.93}, "0.95", "low"),
    # already at the ceiling: nothing to raise
    (TOLD, {"gpu_memory_utilization": 0.95}, None, None),
]


@pytest.mark.parametrize(("message", "ctx", "flag", "confidence"), RAISES)
def test_raise_utilization_step(message: str, ctx: dict[str, Any], flag: str | None, confidence: str | None) -> None:
    r = _calc(rv._RAISE, _f(kind="vllm.x", message=message), _vllm(**ctx))
    if flag is None:
        assert r is None
    else:
        assert r is not None and r.flags == {"--gpu-memory-utilization": flag} and r.confidence == confidence


@pytest.mark.parametrize(("ctx", "base"), [
    ({"engine_version": "0.8.5"}, "0.90 (the version's default) + 0.05"),
    ({"engine_version": "0.8.5", "gpu_memory_utilization": 0.9}, "0.90 (the log's value) + 0.05"),
])
def test_raise_utilization_names_where_the_value_comes_from(ctx: dict[str, Any], base: str) -> None:
    r = _calc(rv._RAISE, _f(kind="vllm.x"), _vllm(**ctx))
    assert r is not None and base in r.why


# -- fp8 KV cache ---------------------------------------------------------------------------------


def test_fp8_kv_from_compute_capability_8_0() -> None:
    """Ampere (8.0) is the first compute capability with an fp8 KV cache; Volta (7.0) has none."""
    ctx = _vllm(engine_version="0.8.5")
    assert rv.fp8_kv_support(_inp(_f(), ctx, gpu="A100")) == ("fp8", "")
    assert rv.fp8_kv_support(_inp(_f(), ctx, gpu="V100"))[0] is None


@pytest.mark.parametrize(("avail", "flags", "saves", "fits"), [
    # 4 GiB needed, fp8 halves it to 2 GiB: exactly what is available fits
    (2 * GiB, {"--kv-cache-dtype": "fp8"}, 2 * GiB, True),
    # one byte short: fp8 plus the longest length its cache holds (8192 × (2 GiB − 1) / 2 GiB → 8160)
    (2 * GiB - 1, {"--kv-cache-dtype": "fp8", "--max-model-len": "8160"}, 2 * GiB, True),
    # nothing available: no basis for either branch
    (0, None, None, None),
])
def test_fp8_kv_by_bytes(avail: int, flags: dict[str, str] | None, saves: int | None, fits: bool | None) -> None:
    r = _calc("vllm.kv-cache-dtype-fp8", _f(kv_cache_needed_bytes=4 * GiB, kv_cache_available_bytes=avail,
                                             max_seq_len=8192))
    if flags is None:
        assert r is None
    else:
        assert r is not None and (r.flags, r.saves_bytes, r.fits) == (flags, saves, fits)


# -- fitting the free memory ------------------------------------------------------------------------

FREE = "vllm.gpu-memory-utilization.fit-free"
FIT_FREE = [
    # (free GiB of 100, utilization, weights, flag, saves, fits)
    # 1.5 % free − 1 % margin floors to 0.00: nothing to offer
    (1.5, 0.9, None, None, None, None),
    # 0.91 − 0.01 = 0.90, the utilization already asked: no change
    (91, 0.9, None, None, None, None),
    (90, 0.95, None, "0.89", int((0.95 - 0.89) * 100 * GiB), True),
    # 0.50 × 100 GiB − 50 GiB of weights = 0: no room for the KV cache
    (51, 0.9, 50 * GiB, "0.50", 40 * GiB, False),
    (51, 0.9, 50 * GiB - 1, "0.50", 40 * GiB, True),
]


@pytest.mark.parametrize(("free", "util", "weights", "flag", "saves", "fits"), FIT_FREE)
def test_fit_free_rows(free: float, util: float, weights: int | None, flag: str | None, saves: int | None,
                       fits: bool | None) -> None:
    f = _f(kind="vllm.startup.free-memory-below-target", phase="startup-check", free_bytes=int(free * GiB),
           total_bytes=100 * GiB, gpu_memory_utilization=util)
    r = _calc(FREE, f, _vllm(weights_bytes=weights))
    if flag is None:
        assert r is None
    else:
        assert r is not None and (r.flags, r.saves_bytes, r.fits) == ({"--gpu-memory-utilization": flag}, saves, fits)


# -- --max-num-seqs ---------------------------------------------------------------------------------

ROW = 128256 * 4  # one fp32 logits row of Llama-3.1-8B
SEQS = [
    # (figures, context, flag): half the dummy requests, at least 1
    ({"num_dummy_requests": 3}, {}, "1"),
    ({"num_dummy_requests": 2}, {}, "1"),
    ({"num_dummy_requests": 1}, {}, None),
    # the request is 7 rows of 8: one row left, a power of two at most (1)
    ({"num_dummy_requests": 8, "requested_bytes": 7 * ROW}, {"model": LLAMA8}, "1"),
    ({"num_dummy_requests": 8, "requested_bytes": 6 * ROW}, {"model": LLAMA8}, "2"),
    ({"num_dummy_requests": 8, "requested_bytes": 6 * ROW + 1}, {"model": LLAMA8}, "1"),
    # no count in the message: the version's default during warm-up only (256 below 70 GiB, 1024 above)
    ({}, {"engine_version": "0.8.5", "gpu_total_bytes": 40 * GiB}, "128"),
    ({}, {"engine_version": "0.8.5", "gpu_total_bytes": 80 * GiB}, "512"),
]


@pytest.mark.parametrize(("figs", "ctx", "flag"), SEQS)
def test_max_num_seqs_rows(figs: dict[str, Any], ctx: dict[str, Any], flag: str | None) -> None:
    r = _calc("vllm.max-num-seqs", _f(kind="torch.cuda-oom", phase="warmup", **figs), _vllm(**ctx))
    assert (r.flags if r else None) == ({"--max-num-seqs": flag} if flag else None)


def test_max_num_seqs_default_only_while_dummy_requests_run() -> None:
    ctx = _vllm(engine_version="0.8.5", gpu_total_bytes=80 * GiB)
    assert _calc("vllm.max-num-seqs", _f(kind="torch.cuda-oom", phase="training"), ctx) is None


@pytest.mark.parametrize(("rule", "cur", "flag", "fits"), [
    # capture sizes capped to the Mamba cache blocks: at most 64 sequences
    ("vllm.v1.cudagraph.capture-sizes-capped", 256, "64", True),
    ("vllm.v1.mamba.blocks", 256, "64", True),
    # already at the bound: the generic halving of the current 64
    ("vllm.v1.mamba.blocks", 64, "32", None),
    # not a Mamba rule: the generic halving
    ("vllm.v1.other", 256, "128", None),
])
def test_mamba_bound(rule: str, cur: int, flag: str, fits: bool | None) -> None:
    r = _calc("vllm.max-num-seqs", _f(kind="vllm.x", rule=rule, num_gpu_blocks=64), _vllm(max_num_seqs=cur))
    assert r is not None and (r.flags, r.fits) == ({"--max-num-seqs": flag}, fits)


# -- swap space -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arg", "flag", "saves"), [
    (None, "1", 3 * GiB),  # the default 4 GiB → 1 GiB
    ("1", "0", GiB),
    ("1.5", "1", GiB // 2),
    ("0", None, None),  # nothing left to give back
])
def test_swap_space_rows(arg: str | None, flag: str | None, saves: int | None) -> None:
    ctx = _vllm(engine_version="0.8.5", launch_args={"swap_space": arg} if arg else {})
    r = _calc("vllm.swap-space", _f(kind="host.oom-killed", phase="unknown"), ctx)
    assert (None if r is None else (r.flags, r.saves_bytes)) == (None if flag is None else ({"--swap-space": flag}, saves))


# -- GPU counts, pipeline stages, 4-bit ---------------------------------------------------------


def test_gpu_count_source() -> None:
    assert rv._gpus(_inp(_f(), _vllm(gpu_count=4))) == (4, "from the log")
    assert rv._gpus(_inp(_f(), _vllm(), gpus="4")) == (4, "--hint gpus=4")


@pytest.mark.parametrize(("gpus", "flag", "saves"), [("2", "2", None), ("1", None, None)])
def test_pipeline_parallel_from_two_gpus(gpus: str, flag: str | None, saves: int | None) -> None:
    r = _calc("vllm.pipeline-parallel-size", _f(), _vllm(), gpus=gpus)
    assert (r.flags if r else None) == ({"--pipeline-parallel-size": flag} if flag else None)
    r = _calc("vllm.pipeline-parallel-size", _f(), _vllm(weights_bytes=GiB), gpus="2")
    assert r is not None and r.saves_bytes == GiB // 2


def test_per_gpu_need_adds_nothing_unknown() -> None:
    """Weights alone when activation, non-torch and the KV cache are unknown; 127 / 128 of a byte
    per GPU at 128 stages is still below the next byte."""
    f = rv.get_facts(_inp(_f(kind="torch.cuda-oom"), _vllm(weights_bytes=GiB)))
    assert rv._per_gpu_need(f, 1, 1) == GiB
    f = rv.get_facts(_inp(_f(kind="torch.cuda-oom"), _vllm(weights_bytes=128 * GiB + 127)))
    assert rv._per_gpu_need(f, 1, 128) == GiB


@pytest.mark.parametrize(("weights", "saves"), [
    # Llama-3.1-8B at 0.53 bytes per parameter: int(8.03e9 × 0.53) = 4255899999 bytes
    (4255899999, None),  # no smaller than the weights now: no remedy
    (4255900000, 1),
])
def test_four_bit_only_when_smaller(weights: int, saves: int | None) -> None:
    r = _calc("vllm.quantization-4bit", _f(kind="torch.cuda-oom", phase="weights-load"),
              _vllm(model=LLAMA8, weights_bytes=weights))
    assert (r.saves_bytes if r else None) == saves


# -- tensor parallelism, CPU offload, fp8 weights ------------------------------------------------


def test_tensor_parallel_from_two_gpus() -> None:
    """Two GPUs are the least that can split the model; the per-GPU need is stated against the budget."""
    f = _f(kind="vllm.kv-cache.no-blocks")
    ctx = _vllm(model="Qwen/Qwen2.5-7B-Instruct", gpu_total_bytes=24 * GiB, gpu_memory_utilization=0.9,
                weights_bytes=int(14.2 * GiB), kv_cache_bytes=-GiB, max_model_len=32768)
    r = _calc("vllm.tensor-parallel-size", f, ctx, gpus="2")
    assert r is not None and (r.flags, r.fits) == ({"--tensor-parallel-size": "2"}, True)
    # 14.2 GiB − 14.2 GiB × 1 // 2
    assert r.saves_bytes == int(14.2 * GiB) - int(14.2 * GiB) // 2
    assert r.why.endswith("per GPU about 7.97 GiB is needed against a 21.60 GiB budget.")
    assert _calc("vllm.tensor-parallel-size", f, ctx, gpus="1") is None


CPU_OFFLOAD = [
    # (version, weights, request with nothing free, flag, confidence): whole GiB of the shortage
    ("0.5.3", 10 * GiB, GiB, "1", "medium"),  # the first version with --cpu-offload-gb
    ("0.5.2", 10 * GiB, GiB, None, None),
    ("0.8.5", GiB, GiB, "1", "low"),  # all the weights: allowed, more than half of them
    ("0.8.5", GiB - 1, GiB, None, None),  # more than the weights
    ("0.8.5", 4 * GiB, 2 * GiB, "2", "medium"),  # exactly half the weights
    ("0.8.5", 4 * GiB, 2 * GiB + 1, "3", "low"),
]


@pytest.mark.parametrize(("version", "weights", "req", "flag", "confidence"), CPU_OFFLOAD)
def test_cpu_offload_rows(version: str, weights: int, req: int, flag: str | None, confidence: str | None) -> None:
    r = _calc("vllm.cpu-offload-gb", _f(kind="torch.cuda-oom", phase="weights-load", requested_bytes=req, free_bytes=0),
              _vllm(engine_version=version, weights_bytes=weights))
    assert (None if r is None else (r.flags, r.confidence, r.saves_bytes)) == (
        None if flag is None else ({"--cpu-offload-gb": flag}, confidence, int(flag) * GiB))


def test_cpu_offload_needs_something_missing() -> None:
    assert _calc("vllm.cpu-offload-gb", _f(kind="vllm.kv-cache.no-blocks"), _vllm(kv_cache_bytes=0, weights_bytes=GiB)) is None


QUANT = [
    # (version, GPU, flag): fp8 weights need compute capability 8.9 before 0.6.0, 8.0 from it
    ("0.5.0", "L4", "fp8"),  # 8.9 at 0.5.0, the first version with fp8 weights
    ("0.4.3", "L4", None),
    ("0.5.0", "A100", ""),  # 8.0 < 8.9: cannot help
    ("0.6.0", "A100", "fp8"),
    ("0.6.0", "T4", ""),
]


@pytest.mark.parametrize(("version", "gpu", "flag"), QUANT)
def test_fp8_weights_by_version_and_gpu(version: str, gpu: str, flag: str | None) -> None:
    f = _f(kind="torch.cuda-oom", phase="kv-cache-alloc", requested_bytes=GiB, free_bytes=0)
    r = _calc("vllm.quantization", f, _vllm(engine_version=version, weights_bytes=4 * GiB), gpu=gpu)
    if flag is None:
        assert r is None
    elif flag == "":
        assert r is not None and (r.flags, r.fits) == ({}, False)
    else:
        assert r is not None and (r.flags, r.fits, r.saves_bytes) == ({"--quantization": flag}, True, 2 * GiB)


def test_fp8_weights_not_for_a_weights_load_failure_before_0_16() -> None:
    """Through 0.15 online fp8 creates each weight in 16 bits and quantizes it after loading: a load
    that fails at 16 bits fails the same way. From 0.16.0 the weights are created on the meta device
    and quantized layer by layer; from 0.31.0 the method is fp8_per_tensor."""
    f = _f(kind="torch.cuda-oom", phase="weights-load", requested_bytes=GiB, free_bytes=0)
    for version in ("0.6.0", "0.13.0", "0.15.1"):
        assert _calc("vllm.quantization", f, _vllm(engine_version=version, weights_bytes=4 * GiB), gpu="H100") is None
    r = _calc("vllm.quantization", f, _vllm(engine_version="0.16.0", weights_bytes=4 * GiB), gpu="H100")
    assert r is not None and r.flags == {"--quantization": "fp8"}
    r = _calc("vllm.quantization", f, _vllm(engine_version="0.31.0", weights_bytes=4 * GiB), gpu="H100")
    assert r is not None and r.flags == {"--quantization": "fp8_per_tensor"}


def test_fp8_weights_note_without_fp8_tensor_cores() -> None:
    f = _f(kind="torch.cuda-oom", phase="kv-cache-alloc", requested_bytes=GiB, free_bytes=0)
    ctx = _vllm(engine_version="0.6.0", weights_bytes=4 * GiB)
    a100 = _calc("vllm.quantization", f, ctx, gpu="A100")
    h100 = _calc("vllm.quantization", f, ctx, gpu="H100")
    assert a100 is not None and a100.why.endswith("fp8 runs weight-only (Marlin): memory is saved, speed is not gained.")
    assert h100 is not None and h100.why.endswith("1.00 GiB is missing.")


def test_four_bit_without_a_model_assumes_16_bit_weights() -> None:
    # 10 GiB ÷ 2 bytes = 5 GiB parameters × 0.53 bytes
    r = _calc("vllm.quantization-4bit", _f(kind="torch.cuda-oom", phase="weights-load"), _vllm(weights_bytes=10 * GiB))
    assert r is not None and r.saves_bytes == 10 * GiB - int(5 * GiB * 0.53)


# -- the combined plan ------------------------------------------------------------------------------

#: 128 KiB of KV cache per token (the log's size over its tokens)
PLAN_KV = {"kv_cache_bytes": 131072 * 1000, "kv_cache_tokens": 1000}
#: 0.95 × this total − 10 GiB of weights = 512.5 MiB: 4096 tokens of 128 KiB and half a block more
PLAN_TOTAL = int((10 * GiB + 512 * MiB + MiB // 2) / 0.95)


def test_plan_keeps_a_context_of_exactly_4096() -> None:
    """An AWQ checkpoint with an fp8 cache: only the utilization and the length can move; at 0.95
    the budget holds 4096 tokens, the shortest context a plan keeps."""
    ctx = _vllm(quantization="awq", kv_cache_dtype="fp8", weights_bytes=10 * GiB, gpu_total_bytes=PLAN_TOTAL,
                gpu_memory_utilization=0.9, max_model_len=8192, **PLAN_KV)
    r = rv.plan_remedy(_inp(_f(kind="torch.cuda-oom"), ctx))
    assert r is not None and r.id == "combined:vllm.gpu-memory-utilization.raise-for-kv+vllm.max-model-len"
    assert r.flags == {"--gpu-memory-utilization": "0.95", "--max-model-len": "4096"}
    # 16 tokens less fit when the total is one block smaller: below the shortest useful context
    small = ctx.model_copy(update={"gpu_total_bytes": int((10 * GiB + 511 * MiB) / 0.95)})
    assert rv.plan_remedy(_inp(_f(kind="torch.cuda-oom"), small)) is None


def test_plan_with_an_fp8_cache() -> None:
    """At the ceiling already: fp8 halves the 128 KiB per token, and 512.5 MiB then holds 8200 tokens,
    8192 in whole blocks of 16; no activation, non-torch or graph size is known: 0 B is fixed."""
    for version in (None, "0.20.0"):  # 0.20 counts the (unknown, so 0) graph estimate in the budget
        ctx = _vllm(engine_version=version, quantization="awq", weights_bytes=10 * GiB, gpu_total_bytes=PLAN_TOTAL,
                    gpu_memory_utilization=0.95, max_model_len=16384, **PLAN_KV)
        r = rv.plan_remedy(_inp(_f(kind="torch.cuda-oom"), ctx))
        assert r is not None and r.id == "combined:vllm.kv-cache-dtype-fp8+vllm.max-model-len"
        assert r.flags == {"--kv-cache-dtype": "fp8", "--max-model-len": "8192"}
        assert " − 0 B (activation, non-torch, graphs)" in r.why and r.confidence == "medium"


def test_plan_ties_keep_the_smallest_tensor_parallelism() -> None:
    """Two plans with as many changes, the same cost and the same length: the first found (the
    smaller TP) is kept. 0.95 × total is the 10 GiB of weights: TP 1 leaves nothing. TP 2 leaves
    5 GiB for 64 KiB a token (81920 tokens, under 131072); with fp8 (32 KiB) 163840 fit. TP 4
    alone fits (one change: the calculators'); TP 4 + fp8 fits too and ties with TP 2 + fp8 at
    (2 changes, cost 7 + 4, length 131072)."""
    ctx = _vllm(quantization="awq", weights_bytes=10 * GiB, gpu_total_bytes=int(10 * GiB / 0.95),
                gpu_memory_utilization=0.95, max_model_len=131072, gpu_count=4, **PLAN_KV)
    r = rv.plan_remedy(_inp(_f(kind="torch.cuda-oom"), ctx))
    assert r is not None and r.id == "combined:vllm.tensor-parallel-size+vllm.kv-cache-dtype-fp8"
    assert r.flags == {"--tensor-parallel-size": "2", "--kv-cache-dtype": "fp8"}


# -- raise: the step, the cap, the missing bytes and the graphs --------------------------------------


def test_raise_utilization_rounds_the_step_to_hundredths() -> None:
    """0.896 + 0.05 = 0.946 rounds to 0.95, oomdoctor's ceiling: worded as capped."""
    r = _calc(rv._RAISE, _f(kind="vllm.x"), _vllm(gpu_memory_utilization=0.896))
    assert r is not None and r.flags == {"--gpu-memory-utilization": "0.95"}
    assert "capped at 0.95 (oomdoctor's ceiling) = 0.95" in r.why


def test_raise_utilization_with_nothing_missing() -> None:
    """No blocks but a KV cache of exactly 0 bytes: nothing missing to state."""
    r = _calc(rv._RAISE, _f(kind="vllm.kv-cache.no-blocks"), _vllm(gpu_memory_utilization=0.8, kv_cache_bytes=0))
    assert r is not None and r.why == (
        "The log does not show how much is missing: 0.80 (the log's value) + 0.05 = 0.85; "
        "raise further in steps if it still fails.")


@pytest.mark.parametrize(("extra", "confidence"), [(0, "medium"), (1, "low")])
def test_raise_utilization_against_the_graph_estimate(extra: int, confidence: str) -> None:
    """The step gives back (0.85 − 0.80) × total (exact in binary on a 2**60-byte total): a graph
    estimate of that size is not outweighed, one byte more is (and lowers the confidence)."""
    total = 2**60
    gain = (0.85 - 0.8) * total
    assert gain == int(gain)
    ctx = _vllm(gpu_memory_utilization=0.8, gpu_total_bytes=total, cudagraph_bytes=int(gain) + extra)
    r = _calc(rv._RAISE, _f(kind="vllm.x", message=TOLD), ctx)
    assert r is not None and r.confidence == confidence


@pytest.mark.parametrize(("version", "offered"), [("0.18.0", True), ("0.17.1", False), (None, True)])
def test_cudagraph_estimate_off_from_0_18(version: str | None, offered: bool) -> None:
    r = _calc("vllm.cudagraph-estimate-off", _f(kind="torch.cuda-oom", phase="profiling"),
              _vllm(engine_version=version, cudagraph_bytes=GiB))
    assert (r.env if r else None) == ({"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"} if offered else None)


@pytest.mark.parametrize(("tokens", "flags"), [
    # fp8 doubles 4096 tokens to exactly the 8192 asked: fits alone
    (4096, {"--kv-cache-dtype": "fp8"}),
    (4095, {"--kv-cache-dtype": "fp8", "--max-model-len": "8176"}),
])
def test_fp8_kv_by_tokens(tokens: int, flags: dict[str, str]) -> None:
    r = _calc("vllm.kv-cache-dtype-fp8", _f(kv_cache_tokens=tokens, max_seq_len=8192))
    assert r is not None and (r.flags, r.fits) == (flags, True)


@pytest.mark.parametrize(("req", "fits"), [(GiB, True), (GiB + 1, None)])
def test_enforce_eager_fits_when_the_graphs_cover_the_request(req: int, fits: bool | None) -> None:
    f = _f(kind="torch.cuda-oom", phase="cudagraph-capture", requested_bytes=req, free_bytes=0)
    r = _calc("vllm.enforce-eager", f, _vllm(engine_version="0.11.2", cudagraph_bytes=GiB))
    assert r is not None and (r.saves_bytes, r.fits) == (GiB, fits)


@pytest.mark.parametrize(("req", "fits"), [(16 * MiB, True), (16 * MiB + 1, None)])
def test_capture_size_fits_when_the_saving_covers_the_request(req: int, fits: bool | None) -> None:
    """51 capture sizes up to 512, 35 up to 256: 16/51 of a 51 MiB estimate is 16 MiB."""
    f = _f(kind="torch.cuda-oom", phase="cudagraph-capture", requested_bytes=req, free_bytes=0)
    r = _calc("vllm.cudagraph-capture-size", f, _vllm(engine_version="0.11.2", cudagraph_bytes=51 * MiB))
    assert r is not None and (r.flags, r.saves_bytes, r.fits) == ({"--max-cudagraph-capture-size": "256"}, 16 * MiB, fits)


def test_max_num_seqs_says_when_the_count_is_the_default() -> None:
    r = _calc("vllm.max-num-seqs", _f(kind="torch.cuda-oom", phase="warmup"),
              _vllm(engine_version="0.8.5", gpu_total_bytes=40 * GiB))
    assert r is not None and r.confidence == "low" and "(256: this version's default on this GPU" in r.why
    r = _calc("vllm.max-num-seqs", _f(kind="torch.cuda-oom", phase="warmup", num_dummy_requests=256))
    assert r is not None and r.confidence == "medium" and r.why.startswith("The warm-up ran 256 dummy requests")


@pytest.mark.parametrize(("item", "flag"), [(8192, None), (8193, "8193")])
def test_raise_batched_tokens_only_above_the_current(item: int, flag: str | None) -> None:
    r = _calc("vllm.max-num-batched-tokens.raise", _f(kind="vllm.x", item_tokens=item, max_num_batched_tokens=8192))
    assert (r.flags if r else None) == ({"--max-num-batched-tokens": flag} if flag else None)


@pytest.mark.parametrize(("kind", "flag"), [("vllm.kv-cache.x", None), ("torch.cuda-oom", "0.88")])
def test_lower_utilization_while_the_kv_cache_is_allocated(kind: str, flag: str | None) -> None:
    """vLLM's own KV message at that phase is the budget's shortfall, not an allocation beside it;
    a PyTorch OOM there is: 0.90 − 1 GiB / 80 GiB = 0.8875 → 0.88."""
    f = _f(kind=kind, phase="kv-cache-alloc", requested_bytes=GiB)
    r = _calc(rv._LOWER, f, _vllm(gpu_memory_utilization=0.9, gpu_total_bytes=80 * GiB))
    assert (r.flags if r else None) == ({"--gpu-memory-utilization": flag} if flag else None)


@pytest.mark.parametrize(("req", "flag"), [(12 * GiB, "0.75"), (12 * GiB + 1, None)])
def test_raise_utilization_up_to_what_the_largest_card_gives_back(req: int, flag: str | None) -> None:
    """Without the GPU's total, a shortfall is worth a raise only up to what the step gives back
    on the largest card known (256 GiB): 0.703125 (45/64) → 0.75 gives back 3/64 of it, 12 GiB
    exactly."""
    r = _calc(rv._RAISE, _f(kind="torch.cuda-oom", phase="inference", requested_bytes=req),
              _vllm(gpu_memory_utilization=0.703125))
    assert (r.flags if r else None) == ({"--gpu-memory-utilization": flag} if flag else None)


def test_raise_utilization_by_a_sliver_does_not_cover_a_byte() -> None:
    """0.949999999999 → 0.95 gives back about 0.27 bytes of the largest card: one byte missing is
    more than that, so no raise; with nothing missing the raise stands."""
    ctx = _vllm(gpu_memory_utilization=0.949999999999)
    assert _calc(rv._RAISE, _f(kind="torch.cuda-oom", phase="inference", requested_bytes=1), ctx) is None
    r = _calc(rv._RAISE, _f(kind="torch.cuda-oom", phase="inference"), ctx)
    assert r is not None and r.flags == {"--gpu-memory-utilization": "0.95"}


#: 128 KiB per token and no model: the KV cache splits evenly over tensor-parallel ranks
NO_GEO = {"gpu_total_bytes": 24 * GiB, "gpu_memory_utilization": 0.9, "max_model_len": 8192, **PLAN_KV}


@pytest.mark.parametrize(("rid", "weights", "flag", "fits", "tail"), [
    # no budget known: the smallest split
    ("vllm.tensor-parallel-size", 10 * GiB, "2", None, ""),
    ("vllm.pipeline-parallel-size", 10 * GiB, "2", None, ""),
    # 30 GiB / 2 + 8192 × 128 KiB / 2 = 15.50 GiB against 0.9 × 24 GiB = 21.60 GiB
    ("vllm.tensor-parallel-size", 30 * GiB, "2", True, "per GPU about 15.50 GiB is needed against a 21.60 GiB budget."),
    ("vllm.pipeline-parallel-size", 30 * GiB, "2", True, "each stage holds about 1/2 of the layers (weights and KV)."),
    # 100 GiB fits no split of 4 GPUs: the widest, marked as not fitting
    ("vllm.tensor-parallel-size", 100 * GiB, "4", False, "per GPU about 25.25 GiB is needed against a 21.60 GiB budget."),
    ("vllm.pipeline-parallel-size", 100 * GiB, "4", False, "each stage holds about 1/4 of the layers (weights and KV)."),
])
def test_parallel_splits(rid: str, weights: int, flag: str, fits: bool | None, tail: str) -> None:
    ctx = _vllm(weights_bytes=weights) if fits is None else _vllm(weights_bytes=weights, **NO_GEO)
    r = _calc(rid, _f(kind="torch.cuda-oom", phase="weights-load"), ctx, gpus="4")
    flag_name = "--tensor-parallel-size" if rid.startswith("vllm.tensor") else "--pipeline-parallel-size"
    assert r is not None and (r.flags, r.fits) == ({flag_name: flag}, fits) and r.why.endswith(tail)


@pytest.mark.parametrize(("weights_gib", "tp"), [(60, "4"), (150, "8"), (300, "16"), (600, "32"), (1200, "64")])
def test_tensor_parallel_takes_the_first_power_of_two_that_fits(weights_gib: int, tp: str) -> None:
    """64 GPUs, no model (no heads to divide): weights / tp + 8192 × 128 KiB / tp within 21.60 GiB,
    first at 4 for 60 GiB (15.25 GiB), 8 for 150, 16 for 300, 32 for 600, 64 for 1200 (18.88 GiB)."""
    r = _calc("vllm.tensor-parallel-size", _f(kind="torch.cuda-oom", phase="weights-load"),
              _vllm(weights_bytes=weights_gib * GiB, **NO_GEO), gpus="64")
    assert r is not None and (r.flags, r.fits) == ({"--tensor-parallel-size": tp}, True)


@pytest.mark.parametrize(("gpus", "length"), [("2", "45872"), ("4", "91744"), ("8", "183488"), ("16", "366992")])
def test_plan_splits_over_every_gpu_it_has(gpus: str, length: str) -> None:
    """20 GiB of weights per GPU at the widest split: 0.95 × 24 GiB − 20 GiB = 2.8 GiB per GPU holds
    g × 2.8 GiB / 128 KiB tokens of a 1M context (g × 22937.6, in blocks of 16); half the GPUs hold
    no KV cache at all. Only tensor parallelism and the length can move (AWQ, fp8 cache, at 0.95)."""
    g = int(gpus)
    ctx = _vllm(quantization="awq", kv_cache_dtype="fp8", weights_bytes=20 * GiB * g, gpu_total_bytes=24 * GiB,
                gpu_memory_utilization=0.95, max_model_len=2**20, **PLAN_KV)
    r = rv.plan_remedy(_inp(_f(kind="torch.cuda-oom"), ctx, gpus=gpus))
    assert r is not None and r.flags == {"--tensor-parallel-size": gpus, "--max-model-len": length}


def test_one_byte_rows() -> None:
    """A single byte available or missing is a figure like any other, not an absent one."""
    r = _calc("vllm.kv-cache-dtype-fp8", _f(kv_cache_needed_bytes=4 * GiB, kv_cache_available_bytes=1, max_seq_len=8192))
    assert r is not None and (r.flags, r.saves_bytes, r.fits) == ({"--kv-cache-dtype": "fp8"}, 2 * GiB, False)
    one = _f(kind="torch.cuda-oom", phase="weights-load", requested_bytes=1, free_bytes=0)
    r = _calc("vllm.cpu-offload-gb", one, _vllm(weights_bytes=10 * GiB))
    assert r is not None and r.flags == {"--cpu-offload-gb": "1"}
    r = _calc(rv._RAISE, _f(kind="torch.cuda-oom", phase="inference", requested_bytes=1), _vllm(gpu_memory_utilization=0.8))
    assert r is not None and r.why.startswith("1 B is missing but the log does not show the GPU's total")


@pytest.mark.parametrize(("phase", "version", "confidence"), [
    ("profiling", "0.18.0", "medium"),  # graphs are captured inside profiling from 0.18
    ("profiling", "0.17.1", None),
    ("warmup", "0.11.2", "medium"),
    ("cudagraph-capture", "0.11.2", "high"),
])
def test_enforce_eager_by_phase(phase: str, version: str, confidence: str | None) -> None:
    r = _calc("vllm.enforce-eager", _f(kind="torch.cuda-oom", phase=phase, requested_bytes=GiB), _vllm(engine_version=version))
    assert (r.confidence if r else None) == confidence


@pytest.mark.parametrize(("util", "confidence"), [(0.9, "medium"), (None, "low")])
def test_lower_utilization_confidence_by_source(util: float | None, confidence: str) -> None:
    """The log's utilization: medium; the version's default (0.90 for 0.8.5): low. Same value."""
    f = _f(kind="torch.cuda-oom", phase="kv-cache-alloc", requested_bytes=GiB)
    r = _calc(rv._LOWER, f, _vllm(engine_version="0.8.5", gpu_memory_utilization=util, gpu_total_bytes=80 * GiB))
    assert r is not None and (r.flags, r.confidence) == ({"--gpu-memory-utilization": "0.88"}, confidence)


#: 0.9 × 24 GiB (vLLM's budget per GPU)
BUDGET_24 = 23192823398


@pytest.mark.parametrize(("rid", "extra", "flag"), [
    # weights / 2 + 8192 × 128 KiB / 2 == the budget exactly: two fit
    ("vllm.tensor-parallel-size", 0, {"--tensor-parallel-size": "2"}),
    ("vllm.tensor-parallel-size", 2, {"--tensor-parallel-size": "4"}),
    ("vllm.pipeline-parallel-size", 0, {"--pipeline-parallel-size": "2"}),
    ("vllm.pipeline-parallel-size", 2, {"--pipeline-parallel-size": "3"}),
])
def test_split_fits_at_exactly_the_budget(rid: str, extra: int, flag: dict[str, str]) -> None:
    weights = 2 * (BUDGET_24 - 512 * MiB) + extra
    r = _calc(rid, _f(kind="torch.cuda-oom", phase="weights-load"), _vllm(weights_bytes=weights, **NO_GEO), gpus="4")
    assert r is not None and (r.flags, r.fits) == (flag, True)


@pytest.mark.parametrize(("util", "why"), [
    (0.9, "1.00 GiB could not be allocated outside the 0.90 × 80.00 GiB budget; 0.90 − 1.00 GiB / 80.00 GiB = 0.88."),
    (0.99, "1.00 GiB could not be allocated outside the 0.99 × 80.00 GiB budget; 0.99 − 1.00 GiB / 80.00 GiB = 0.97, "
           "capped at 0.95."),
])
def test_lower_utilization_says_when_capped(util: float, why: str) -> None:
    r = _calc(rv._LOWER, _f(kind="torch.cuda-oom", phase="inference", requested_bytes=GiB),
              _vllm(gpu_memory_utilization=util, gpu_total_bytes=80 * GiB))
    assert r is not None and r.why == why


def test_wordings_by_branch() -> None:
    # CPU offload without the weights' size: whether it fits is unknown
    r = _calc("vllm.cpu-offload-gb", _f(kind="torch.cuda-oom", phase="weights-load", requested_bytes=GiB, free_bytes=0))
    assert r is not None and (r.flags, r.fits, r.confidence) == ({"--cpu-offload-gb": "1"}, None, "low")
    r = _calc("vllm.kv-cache-dtype-fp8", _f(kv_cache_tokens=4096, max_seq_len=8192))
    assert r is not None and r.why == "fp8 raises the KV capacity from 4096 to about 8192 tokens; 8192 are needed."
    whys = {}
    for phase in ("warmup", "cudagraph-capture"):
        r = _calc("vllm.enforce-eager", _f(kind="torch.cuda-oom", phase=phase, requested_bytes=GiB), _vllm(engine_version="0.11.2"))
        assert r is not None
        whys[phase] = r.why
    assert whys == {
        "warmup": "CUDA-graph memory sits on top of the KV budget.",
        "cudagraph-capture": "CUDA-graph memory sits on top of the KV budget and this failure happened while capturing them.",
    }


@pytest.mark.parametrize(("gpu", "flags", "model"), [
    # fp8 weights need compute capability 8.9 at 0.5.x: the L4 has it, so fp8 (cheaper than a 4-bit
    # checkpoint) with the length 10 GiB of weights leave
    ("L4", {"--quantization": "fp8", "--max-model-len": "104848"}, None),
    ("A100", {"--max-model-len": "143344"}, "an AWQ or GPTQ 4-bit checkpoint of this model"),
])
def test_plan_weight_format_by_gpu(gpu: str, flags: dict[str, str], model: str | None) -> None:
    ctx = _vllm(engine_version="0.5.0", kv_cache_dtype="fp8", weights_bytes=20 * GiB, gpu_total_bytes=24 * GiB,
                gpu_memory_utilization=0.95, max_model_len=2**20, **PLAN_KV)
    r = rv.plan_remedy(_inp(_f(kind="torch.cuda-oom"), ctx, gpu=gpu))
    assert r is not None and r.flags == flags and r.settings == ({"model": model} if model else {})


def test_plan_splits_only_over_counts_that_divide_the_heads() -> None:
    """Qwen2.5-7B has 28 attention heads: 8 GPUs, but 4 is the widest split (8 would hold about
    1.9M of the 2M tokens); the catalog's geometry sizes the plan (medium confidence)."""
    ctx = _vllm(model="Qwen/Qwen2.5-7B-Instruct", quantization="awq", kv_cache_dtype="fp8", weights_bytes=80 * GiB,
                gpu_total_bytes=24 * GiB, gpu_memory_utilization=0.95, max_model_len=2**21)
    r = rv.plan_remedy(_inp(_f(kind="torch.cuda-oom"), ctx, gpus="8"))
    assert r is not None and r.confidence == "medium"
    assert r.flags == {"--tensor-parallel-size": "4", "--max-model-len": "419424"}


@pytest.mark.parametrize(("figs", "why", "fits"), [
    # nothing missing (needed == available): the sizes alone, fit unknown
    ({"kv_cache_needed_bytes": GiB, "kv_cache_available_bytes": GiB},
     "fp8 weights take half the memory of bf16/fp16 (assuming this checkpoint is 16-bit) (4.00 GiB → 2.00 GiB).", None),
    ({"kind": "torch.cuda-oom", "requested_bytes": 1, "free_bytes": 0},
     "fp8 weights take half the memory of bf16/fp16 (assuming this checkpoint is 16-bit) (4.00 GiB → 2.00 GiB); "
     "1 B is missing.", True),
])
def test_fp8_weights_wording(figs: dict[str, Any], why: str, fits: bool | None) -> None:
    figs = dict(figs)
    kind = figs.pop("kind", "vllm.kv-cache.max-len-exceeds")
    r = _calc("vllm.quantization", _f(kind=kind, phase="kv-cache-alloc", **figs),
              _vllm(engine_version="0.6.0", weights_bytes=4 * GiB), gpu="H100")
    assert r is not None and (r.why, r.fits) == (why, fits)


def test_pipeline_over_two_gpus_that_cannot_hold_it() -> None:
    """One candidate (2 stages) and it does not fit: offered, marked as not fitting."""
    r = _calc("vllm.pipeline-parallel-size", _f(kind="torch.cuda-oom", phase="weights-load"),
              _vllm(weights_bytes=100 * GiB, **NO_GEO), gpus="2")
    assert r is not None and (r.flags, r.fits) == ({"--pipeline-parallel-size": "2"}, False)


@pytest.mark.parametrize(("length", "flags"), [
    # 0.95 holds 513 blocks of 16 (8208 tokens): 8200 tokens need ⌈8200 / 16⌉ = 513 blocks, so the
    # raise alone fits (a single lever: the calculators' business, no plan)
    (8200, None),
    # 8209 tokens need 514 blocks: the raise and the length together
    (8209, {"--gpu-memory-utilization": "0.95", "--max-model-len": "8208"}),
])
def test_plan_length_fits_in_whole_blocks(length: int, flags: dict[str, str] | None) -> None:
    ctx = _vllm(quantization="awq", kv_cache_dtype="fp8", weights_bytes=10 * GiB, gpu_total_bytes=12436111360,
                gpu_memory_utilization=0.9, max_model_len=length, **PLAN_KV)
    r = rv.plan_remedy(_inp(_f(kind="torch.cuda-oom"), ctx))
    assert (r.flags if r else None) == flags


# -- the DeepGEMM warm-up's switch, by release --------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "env", "unknown"),
    [
        # vLLM 0.10.2-0.11.0 read VLLM_SKIP_DEEP_GEMM_WARMUP=1; 0.11.1 renamed it VLLM_DEEP_GEMM_WARMUP=skip
        ("0.10.2", {"VLLM_SKIP_DEEP_GEMM_WARMUP": "1"}, False),
        ("0.11.0", {"VLLM_SKIP_DEEP_GEMM_WARMUP": "1"}, False),
        ("0.11.1", {"VLLM_DEEP_GEMM_WARMUP": "skip"}, False),
        ("0.12.0", {"VLLM_DEEP_GEMM_WARMUP": "skip"}, False),
        # no version in the log: the current name, the old one said in the why
        (None, {"VLLM_DEEP_GEMM_WARMUP": "skip"}, True),
    ],
)
def test_deep_gemm_warmup_switch_by_release(version: str | None, env: dict[str, str], unknown: bool) -> None:
    ctx = _vllm(engine_version=version, extra={"deep_gemm_frame": "_warmup"})
    r = _calc("vllm.deep-gemm-warmup", _f(kind="torch.cuda-oom", phase="warmup", cause="engine-headroom"), ctx)
    assert r is not None and r.env == env
    assert ("VLLM_SKIP_DEEP_GEMM_WARMUP=1)" in r.why) is unknown
    assert r.why.startswith("The failure is in the DeepGEMM kernel warm-up (_warmup)")


def test_deep_gemm_warmup_needs_its_frame_and_drops_eager_mode() -> None:
    f = _f(kind="torch.cuda-oom", phase="warmup", cause="engine-headroom")
    assert _calc("vllm.deep-gemm-warmup", f, _vllm(engine_version="0.11.1")) is None
    assert _calc("vllm.enforce-eager", f, _vllm(engine_version="0.11.1")) is not None
    assert _calc("vllm.enforce-eager", f, _vllm(engine_version="0.11.1", extra={"deep_gemm_frame": "_warmup"})) is None
