"""Remedies in the knobs of the product the user runs, when it is not the engine's command line.

The calculators speak in an engine's flags (``vllm serve --gpu-memory-utilization 0.85``). A user of
vLLM's Python ``LLM(...)`` class sets the same engine arguments as keyword arguments
(``LLM(model, gpu_memory_utilization=0.85)``): ``LLM.__init__`` passes ``**kwargs`` to ``EngineArgs``,
whose fields are the flags' names in snake case (vllm/entrypoints/llm.py, vllm/engine/arg_utils.py,
0.4 ... 0.12). A switch becomes ``True``.
"""

from __future__ import annotations

from collections.abc import Iterable

from oomdoctor.report import Remedy

#: products whose engine arguments are keyword arguments of a Python call: product -> engine
KEYWORD_PRODUCTS = {"vllm-python": "vllm"}


def keyword_name(flag: str) -> str:
    """``--gpu-memory-utilization`` -> ``gpu_memory_utilization``."""
    return flag.lstrip("-").replace("-", "_")


def speak_in_product(remedies: Iterable[Remedy], product: str | None, engine: str | None) -> None:
    """Move each remedy's engine flags into keyword settings (in place) where ``product`` takes
    them as keyword arguments of its Python call and the remedy is the engine's own."""
    if KEYWORD_PRODUCTS.get(product or "") != engine or engine is None:
        return
    for r in remedies:
        if not r.flags:
            continue
        r.settings = {**{keyword_name(k): (v if v != "" else "True") for k, v in r.flags.items()}, **r.settings}
        r.flags = {}
