"""The model and GPU catalogs and config.json reading, value by value (issue 38 §4).

Written against a whole-module mutation run of ``oomdoctor/advisor/catalog.py``: each row is worked
out by hand; changing a byte width, a boundary or a spelling changes at least one row.
"""

from __future__ import annotations

from typing import Any

import pytest

from oomdoctor.advisor.catalog import ModelGeometry
from oomdoctor.advisor.memory_model import facts
from oomdoctor.report import Context

DTYPES = [
    # (spelling, bytes per element)
    ("float32", 4), ("fp32", 4), ("float", 4),
    ("bfloat16", 2), ("bf16", 2), ("float16", 2), ("fp16", 2), ("half", 2), ("auto", 2),
    ("fp8", 1), ("fp8_e4m3", 1), ("fp8_e5m2", 1), ("fp8_inc", 1), ("fp8_ds_mla", 1), ("int8", 1),
]  # fmt: skip


def _geo(**kw: Any) -> ModelGeometry:
    base: dict[str, Any] = {"name": "m", "layers": 2, "attention_heads": 4, "kv_heads": 4, "head_dim": 8,
                            "source": "test"}
    return ModelGeometry(**{**base, **kw})


@pytest.mark.parametrize(("dtype", "width"), DTYPES)
def test_dtype_widths(dtype: str, width: int) -> None:
    # a checkpoint of 1 billion parameters in that dtype
    assert _geo(params=1.0, dtype=dtype).weight_bytes() == 10**9 * width
    if dtype != "auto":  # --kv-cache-dtype auto follows the model's dtype
        assert facts(None, Context(engine="vllm", kv_cache_dtype=dtype)).kv_dtype_bytes == width


def test_defaults_of_a_geometry_built_by_hand() -> None:
    """No MoE fields: dense (one expert, one per token); no tp/pp given: one rank, one stage."""
    geo = _geo(layers=10, kv_heads=4, sliding_window_layers=4, sliding_window=128)
    assert (geo.experts, geo.experts_per_token) == (1, 1)
    assert (geo.kv_heads_per_rank(), geo.full_layers(), geo.sliding_layers()) == (4, 6, 4)
    assert (geo.kv_heads_per_rank(2), geo.full_layers(4), geo.sliding_layers(3)) == (2, 2, 2)


def test_nominal_gpu_label_defaults_to_zero() -> None:
    from oomdoctor.advisor.catalog import GpuSpec

    spec = GpuSpec("X1", 2**30, (8, 0), False)
    assert spec.memory_label == "nominal (sold as 0 GB, counted as GiB); the usable memory is less"


def test_load_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    from oomdoctor.advisor import catalog

    monkeypatch.setattr(catalog, "hub_config", lambda repo: None)
    assert catalog.load_hub("org/none") is None
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 32, "vocab_size": 10}
    monkeypatch.setattr(catalog, "hub_config", lambda repo: cfg)
    monkeypatch.setattr(catalog, "hub_weight_bytes", lambda repo: None)
    geo = catalog.load_hub("org/tiny")
    assert geo is not None and (geo.layers, geo.kv_heads, geo.head_dim) == (2, 4, 8)
    assert geo.source == "config.json (Hub: org/tiny)"


def test_gpt_oss_weights_from_its_mxfp4_config() -> None:
    """gpt-oss's catalog entries are sized from their config fields as mxfp4 checkpoints (padded
    expert tensors at 0.531 B/param, embeddings and lm_head at 2 B), not params × 2 bytes."""
    from oomdoctor.advisor.catalog import find_model

    geo = find_model("openai/gpt-oss-20b")
    assert geo is not None and geo.quantization == "mxfp4" and geo.weights_total == 14678838912
    assert geo.weight_bytes() == 14678838912


@pytest.mark.parametrize(("gpu", "fp8"), [("L4", True), ("H100", True), ("A100", False), ("T4", False)])
def test_fp8_tensor_cores_from_8_9(gpu: str, fp8: bool) -> None:
    from oomdoctor.advisor.catalog import find_gpu

    spec = find_gpu(gpu)
    assert spec is not None and spec.fp8_tensor_cores is fp8


