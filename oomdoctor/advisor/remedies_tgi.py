"""TGI remedies (flags of text-generation-launcher, launcher/src/main.rs).

Values come from the failing message (the N of "N prefill tokens") or the launcher's ``Args {...}``
line. Every calculator answers only for TGI logs.
"""

from __future__ import annotations

from oomdoctor.advisor._engine_util import (
    as_float,
    as_int,
    checkpoint_quantized,
    engine_of,
    product_of,
    setting,
)
from oomdoctor.advisor.memory_model import parse_version
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.values import floor_to, fmt_fraction, round_down
from oomdoctor.i18n import join_sentences
from oomdoctor.report import Remedy

#: prefill budgets are rounded down to this many tokens
TGI_TOKEN_STEP = 256
#: share of the KV tokens given back to activations when lowering --max-batch-total-tokens
TGI_TOTAL_TOKENS_SHRINK = 0.9
#: margin (fraction of the GPU) kept when lowering --cuda-memory-fraction
TGI_FRACTION_MARGIN = 0.01


def _mine(inp: AdviceInput) -> bool:
    return engine_of(inp) == "tgi"


def _input_flag(inp: AdviceInput) -> str:
    """The input-limit flag as this run spells it: TGI 1.x has only --max-input-length; 2.0 added
    --max-input-tokens and keeps the old name as a deprecated spelling it refuses beside the new one
    (rules/advice/flags.toml [tgi]). The new name only where the run is known to be 2.x (its version,
    or the new name in its arguments); else the old one, which every release takes alone."""
    ctx = inp.context
    # LoRAX forked TGI 0.9 and kept --max-input-length (launcher/src/main.rs at its tags; knobs.toml)
    if product_of(inp) == "lorax" or "tgi_max_input_length" in ctx.extra or "max_input_length" in ctx.launch_args:
        return "--max-input-length"
    version = parse_version(ctx.engine_version) if engine_of(inp) == "tgi" else None
    # the router's warm-up span that states the input limit is router v3's (TGI 2.x+)
    if ("max_input_tokens" in ctx.launch_args or "tgi_max_input_tokens" in ctx.extra
            or "tgi_warmup_max_input" in ctx.extra or (version and version >= (2, 0))):
        return "--max-input-tokens"
    return "--max-input-length"


#: the launcher's --max-batch-prefill-tokens when none is given: TGI v0.9-v1.4 `default_value = "4096"`,
#: 2.x-3.x `default_optimal` 4096 (capped by the model's max_position_embeddings and the VRAM); LoRAX
#: v0.1.0-v0.10.0 `default_value = "4096"` (launcher/src/main.rs at those tags). A warm-up that fails
#: below it fails at a prefill smaller than the one the server is built to run: the weights nearly
#: fill the GPU.
TGI_DEFAULT_PREFILL = 4096


def small_warmup_prefill(figures: dict[str, object]) -> bool:
    """The warm-up's "Not enough memory to handle N prefill tokens" (v0.9.4+, no total tokens: the KV
    cache is sized after warm-up) with N below the launcher's default prefill budget."""
    n = as_int(figures.get("prefill_tokens"))
    return n is not None and figures.get("max_total_tokens") is None and n < TGI_DEFAULT_PREFILL


#: --quantize values by release (launcher/src/main.rs `enum Quantization`): TGI v1.0.0 bitsandbytes and
#: gptq, v1.0.3 adds bitsandbytes-nf4, v1.1.0 adds eetq (and deprecates bitsandbytes in its favour);
#: LoRAX v0.1.0 bitsandbytes and gptq, v0.4.0 bitsandbytes-nf4, v0.8.0 eetq
_QUANTIZE_BY_VERSION = {
    "tgi": ((1, 1, 0), (1, 0, 3)),
    "lorax": ((0, 8, 0), (0, 4, 0)),
}


