"""TensorRT-LLM remedies. Names: trtllm-serve / examples run.py ``--kv_cache_free_gpu_memory_fraction``,
LLM API ``KvCacheConfig(free_gpu_memory_fraction=...)``, Triton tensorrtllm_backend
``kv_cache_free_gpu_mem_fraction``; ``max_batch_size``, ``max_num_tokens``, ``max_seq_len`` are fixed
when a TensorRT engine is built (trtllm-build) and can only be lowered at run time.
Every calculator answers only for TensorRT-LLM logs.

Which runtime printed the log decides the names (:func:`backend`): the PyTorch backend
(``tensorrt_llm/_torch``, trtllm-serve's and ``LLM(...)``'s default from 1.0) builds no engine, so its
limits are ``LLM(...)`` / trtllm-serve arguments; Triton's tensorrtllm_backend takes config.pbtxt
parameters, never trtllm-serve flags. No TensorRT-LLM source is readable here (the PyPI release is a
stub that fetches NVIDIA's wheel): the names follow the trtllm-serve and LLM API docs and the
tensorrtllm_backend's config.pbtxt as cited in rules/advice/knobs.toml.
"""

from __future__ import annotations

from oomdoctor.advisor._engine_util import as_float, as_int, engine_of, setting
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.values import floor_to, fmt_fraction
from oomdoctor.report import Remedy

#: TensorRT-LLM's default share of free memory given to the paged KV cache
TRTLLM_DEFAULT_KV_FRACTION = 0.9
#: step taken off the fraction when the log does not say how much is missing
TRTLLM_FRACTION_STEP = 0.1
#: trtllm-build's default --max_num_tokens
TRTLLM_DEFAULT_MAX_NUM_TOKENS = 8192
#: the Triton backend's config.pbtxt parameter for the KV share (tensorrtllm_backend
#: all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt)
TRITON_KV_FRACTION = "kv_cache_free_gpu_mem_fraction (Triton config.pbtxt)"
#: trtllm-serve's and LLM(...)'s default max_batch_size (trtllm-serve docs, 1.0: "[default: 2048]";
#: recalled from the docs, not read from the wheel)
TRTLLM_PYTORCH_DEFAULT_MAX_BATCH_SIZE = 2048

def _mine(inp: AdviceInput) -> bool:
    return engine_of(inp) == "tensorrt-llm"


def backend(inp: AdviceInput) -> str | None:
    """"triton" (Triton's tensorrtllm_backend), "pytorch" (the PyTorch backend, no engine) or None (a
    TensorRT engine run some other way, or not known). The executor's "insufficient GPU memory"
    report is the PyTorch backend's own (_torch/pyexecutor/py_executor_creator.py)."""
    extra = inp.context.extra
    if extra.get("trtllm_triton"):
        return "triton"
    if inp.finding.rule == "trtllm.executor-insufficient-memory" or extra.get("trtllm_pytorch_backend"):
        return "pytorch"
    return None


