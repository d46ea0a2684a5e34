"""Remedies in the knobs of the product the user runs, when it is not the engine's command line.

The calculators speak in an engine's flags (``vllm serve --gpu-memory-utilization 0.85``,
``llama-server -ngl 40``). Some products take the same engine arguments as keyword arguments of a
Python call, and their users get those instead:

- vLLM's ``LLM(...)`` class: ``LLM.__init__`` passes ``**kwargs`` to ``EngineArgs``, whose fields are
  the flags' names in snake case (vllm/entrypoints/llm.py, vllm/engine/arg_utils.py, 0.4 ... 0.12).
- llama-cpp-python: ``Llama(...)`` and ``python -m llama_cpp.server --name value``
  (llama_cpp/server/settings.py ModelSettings) name each llama.cpp setting in a table of their own,
  and take the KV cache's type as a ggml_type number (ggml.h: GGML_TYPE_Q8_0 = 8).

- Xinference launching a vLLM model: ``xinference launch ... --max_model_len 8192``. ``model_launch``
  takes every extra ``--name value`` pair as a keyword (xinference 1.10.0 deploy/cmdline.py) and the
  vLLM model passes them whole to ``AsyncEngineArgs(**model_config)`` (model/llm/vllm/core.py), so
  the flags keep their values under their snake-case names; ``--quantization`` is Xinference's own
  launch option (the model format's quantization), so vLLM's is not offered.
- LangChain's ``LlamaCpp(...)`` (langchain-community 0.3.27 llms/llamacpp.py): ``n_ctx``, ``n_batch``
  and ``n_gpu_layers`` are its fields; other llama.cpp settings would go through ``model_kwargs``,
  which is not offered here.
- vLLM-Omni: each stage of its deploy YAML carries its own engine arguments (vllm-omni 0.30.0
  deploy/*.yaml ``stages: - stage_id: N``, ``gpu_memory_utilization``, ``max_model_len``, ...): the
  flags become the failing stage's keys.

A switch becomes ``True``. Only the engine's own remedies are spoken this way (a host remedy's
``docker run --shm-size`` stays a flag), and one whose flag the product has no keyword for is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from oomdoctor.report import Remedy


@dataclass(frozen=True)
class KeywordProduct:
    """How a product takes its engine's arguments as keywords."""

    #: the id prefix of the engine's own remedies
    family: str
    #: flag -> keyword; None: every flag, in snake case
    names: Mapping[str, str] | None = None
    #: flag -> {flag value: keyword value}
    values: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: the keywords are given as ``--keyword value`` flags of the product's own command
    as_flags: bool = False
    #: flags the product has no keyword for (with ``names`` None)
    lacks: frozenset[str] = frozenset()
    #: flags whose comma-separated value the keyword takes as a Python list (``-ts 60,40`` ->
    #: ``tensor_split=[60, 40]``)
    lists: frozenset[str] = frozenset()


KEYWORD_PRODUCTS: dict[str, KeywordProduct] = {
    "vllm-python": KeywordProduct("vllm."),
    "vllm-omni": KeywordProduct("vllm."),
    "xinference": KeywordProduct("vllm.", as_flags=True, lacks=frozenset({"--quantization"})),
    "langchain-llamacpp": KeywordProduct("ggml.", names={"-c": "n_ctx", "-b": "n_batch", "-ngl": "n_gpu_layers"}),
    "llama-cpp-python": KeywordProduct(
        "ggml.",
        names={
            "-ngl": "n_gpu_layers", "-c": "n_ctx", "-ub": "n_ubatch", "-b": "n_batch", "-fa": "flash_attn",
            "--cache-type-k": "type_k", "--cache-type-v": "type_v", "-ts": "tensor_split",
        },
        values={"-fa": {"on": "True"}, "--cache-type-k": {"q8_0": "8"}, "--cache-type-v": {"q8_0": "8"}},
        lists=frozenset({"-ts"}),
    ),
}


def _as_list(value: str) -> str:
    """``60,40`` -> ``[60, 40]``."""
    return "[" + ", ".join(p.strip() for p in value.split(",")) + "]"


def keyword_name(flag: str) -> str:
    """``--gpu-memory-utilization`` -> ``gpu_memory_utilization``."""
    return flag.lstrip("-").replace("-", "_")


def _own(rem: Remedy, family: str) -> bool:
    parts = rem.id[len("combined:"):].split("+") if rem.id.startswith("combined:") else [rem.id]
    return all(p.startswith(family) for p in parts)


def in_product_knobs(rem: Remedy, product: str | None) -> Remedy | None:
    """``rem`` with its engine flags moved into keyword settings (in place) where ``product`` takes
    them as keyword arguments; None when the product has no keyword for one of them."""
    spec = KEYWORD_PRODUCTS.get(product or "")
    if spec is None or not rem.flags or not _own(rem, spec.family):
        return rem
    if spec.names is not None and any(k not in spec.names for k in rem.flags):
        return None
    if any(k in spec.lacks for k in rem.flags):
        return None
    keywords = {
        (spec.names[k] if spec.names is not None else keyword_name(k)):
            ("True" if v == "" else _as_list(v) if k in spec.lists else spec.values.get(k, {}).get(v, v))
        for k, v in rem.flags.items()
    }
    if spec.as_flags:
        rem.flags = {f"--{k}": v for k, v in keywords.items()}
        return rem
    rem.settings = {**keywords, **rem.settings}
    rem.flags = {}
    return rem
