"""llama.cpp's compute buffer that grows with the context (no flash attention: n_ctx × n_ubatch
attention scores per head; the K-shift graph: the whole cache), and the context that defaulted to
the model's training length (n_ctx == n_ctx_train, what -c 0 creates and, from b7698, no -c).

Fixtures: llamacpp/synthetic-compute-train-ctx (b7698 wording), llamacpp/synthetic-kshift-compute
(b6431 wording); the variants below edit their lines."""

from __future__ import annotations

from oomdoctor.report import Finding
from tests.corpus import FIXTURES
from tests.engines_util import diagnose, diagnose_text, only_error, remedy, remedy_ids

_TRAIN = (FIXTURES / "llamacpp" / "synthetic-compute-train-ctx.log").read_text()
_FREE_LINE = "llama_model_load_from_file_impl: using device ROCm0 (AMD Radeon RX 7900 XTX) (0000:03:00.0) - 24176 MiB free\n"
_FA_DISABLED = (
    "llama_context: layer 0 is assigned to device ROCm0 but the Flash Attention tensor is assigned to device CPU "
    "(usually due to missing support)\n"
    "llama_context: Flash Attention was auto, set to disabled\n"
)


def _flags(f: Finding) -> list[tuple[str, dict[str, str]]]:
    return [(r.id, r.flags) for r in f.remedies]


def test_a_training_length_context_leads_with_the_context_that_fits_the_free_memory() -> None:
    """No flash attention: KV 16384 MiB + compute 8736 MiB grow with n_ctx 131072; room = 24176 −
    4403.49 − 1024 MiB headroom = 18748.51 MiB; ⌊131072 × 18748.51 / 25120⌋ = 97827 → 97792."""
    f = only_error(diagnose("llamacpp/synthetic-compute-train-ctx.log"))
    assert f.phase == "kv-cache-alloc"  # context creation keeps its phase
    assert f.cause is not None and f.cause.id == "activation-peak"
    assert "the context is 131072 tokens, the model's full training context" in f.cause.summary
    assert "when -c is not given in builds from b7698 (4096 tokens up to b7347)" in f.cause.summary
    assert _flags(f)[:3] == [
        ("ggml.ctx-size", {"-c": "97792"}), ("ggml.flash-attn", {"-fa": "on"}), ("ggml.ubatch-size", {"-ub": "256", "-b": "256"}),
    ]
    ctx = f.remedies[0]
    assert (ctx.fits, ctx.confidence) == (True, "medium")
    assert "⌊131072 × (19.31 GiB − 1.00 GiB) / (16.00 GiB + 8.53 GiB)⌋" in ctx.why
    assert "full training context" in ctx.why
    # q8_0 does not shrink the attention scores, and the flash attention it needs does by itself
    assert "ggml.kv-cache-type" not in remedy_ids(f)


def test_without_the_free_memory_the_freed_kv_cache_pays_for_the_smaller_buffer() -> None:
    """⌊131072 × 16384 / (16384 + 8736)⌋ = 85489 → 85248: the KV cache it frees holds the buffer."""
    f = only_error(diagnose_text(_TRAIN.replace(_FREE_LINE, "")))
    ctx = remedy(f, "ggml.ctx-size")
    assert (ctx.flags, ctx.fits, ctx.confidence) == ({"-c": "85248"}, None, "medium")
    assert "⌊131072 × 16.00 GiB / (16.00 GiB + 8.53 GiB)⌋" in ctx.why
    assert f.remedies[0].id == "ggml.ctx-size"


def test_with_flash_attention_on_the_kv_cache_alone_makes_room() -> None:
    """Flash attention on: the buffer no longer grows with n_ctx; 16384 MiB / 131072 = 128 KiB per
    token, ⌈8736 MiB / 128 KiB⌉ = 69888 tokens fewer → 61184. q8_0 is a lever again."""
    log = _TRAIN.replace(_FA_DISABLED, "llama_context: Flash Attention was auto, set to enabled\n")
    f = only_error(diagnose_text(log))
    assert f.cause is not None
    assert f.cause.summary.startswith("llama.cpp's compute buffer of 8.53 GiB did not fit beside the KV cache of a 131072-token context")
    assert remedy(f, "ggml.ctx-size").flags == {"-c": "61184"}
    assert "ggml.flash-attn" not in remedy_ids(f)
    assert remedy(f, "ggml.kv-cache-type").saves_bytes == int(16384 * 2**20 * (1 - 8.5 / 16))


def test_a_short_context_puts_flash_attention_and_the_batch_first() -> None:
    """n_ctx 16384 of 131072 (set by -c): not the training default, and short: the context comes
    after flash attention and the batch, at low confidence."""
    log = _TRAIN.replace("n_ctx         = 131072", "n_ctx         = 16384").replace(
        "ROCm0 KV buffer size = 16384.00 MiB", "ROCm0 KV buffer size =  2048.00 MiB"
    ).replace("allocating 8736.00 MiB", "allocating 4000.00 MiB").replace("buffer of size 9160359936", "buffer of size 4194304000")
    f = only_error(diagnose_text(log))
    assert f.cause is not None and "training context" not in f.cause.summary
    assert "(16384 × 512) per head" in f.cause.summary
    assert [r.id for r in f.remedies[:3]] == ["ggml.flash-attn", "ggml.ubatch-size", "ggml.ctx-size"]
    assert remedy(f, "ggml.ctx-size").confidence == "low"


