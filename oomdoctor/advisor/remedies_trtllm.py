"""TensorRT-LLM remedies. Names: trtllm-serve / examples run.py ``--kv_cache_free_gpu_memory_fraction``,
LLM API ``KvCacheConfig(free_gpu_memory_fraction=...)``, Triton tensorrtllm_backend
``kv_cache_free_gpu_mem_fraction``; ``max_batch_size``, ``max_num_tokens``, ``max_seq_len`` are fixed
when a TensorRT engine is built (trtllm-build) and can only be lowered at run time.
Every calculator answers only for TensorRT-LLM logs.
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

def _mine(inp: AdviceInput) -> bool:
    return engine_of(inp) == "tensorrt-llm"


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
    return Remedy(
        id="trtllm.kv-cache-free-gpu-mem-fraction",
        title=remedy_text("trtllm.kv-cache-free-gpu-mem-fraction", "title", fraction=v),
        flags={"--kv_cache_free_gpu_memory_fraction": v},
        settings={"KvCacheConfig.free_gpu_memory_fraction": v, "kv_cache_free_gpu_mem_fraction (Triton config.pbtxt)": v},
        fits=None,
        confidence=conf,  # type: ignore[arg-type]
        why=why,
        tradeoff=remedy_text("trtllm.kv-cache-free-gpu-mem-fraction", "cost"),
    )


def _halve(inp: AdviceInput, rid: str, name: str, default: int | None) -> Remedy | None:
    """Half of the setting ``name`` (or of its ``default``), worded by ``rid``'s ``*_halve`` texts."""
    if not _mine(inp):
        return None
    cur = as_int(setting(inp, name)) or default
    if not cur or cur < 2:
        return None
    value = cur // 2
    return Remedy(
        id=rid,
        title=remedy_text(rid, "title_halve", name=name, value=value),
        flags={f"--{name}": str(value)},
        settings={name: str(value)},
        fits=None,
        confidence="medium" if setting(inp, name) else "low",
        why=remedy_text(rid, "why_halve" if setting(inp, name) else "why_halve_default", current=cur, value=value),
        tradeoff=remedy_text(rid, "cost_halve"),
    )


@remedy("trtllm.max-batch-size")
def max_batch_size(inp: AdviceInput) -> Remedy | None:
    rem = _halve(inp, "trtllm.max-batch-size", "max_batch_size", None)
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