def test_quantized_entry_ignores_dtype() -> None:
    # 0.5 bytes per parameter whatever --dtype asks; an unquantized entry re-sized to it
    assert _geo(params=1.0, weight_bytes_per_param=0.5).weight_bytes(2) == 500_000_000
    assert _geo(params=1.0).weight_bytes(4) == 4_000_000_000


@pytest.mark.parametrize(("asked", "repo"), [
    ("org/x", "org/x"),  # a repo id is kept as asked
    ("Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B"),
    (None, "meta-llama/Llama-3.1-8B"),
])
def test_repo_name(asked: str | None, repo: str) -> None:
    from oomdoctor.advisor.catalog import find_model, repo_name

    geo = find_model("meta-llama/Llama-3.1-8B")
    assert geo is not None and repo_name(geo, asked) == repo


def test_dense_params_use_the_dense_intermediate_size() -> None:
    """hidden 32, 2 layers, 4 heads of 8, vocab 10: attention 4096 + MLP 3 × 32 × 64 per layer,
    embeddings and lm_head 640: 21120 parameters; one expert ignores moe_intermediate_size."""
    from oomdoctor.advisor.catalog import estimate_params

    cfg = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10,
           "intermediate_size": 64, "moe_intermediate_size": 16}
    assert estimate_params(cfg) == 21120 / 1e9
    assert estimate_params({**cfg, "num_local_experts": 2}) == (2 * (4096 + 3 * 32 * 16 * 2) + 640) / 1e9


def test_with_dtype() -> None:
    from oomdoctor.advisor.catalog import with_dtype

    geo = _geo(params=1.0, weights_total=1000)
    assert with_dtype(geo, "auto") is geo and with_dtype(geo, None) is geo
    wider = with_dtype(geo, "float32")
    assert (wider.weights_total, wider.dtype) == (2000, "float32")
    awq = with_dtype(_geo(params=1.0, weights_total=1000, quantization="awq"), "float32")
    assert (awq.weights_total, awq.dtype) == (1000, "float32")


@pytest.mark.parametrize(("kw", "method", "total"), [
    # 1e9 params in 16 bits, embeddings 2 × 10 × 32 = 640 kept at 2 B: (1e9 − 640) × 1 B + 640 × 2 B
    ({"params": 1.0, "vocab_size": 10, "hidden_size": 32}, "fp8", 1_000_000_640),
    ({"params": 1.0, "vocab_size": 10, "hidden_size": 32, "dtype": "weird"}, "fp8", 1_000_000_640),  # 2 B assumed
    # embeddings larger than the weights: no linear layers left (0, not negative)
    ({"params": 1e-9, "vocab_size": 10, "hidden_size": 32}, "fp8", 1280),
    ({"params": 1.0, "vocab_size": 10, "hidden_size": 32}, "nonsense", None),  # unknown method: unchanged
    ({"vocab_size": 10}, "fp8", None),  # no size known
    ({"params": 1.0, "quantization": "awq"}, "fp8", None),  # already quantized
])
def test_runtime_quantized(kw: dict[str, Any], method: str, total: int | None) -> None:
    from oomdoctor.advisor.catalog import runtime_quantized

    assert runtime_quantized(_geo(**kw), method).weights_total == total


def test_mla_and_window_defaults() -> None:
    # MLA caches one latent head whatever the attention heads; no window layers: none per stage
    assert _geo(kv_heads=128, kv_lora_rank=512).kv_heads_per_rank(1) == 1
    assert _geo(layers=10).sliding_layers() == 0 and _geo(layers=10).full_layers() == 10