@remedy("trtllm.kv-cache-free-gpu-mem-fraction")
def kv_fraction(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    cur = as_float(setting(inp, "trtllm_kv_cache_free_gpu_mem_fraction", "kv_cache_free_gpu_memory_fraction")) or TRTLLM_DEFAULT_KV_FRACTION
    req = inp.fig("requested_bytes")
    avail = as_int(setting(inp, "trtllm_available_bytes"))
    if req and avail:
        value = floor_to(cur - req / avail - 0.01, 2)
        why = remedy_text("trtllm.kv-cache-free-gpu-mem-fraction", "why_measured", current=cur, available=avail, request=req, value=fmt_fraction(value))
        conf = "high"
    else:
        value = round(cur - TRTLLM_FRACTION_STEP, 2)
        why = remedy_text("trtllm.kv-cache-free-gpu-mem-fraction", "why_step", current=cur, step=TRTLLM_FRACTION_STEP)
        conf = "medium"
    if value <= 0.1:
        return None
    v = fmt_fraction(value)
    flags: dict[str, str] = {"--kv_cache_free_gpu_memory_fraction": v}
    settings = {"KvCacheConfig.free_gpu_memory_fraction": v, TRITON_KV_FRACTION: v}
    where = backend(inp)
    if where == "triton":
        # a Triton deployment: the parameter in the model's config.pbtxt, no trtllm-serve flag
        flags, settings = {}, {TRITON_KV_FRACTION: v}
    elif where == "pytorch":
        settings = {"KvCacheConfig.free_gpu_memory_fraction": v}
        why = f"{why} {remedy_text('trtllm.kv-cache-free-gpu-mem-fraction', 'why_pytorch')}"
    return Remedy(
        id="trtllm.kv-cache-free-gpu-mem-fraction",
        title=remedy_text("trtllm.kv-cache-free-gpu-mem-fraction", "title", fraction=v),
        flags=flags,
        settings=settings,
        fits=None,
        confidence=conf,  # type: ignore[arg-type]
        why=why,
        tradeoff=remedy_text("trtllm.kv-cache-free-gpu-mem-fraction", "cost"),
    )


def _halve(inp: AdviceInput, rid: str, name: str, default: int | None) -> Remedy | None:
    """Half of the setting ``name`` (or of its ``default``), worded by ``rid``'s ``*_halve`` texts.

    The PyTorch backend takes it as a run-time argument (``why_*_pytorch``: no engine to rebuild);
    a Triton deployment's engine was built with it, so the value goes to trtllm-build (``*_triton``)."""
    if not _mine(inp):
        return None
    cur = as_int(setting(inp, name)) or default
    if not cur or cur < 2:
        return None
    value = cur // 2
    where = backend(inp)
    key = "why_halve" if setting(inp, name) else "why_halve_default"
    flags = {f"--{name}": str(value)}
    settings = {name: str(value)}
    if where == "pytorch":
        key += "_pytorch"
    elif where == "triton":
        key += "_triton"
        flags, settings = {}, {f"{name} (trtllm-build)": str(value)}
    return Remedy(
        id=rid,
        title=remedy_text(rid, "title_rebuild" if where == "triton" else "title_halve", name=name, value=value),
        flags=flags,
        settings=settings,
        fits=None,
        confidence="medium" if setting(inp, name) else "low",
        why=remedy_text(rid, key, current=cur, value=value),
        tradeoff=remedy_text(rid, "cost_rebuild" if where == "triton" else "cost_halve"),
    )


@remedy("trtllm.max-batch-size")
def max_batch_size(inp: AdviceInput) -> Remedy | None:
    # the PyTorch backend has no engine: its run-time default is the value to halve
    default = TRTLLM_PYTORCH_DEFAULT_MAX_BATCH_SIZE if backend(inp) == "pytorch" else None
    rem = _halve(inp, "trtllm.max-batch-size", "max_batch_size", default)
    if rem is not None or not _mine(inp):
        return rem
    # the engine's build value is not in the log: rebuilding smaller is the remedy, without a number
    return Remedy(
        id="trtllm.max-batch-size",
        title=remedy_text("trtllm.max-batch-size", "title"),
        settings={"max_batch_size (trtllm-build)": remedy_text("trtllm.max-batch-size", "setting")},
        fits=None,
        confidence="low",
        why=remedy_text("trtllm.max-batch-size", "why"),
    )


@remedy("trtllm.max-num-tokens")
def max_num_tokens(inp: AdviceInput) -> Remedy | None:
    return _halve(inp, "trtllm.max-num-tokens", "max_num_tokens", TRTLLM_DEFAULT_MAX_NUM_TOKENS)


@remedy("trtllm.max-seq-len")
def max_seq_len(inp: AdviceInput) -> Remedy | None:
    return _halve(inp, "trtllm.max-seq-len", "max_seq_len", None)