def test_without_n_ctx_the_context_is_named_after_flash_attention_and_the_batch() -> None:
    """fresh-064's shape: only the failing lines (13.8 GiB compute pp buffer), no n_ctx: -fa on,
    -ub 256, then the context without a value."""
    f = only_error(diagnose_text(
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 14136.04 MiB on device 0: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 14822711296\n"
        "graph_reserve: failed to allocate compute buffers\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n"
    ))
    assert f.phase == "kv-cache-alloc"
    assert f.cause is not None
    assert f.cause.summary == (
        "llama.cpp's compute buffer of 13.80 GiB did not fit: without flash attention it holds the attention scores "
        "of n_ctx × n_ubatch per head, so it grows with the context and the batch."
    )
    assert _flags(f) == [
        ("ggml.flash-attn", {"-fa": "on"}), ("ggml.ubatch-size", {"-ub": "256", "-b": "256"}), ("ggml.ctx-size", {}),
    ]
    assert f.remedies[2].title == "Set the context (-c / --ctx-size) to what the prompts need"
    assert "builds from b7698 create the model's full training context" in f.remedies[2].why


def test_an_old_build_takes_flash_attention_as_a_switch() -> None:
    """b5590 and before: -fa is a switch (common/arg.cpp); b6431 on, -fa on|off|auto."""
    f = only_error(diagnose_text(
        "build: 5590 (3ac67535) with cc (GCC) 13.2.0 for x86_64-linux-gnu\n"
        "llama_context: n_ctx         = 65536\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 9437184000\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n"
    ))
    assert remedy(f, "ggml.flash-attn").flags == {"-fa": ""}


def test_llama_cpp_python_gets_n_ctx_and_flash_attn_keywords() -> None:
    """The same failure built by Llama(model_path=..., n_ctx=0): the keywords, not the flags."""
    lines = [ln for ln in _TRAIN.splitlines(keepends=True) if not ln.startswith(("build:", "main:", "srv ", "system info"))]
    head = 'from llama_cpp import Llama\nllm = Llama(model_path="models/llama-3.1-8b.gguf", n_ctx=0)\n'
    f = only_error(diagnose_text(head + "".join(lines)))
    assert f.product == "llama-cpp-python"
    ctx, fa = f.remedies[0], remedy(f, "ggml.flash-attn")
    assert (ctx.id, ctx.flags, ctx.settings) == ("ggml.ctx-size", {}, {"n_ctx": "97792"})
    assert "which n_ctx=0 creates" in ctx.why
    assert (fa.flags, fa.settings) == ({}, {"flash_attn": "True"})


def test_the_k_shift_graph_is_turned_off_not_batched() -> None:
    """b6431's "failed to allocate compute graph for K-shift" while serving: --no-context-shift, then
    the context cut by the KV bytes per token (flash attention on: 6144 MiB / 32768 = 192 KiB,
    ⌈1152 MiB / 192 KiB⌉ = 6144 tokens fewer → 26624); no -ub, no -fa."""
    f = only_error(diagnose("llamacpp/synthetic-kshift-compute.log"))
    assert f.phase == "inference"
    assert f.cause is not None and f.cause.summary.startswith("llama.cpp's KV-cache update graph (the K-shift")
    assert _flags(f)[:2] == [("ggml.no-context-shift", {"--no-context-shift": ""}), ("ggml.ctx-size", {"-c": "26624"})]
    assert not {"ggml.ubatch-size", "ggml.flash-attn"} & set(remedy_ids(f))


def test_the_old_kv_cache_update_failure_names_context_shift_then_the_context() -> None:
    """fresh-065's shape (llama_kv_cache_update_impl, 2025 builds), no n_ctx in the log."""
    f = only_error(diagnose_text(
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB on device 1: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 10345253120\n"
        "llama_kv_cache_update_impl: failed to allocate compute buffers\n"
    ))
    assert f.phase == "inference"
    assert _flags(f)[:2] == [("ggml.no-context-shift", {"--no-context-shift": ""}), ("ggml.ctx-size", {})]
    assert f.remedies[1].title == "Lower the context (-c / --ctx-size)"


def test_ollama_compute_buffer_gets_flash_attention_first_and_no_kv_type() -> None:
    """other-007: a 9 GiB compute buffer at num_ctx 4096 with FlashAttention:false: the short
    context is not the lever (low confidence, after the batch); q8_0 would not shrink the buffer."""
    f = diagnose("ollama/other-007.log").findings[0]
    assert [(r.id, r.env or r.settings, r.confidence) for r in f.remedies[:3]] == [
        ("ollama.flash-attention", {"OLLAMA_FLASH_ATTENTION": "1"}, "medium"),
        ("ollama.num-batch", {"num_batch": "256"}, "medium"),
        ("ollama.num-ctx", {"num_ctx": "2048"}, "low"),
    ]
    assert "ollama.kv-cache-type" not in remedy_ids(f)