def _quantize_value(inp: AdviceInput) -> str:
    """eetq (8-bit) where the release has it or the release is unknown; 4-bit NF4 bitsandbytes, else
    bitsandbytes, before it."""
    product = "lorax" if product_of(inp) == "lorax" else "tgi"
    version = parse_version(inp.context.engine_version) if inp.context.engine_version else None
    eetq, nf4 = _QUANTIZE_BY_VERSION[product]
    if version is None or version >= eetq:
        return "eetq"
    return "bitsandbytes-nf4" if version >= nf4 else "bitsandbytes"


#: TGI 1.x launcher's --max-input-length default (launcher/src/main.rs, `default_value = "1024"`); 2.x
#: derives --max-input-tokens from the model's config
TGI1_MAX_INPUT_DEFAULT = 1024


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
    max_input = as_int(setting(inp, "tgi_max_input_tokens", "tgi_max_input_length", "max_input_tokens", "max_input_length",
                               "tgi_warmup_max_input"))
    extra = ""
    if max_input and max_input > value:
        flags[_input_flag(inp)] = str(value)
        extra = remedy_text("tgi.max-batch-prefill-tokens", "why_input", max_input=max_input, value=value)
    elif not max_input and value < TGI1_MAX_INPUT_DEFAULT:
        # the launcher refuses a prefill budget below the input limit, which the log does not show:
        # below TGI 1.x's default (1024) the input limit comes down with it
        flags[_input_flag(inp)] = str(value)
        extra = remedy_text("tgi.max-batch-prefill-tokens", "why_input_unknown", value=value,
                            default=TGI1_MAX_INPUT_DEFAULT)
    return Remedy(
        id="tgi.max-batch-prefill-tokens",
        title=remedy_text("tgi.max-batch-prefill-tokens", "title", value=value),
        flags=flags,
        fits=None,
        confidence="high" if inp.fig("prefill_tokens") and not small_warmup_prefill(inp.figures) else "medium",
        why=join_sentences(
            t for t in (remedy_text("tgi.max-batch-prefill-tokens", "why", tokens=n, step=TGI_TOKEN_STEP, value=value), extra,
                        remedy_text("tgi.max-batch-prefill-tokens", "why_stopgap", default=TGI_DEFAULT_PREFILL)
                        if small_warmup_prefill(inp.figures) else "") if t
        ),
        tradeoff=remedy_text("tgi.max-batch-prefill-tokens", "cost_input" if extra else "cost"),
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
        title=remedy_text("tgi.cuda-memory-fraction", "title_lift", value=fmt_fraction(value)),
        flags={"--cuda-memory-fraction": fmt_fraction(value)},
        fits=True if (total and free is not None and value * total > allowed) else None,
        confidence="medium",
        why=remedy_text(
            "tgi.cuda-memory-fraction", "why_lift", allowed=allowed, free=free, total=total, value=fmt_fraction(value)
        ) if (total and free is not None)
        else remedy_text("tgi.cuda-memory-fraction", "why_lift_unknown", allowed=allowed),
        tradeoff=remedy_text("tgi.cuda-memory-fraction", "cost_lift"),
        sources={"allowed": "message"},
    )


