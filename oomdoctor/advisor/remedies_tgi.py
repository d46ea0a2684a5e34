"""TGI remedies (flags of text-generation-launcher, launcher/src/main.rs).

Values come from the failing message (the N of "N prefill tokens") or the launcher's ``Args {...}``
line. Every calculator answers only for TGI logs.
"""

from __future__ import annotations

from oomdoctor.advisor._engine_util import as_float, as_int, engine_of, setting
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.values import floor_to, fmt_fraction, round_down
from oomdoctor.report import Remedy
from oomdoctor.units import format_size

#: prefill budgets are rounded down to this many tokens
TGI_TOKEN_STEP = 256
#: share of the KV tokens given back to activations when lowering --max-batch-total-tokens
TGI_TOTAL_TOKENS_SHRINK = 0.9
#: margin (fraction of the GPU) kept when lowering --cuda-memory-fraction
TGI_FRACTION_MARGIN = 0.01


def _mine(inp: AdviceInput) -> bool:
    return engine_of(inp) == "tgi"


def _input_flag(inp: AdviceInput) -> str:
    """The input-limit flag as this run spells it: TGI 1.x has only --max-input-length (its ``Args``
    dump, read into the context extras, or a logged launcher line says so); 2.x+ takes
    --max-input-tokens and refuses both at once."""
    ctx = inp.context
    legacy = "tgi_max_input_length" in ctx.extra or "max_input_length" in ctx.launch_args
    return "--max-input-length" if legacy else "--max-input-tokens"


