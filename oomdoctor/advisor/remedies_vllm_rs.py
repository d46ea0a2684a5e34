"""vLLM.rs remedies (https://github.com/guoqingbao/vllm.rs, read at 1b00e27).

vLLM.rs plans its KV cache for ``--max-num-seqs × --max-model-len`` tokens when both are given
(src/utils/kvcache_allocator.rs ``calculate_required_memory``: sequences × blocks per sequence × bytes
per block) and fails with "Available: A MB, Required: R MB" when that is more than the memory left
after loading. The bytes are linear in the tokens, so the limits must shrink by A / R. Without
``--max-model-len`` it sizes both to the memory (src/main.rs, ``auto_decide_params``). Every
calculator answers only for vLLM.rs logs.
"""

from __future__ import annotations

import math

from oomdoctor.advisor._engine_util import as_int, engine_of, setting
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.values import round_down
from oomdoctor.report import Remedy

#: context lengths are rounded down to this many tokens (a multiple of every block size vLLM.rs uses)
CONTEXT_STEP = 256


def _mine(inp: AdviceInput) -> bool:
    return engine_of(inp) == "vllm-rs"


def _share(inp: AdviceInput) -> tuple[int, int, float] | None:
    """(available, required, available / required) from the message, when it is short."""
    avail, need = as_int(inp.fig("kv_cache_available_bytes")), as_int(inp.fig("kv_cache_needed_bytes"))
    if not avail or not need or avail >= need:
        return None
    return avail, need, avail / need


@remedy("vllm-rs.max-model-len")
def max_model_len(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp) or (share := _share(inp)) is None:
        return None
    avail, need, ratio = share
    cur = inp.context.max_model_len or as_int(setting(inp, "max_model_len"))
    if cur:
        value = round_down(cur * ratio, CONTEXT_STEP)
        if value >= CONTEXT_STEP:
            return Remedy(
                id="vllm-rs.max-model-len",
                title=remedy_text("vllm-rs.max-model-len", "title", value=value),
                flags={"--max-model-len": str(value)},
                saves_bytes=need - avail,
                fits=True,
                confidence="high",
                why=remedy_text("vllm-rs.max-model-len", "why", current=cur, available=avail, required=need,
                                value=value, step=CONTEXT_STEP),
                sources={"available": "message", "required": "message", "max_model_len": "context"},
            )
    percent = math.floor(ratio * 100)
    return Remedy(
        id="vllm-rs.max-model-len",
        title=remedy_text("vllm-rs.max-model-len", "title_share", percent=percent),
        fits=None,
        confidence="medium",
        why=remedy_text("vllm-rs.max-model-len", "why_share", available=avail, required=need, percent=percent),
        sources={"available": "message", "required": "message"},
    )


@remedy("vllm-rs.max-num-seqs")
def max_num_seqs(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp) or (share := _share(inp)) is None:
        return None
    avail, need, ratio = share
    cur = inp.context.max_num_seqs or as_int(setting(inp, "max_num_seqs"))
    if not cur or cur < 2:
        return None
    value = math.floor(cur * ratio)
    if value < 1:
        return None
    return Remedy(
        id="vllm-rs.max-num-seqs",
        title=remedy_text("vllm-rs.max-num-seqs", "title", value=value),
        flags={"--max-num-seqs": str(value)},
        saves_bytes=need - avail,
        fits=True,
        confidence="high",
        why=remedy_text("vllm-rs.max-num-seqs", "why", current=cur, available=avail, required=need, value=value),
        tradeoff=remedy_text("vllm-rs.max-num-seqs", "cost"),
        sources={"available": "message", "required": "message", "max_num_seqs": "context"},
    )
