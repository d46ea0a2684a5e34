"""Small helpers shared by the engine remedy modules (SGLang, TGI, ggml, TRT-LLM, XLA, host, training)."""

from __future__ import annotations

import re
from typing import Any

from oomdoctor.advisor.registry import AdviceInput
from oomdoctor.report import Context

#: a checkpoint's name that says its weights are already quantized (Hugging Face naming:
#: Qwen2.5-72B-Instruct-GPTQ-Int4, Llama-3.1-8B-Instruct-FP8, ...-AWQ, ...-bnb-4bit, ...-w4a16)
_QUANTIZED_NAME = re.compile(
    r"(?i)(?:^|[-_./])(?:gptq|awq|fp8|int4|int8|nvfp4|mxfp4|w4a16|w8a8|w8a16|bnb|4bit|8bit|gguf|exl2|marlin)(?:$|[-_./])"
)


def checkpoint_quantized(context: Context) -> bool:
    """The run already serves quantized weights: a quantization in the log's configuration or frames, or
    a model name that says so. Quantizing it again is no remedy (engines reject a second method)."""
    q = (context.quantization or "").strip().lower()
    if q and q not in ("none", "null"):
        return True
    return bool(context.model and _QUANTIZED_NAME.search(context.model))


def engine_of(inp: AdviceInput) -> str | None:
    """The tool that printed the log: the finding's own engine when specific, else the context's."""
    eng = inp.finding.engine
    if eng and eng not in ("pytorch", "python", "ggml", "xla", "host", "nccl"):
        return eng
    return inp.context.engine or eng


def one_request(inp: AdviceInput) -> bool:
    """The log shows a program serving one item per request (an interrogator, captioner, tagger:
    rules/pytorch.toml request.one-item-frame): no batch to halve."""
    extra = inp.context.extra
    return bool(extra.get("one_request_frame") or extra.get("one_request_line"))


def product_of(inp: AdviceInput) -> str | None:
    """The program the user runs and configures: the finding's product, else the run's."""
    return inp.finding.product or inp.context.product


def setting(inp: AdviceInput, *names: str) -> Any:
    """First value found under ``names`` in the finding's figures, the context extras or launch args."""
    for name in names:
        v = inp.finding.figures.get(name)
        if v is not None:
            return v
        v = inp.context.extra.get(name)
        if v is not None:
            return v
        v = inp.context.launch_args.get(name)
        if v is not None:
            return v
    return None


def as_int(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(str(v).replace(",", "").strip())
    except ValueError:
        try:
            return int(float(str(v)))
        except ValueError:
            return None


def as_float(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(str(v).strip())
    except ValueError:
        return None


def is_true(v: Any) -> bool:
    return str(v).strip().lower() in ("true", "1", "yes", "on", "enabled")