@pytest.mark.parametrize(("asked", "repo"), [
    ("Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-chat-hf"),  # the alias the basename names
    ("Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
])
def test_repo_name_of_an_alias(asked: str, repo: str) -> None:
    from oomdoctor.advisor.catalog import find_model, repo_name

    geo = find_model("meta-llama/Llama-2-7b-hf")
    assert geo is not None and repo_name(geo, asked) == repo


@pytest.mark.parametrize(("name", "sizes"), [("A100", ["A100-40GB", "A100-80GB"]), ("A100-40GB", [])])
def test_gpu_sizes(name: str, sizes: list[str]) -> None:
    from oomdoctor.advisor.catalog import gpu_sizes

    assert gpu_sizes(name) == sizes


def test_models_lists_every_entry_once() -> None:
    from oomdoctor.advisor.catalog import models

    names = [m.name for m in models()]
    assert len(names) == len(set(names)) and "meta-llama/Llama-3.1-8B" in names


def test_tied_embeddings_count_once() -> None:
    from oomdoctor.advisor.catalog import estimate_params

    cfg = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10,
           "intermediate_size": 64, "tie_word_embeddings": True}
    assert estimate_params(cfg) == (21120 - 320) / 1e9


def test_widths_of_unknown_dtypes_and_quantized_totals() -> None:
    from oomdoctor.advisor.catalog import with_dtype

    assert _geo(params=1.0, dtype="weird").weight_bytes() == 2 * 10**9  # 16 bits assumed
    assert _geo(params=1.0, weights_total=1000, quantization="awq").weight_bytes(4) == 1000
    assert with_dtype(_geo(params=1.0, weights_total=1000), "weird").weights_total == 1000
    # no hidden_size and no head_dim: 128 a head (Llama, Qwen, Mistral)
    assert _geo(attention_heads=4, head_dim=0).hidden == 512


def test_mla_entries_have_no_head_dim() -> None:
    from oomdoctor.advisor.catalog import find_model

    geo = find_model("deepseek-ai/DeepSeek-V3")
    assert geo is not None and geo.is_mla and geo.head_dim == 0


def test_source_text_in_japanese() -> None:
    from oomdoctor.advisor.catalog import find_model
    from oomdoctor.i18n import use_lang

    geo = find_model("meta-llama/Llama-3.1-8B")
    assert geo is not None and geo.source_text() == "config.json of meta-llama/Llama-3.1-8B"
    with use_lang("ja"):
        assert geo.source_text() == "meta-llama/Llama-3.1-8Bのconfig.json"


def test_more_defaults() -> None:
    from oomdoctor.advisor.catalog import estimate_params, find_model

    # a checkpoint of unknown dtype is taken as 16-bit when re-sized to fp32
    assert _geo(weights_total=1000, dtype="weird").weight_bytes(4) == 2000
    # dense catalog entries: one expert, one per token
    geo = find_model("meta-llama/Llama-3.1-8B")
    assert geo is not None and (geo.experts, geo.experts_per_token) == (1, 1)
    # no intermediate_size: 4 × hidden (attention 4096 + MLP 3 × 32 × 128 per layer, embeddings 640)
    cfg = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10}
    assert estimate_params(cfg) == 33408 / 1e9


def test_mla_entry_bytes_without_one_of_its_parts() -> None:
    # the latent (kv_lora_rank) plus the RoPE part; a part not given counts 0
    assert _geo(kv_lora_rank=512).kv_entry_bytes(2) == 1024
    assert _geo(kv_lora_rank=0, qk_rope_head_dim=64).kv_entry_bytes(1) == 64


def test_moe_params_without_intermediate_size() -> None:
    """Two experts of 4 × hidden = 128: attention 4096 + 3 × 32 × 128 × 2 per layer, embeddings 640."""
    from oomdoctor.advisor.catalog import estimate_params

    cfg = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "num_local_experts": 2}
    assert estimate_params(cfg) == (2 * (4096 + 3 * 32 * 128 * 2) + 640) / 1e9


def test_online_quantization_without_a_vocabulary() -> None:
    from oomdoctor.advisor.catalog import runtime_quantized

    # no vocab_size: no embeddings to keep at 16 bits, every parameter at fp8's 1 byte
    assert runtime_quantized(_geo(params=1.0, hidden_size=32), "fp8").weights_total == 10**9