@remedy("tgi.cuda-memory-fraction")
def cuda_memory_fraction(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    allowed = inp.fig("allowed_bytes")
    total = inp.fig("total_bytes") or inp.context.gpu_total_bytes
    if allowed and total and allowed >= total:
        return None  # the fraction is already 1.0: the cap is the whole GPU, lifting it frees nothing
    if allowed:
        return _lift_cap(inp, int(allowed))
    if inp.finding.phase == "warmup":
        # the warm-up's prefill is what TGI sizes the KV cache after: a smaller fraction leaves it
        # less, not more (the expert labels' fix is the prefill/input limits)
        return None
    req, total = inp.fig("requested_bytes"), inp.fig("total_bytes") or inp.context.gpu_total_bytes
    if not (req and total):
        return None
    cur = as_float(setting(inp, "tgi_cuda_memory_fraction", "cuda_memory_fraction")) or 1.0
    value = floor_to(cur - req / total - TGI_FRACTION_MARGIN, 2)
    if value <= 0.1 or value >= cur:
        return None
    return Remedy(
        id="tgi.cuda-memory-fraction",
        title=remedy_text("tgi.cuda-memory-fraction", "title", value=fmt_fraction(value)),
        flags={"--cuda-memory-fraction": fmt_fraction(value)},
        saves_bytes=int((cur - value) * total),
        fits=True,
        confidence="medium",
        why=remedy_text(
            "tgi.cuda-memory-fraction", "why", current=cur, request=req, total=total, margin=TGI_FRACTION_MARGIN,
            value=fmt_fraction(value),
        ),
        tradeoff=remedy_text("tgi.cuda-memory-fraction", "cost"),
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
        title=remedy_text("tgi.max-batch-total-tokens", "title", value=value),
        flags={"--max-batch-total-tokens": str(value)},
        fits=None,
        confidence="low",
        why=remedy_text("tgi.max-batch-total-tokens", "why", current=cur, share=f"{TGI_TOTAL_TOKENS_SHRINK:.0%}"),
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
        title=remedy_text("tgi.max-total-tokens", "title", cap=cap),
        flags=flags,
        fits=True,
        confidence="high",
        why=remedy_text("tgi.max-total-tokens", "why", cap=cap, want=want),
        tradeoff=remedy_text("tgi.max-total-tokens", "cost", cap=cap),
    )


@remedy("tgi.quantize")
def quantize(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp) or checkpoint_quantized(inp.context) or setting(inp, "quantize"):
        return None
    value = _quantize_value(inp)
    key = "" if value == "eetq" else "_bnb"
    small = small_warmup_prefill(inp.figures)
    return Remedy(
        id="tgi.quantize",
        title=remedy_text("tgi.quantize", "title" + key),
        flags={"--quantize": value},
        saves_bytes=inp.context.weights_bytes // (4 if value == "bitsandbytes-nf4" else 2)
        if inp.context.weights_bytes else None,
        fits=None,
        # a warm-up that fails below the default prefill: the weights are what fills the GPU
        confidence="medium" if small else "low",
        why=join_sentences([remedy_text("tgi.quantize", "why" + key)] + (
            [remedy_text("tgi.quantize", "why_small", tokens=inp.fig("prefill_tokens"), default=TGI_DEFAULT_PREFILL)]
            if small else [])),
        tradeoff=remedy_text("tgi.quantize", "cost_bnb") if key else "",
    )


@remedy("tgi.num-shard")
def num_shard(inp: AdviceInput) -> Remedy | None:
    """Shard over the GPUs the log shows beside the shards it runs. The launcher already shards over
    every visible GPU when neither --num-shard nor --sharded is given (find_num_shards: (None, None) =>
    num_cuda_devices(), TGI v1.0.0 ... v3.3.7, LoRAX alike), so only a known, smaller shard count is raised."""
    if not _mine(inp):
        return None
    gpus = as_int(inp.hints.get("gpus")) or inp.context.gpu_count
    shards = as_int(setting(inp, "num_shard")) or inp.context.tensor_parallel_size
    if not gpus or not shards or gpus <= shards:
        return None
    value = 1 << (gpus.bit_length() - 1)  # a power of two: the attention heads divide by it
    if value <= shards:
        return None
    return Remedy(
        id="tgi.num-shard",
        title=remedy_text("tgi.num-shard", "title", value=value),
        flags={"--num-shard": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text("tgi.num-shard", "why", gpus=gpus, shards=shards, value=value),
    )


@remedy("tgi.cuda-graphs")
def cuda_graphs(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    return Remedy(
        id="tgi.cuda-graphs",
        title=remedy_text("tgi.cuda-graphs", "title"),
        flags={"--cuda-graphs": "1,2,4,8"},
        fits=None,
        confidence="low",
        why=remedy_text("tgi.cuda-graphs", "why"),
    )