@remedy("tgi.max-batch-prefill-tokens")
def max_batch_prefill_tokens(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    n = as_int(inp.fig("prefill_tokens")) or as_int(
        setting(inp, "tgi_max_batch_prefill_tokens", "max_batch_prefill_tokens")
    )
    if not n or n < 2:
        return None
    half = n // 2
    value = round_down(half, TGI_TOKEN_STEP) if half >= TGI_TOKEN_STEP else half
    flags = {"--max-batch-prefill-tokens": str(value)}
    max_input = as_int(setting(inp, "tgi_max_input_tokens", "tgi_max_input_length", "max_input_tokens", "max_input_length"))
    extra = ""
    if max_input and max_input > value:
        flags[_input_flag(inp)] = str(value)
        extra = f" TGI needs --max-batch-prefill-tokens ≥ the max input ({max_input}), so the input limit drops to {value} too."
    return Remedy(
        id="tgi.max-batch-prefill-tokens",
        title=f"Prefill at most {value} tokens per batch",
        flags=flags,
        fits=None,
        confidence="high" if inp.fig("prefill_tokens") else "medium",
        why=f"A prefill of {n} tokens did not fit; half of it, rounded down to {TGI_TOKEN_STEP}, is {value}." + extra,
        tradeoff="Fewer prompt tokens per prefill batch: lower throughput under load" + (", shorter prompts." if extra else "."),
    )


def _lift_cap(inp: AdviceInput, allowed: int) -> Remedy:
    """PyTorch's "N allowed" in a TGI log: --cuda-memory-fraction below 1 capped the process.

    Value: (allowed + free) / total rounded down when both are known, else 1.0 (no cap).
    """
    total = inp.fig("total_bytes") or inp.context.gpu_total_bytes
    free = inp.fig("free_bytes")
    value = min(1.0, floor_to((allowed + free) / total, 2)) if (total and free is not None) else 1.0
    return Remedy(
        id="tgi.cuda-memory-fraction",
        title=f"Lift TGI's per-process memory cap ({fmt_fraction(value)})",
        flags={"--cuda-memory-fraction": fmt_fraction(value)},
        fits=True if (total and free is not None and value * total > allowed) else None,
        confidence="medium",
        why=(
            f"The process may use only {format_size(allowed)} ('allowed': the cap --cuda-memory-fraction sets)"
            + (f" while {format_size(free)} of the GPU is free: ({format_size(allowed)} + {format_size(free)}) / "
               f"{format_size(total)} = {fmt_fraction(value)}." if (total and free is not None)
               else "; the log does not show how much of the GPU is free, so 1.0 lifts the cap.")
        ),
        tradeoff="Other processes sharing this GPU get less of it.",
        sources={"allowed": "message"},
    )


@remedy("tgi.cuda-memory-fraction")
def cuda_memory_fraction(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    allowed = inp.fig("allowed_bytes")
    if allowed:
        return _lift_cap(inp, int(allowed))
    req, total = inp.fig("requested_bytes"), inp.fig("total_bytes") or inp.context.gpu_total_bytes
    if not (req and total):
        return None
    cur = as_float(setting(inp, "tgi_cuda_memory_fraction", "cuda_memory_fraction")) or 1.0
    value = floor_to(cur - req / total - TGI_FRACTION_MARGIN, 2)
    if value <= 0.1 or value >= cur:
        return None
    return Remedy(
        id="tgi.cuda-memory-fraction",
        title=f"Let TGI size its KV cache from {fmt_fraction(value)} of the GPU",
        flags={"--cuda-memory-fraction": fmt_fraction(value)},
        saves_bytes=int((cur - value) * total),
        fits=True,
        confidence="medium",
        why=(
            f"The KV cache is sized at warm-up from {cur} of the GPU and leaves too little for a real batch: "
            f"{cur} − {format_size(req)}/{format_size(total)} − {TGI_FRACTION_MARGIN} = {fmt_fraction(value)}."
        ),
        tradeoff="A smaller KV cache: fewer tokens in flight (max batch total tokens drops).",
    )


@remedy("tgi.max-batch-total-tokens")
def max_batch_total_tokens(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    cur = as_int(setting(inp, "tgi_max_batch_total_tokens", "max_batch_total_tokens")) or inp.context.kv_cache_tokens
    if not cur:
        return None
    value = round_down(cur * TGI_TOTAL_TOKENS_SHRINK, 16)
    return Remedy(
        id="tgi.max-batch-total-tokens",
        title=f"Cap the tokens in flight at {value}",
        flags={"--max-batch-total-tokens": str(value)},
        fits=None,
        confidence="low",
        why=f"The batch could hold {cur} tokens; {TGI_TOTAL_TOKENS_SHRINK:.0%} of that frees KV memory for activations.",
    )


@remedy("tgi.max-total-tokens")
def max_total_tokens(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    want = as_int(inp.fig("max_total_tokens"))
    cap = inp.context.kv_cache_tokens
    if not (want and cap) or cap >= want:
        return None
    flags = {"--max-total-tokens": str(cap)}
    max_input = as_int(setting(inp, "tgi_max_input_tokens", "tgi_max_input_length", "max_input_tokens", "max_input_length"))
    if max_input and max_input >= cap:
        flags[_input_flag(inp)] = str(cap - 1)
    return Remedy(
        id="tgi.max-total-tokens",
        title=f"Limit a request to {cap} tokens",
        flags=flags,
        fits=True,
        confidence="high",
        why=f"The KV cache holds {cap} tokens, fewer than --max-total-tokens {want}.",
        tradeoff=f"Prompt + output longer than {cap} tokens is rejected.",
    )


@remedy("tgi.quantize")
def quantize(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp) or inp.context.quantization or setting(inp, "quantize"):
        return None
    return Remedy(
        id="tgi.quantize",
        title="Quantize the weights (8-bit EETQ)",
        flags={"--quantize": "eetq"},
        saves_bytes=inp.context.weights_bytes // 2 if inp.context.weights_bytes else None,
        fits=None,
        confidence="low",
        why="8-bit weights take half of the fp16 weights' memory, leaving it to prefill and the KV cache.",
    )


@remedy("tgi.cuda-graphs")
def cuda_graphs(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    return Remedy(
        id="tgi.cuda-graphs",
        title="Capture fewer CUDA graphs",
        flags={"--cuda-graphs": "1,2,4,8"},
        fits=None,
        confidence="low",
        why="Decode graph capture ran out of memory; TGI's default sizes go up to 32, half of the sizes keep up to 8.",
    )
