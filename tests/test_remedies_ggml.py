"""llama.cpp / ollama remedies: layers that fit, context, KV type, flash attention."""

from __future__ import annotations

from tests.engines_util import diagnose, only_error, remedy, remedy_ids


def test_ngl_from_free_memory_and_layer_size() -> None:
    f = only_error(diagnose("llamacpp/synthetic-weights-oom-ngl.log"))
    # llama.cpp prints "offloaded N/M" only after allocating: all 80 + 1 layers assumed;
    # 40543.11 MiB / 81 layers = 500.5 MiB per layer; (7800 MiB free - 1 GiB) // 500.5 MiB = 13
    r = f.remedies[0]
    assert (r.id, r.flags) == ("ggml.n-gpu-layers", {"-ngl": "13"})
    assert "assumes all 80 layers + output were offloaded" in r.why
    # context and KV type do not change the weights' size
    assert "ggml.ctx-size" not in remedy_ids(f) and "ggml.kv-cache-type" not in remedy_ids(f)


def test_ollama_gets_ollama_settings_not_llamacpp_flags() -> None:
    f = only_error(diagnose("ollama/other-005.log"))
    ids = remedy_ids(f)
    assert ids[0] == "ollama.num-ctx" and not any(i.startswith("ggml.") for i in ids)
    assert remedy(f, "ollama.num-ctx").settings == {"num_ctx": "32768"}
    assert remedy(f, "ollama.kv-cache-type").env == {"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "1"}
    # the KV cache sits in CUDA_Host memory here: shrinking it frees no GPU memory
    assert remedy(f, "ollama.kv-cache-type").saves_bytes is None
    assert remedy(f, "ollama.num-ctx").saves_bytes is None


def test_ollama_num_gpu_halves_when_its_estimate_was_wrong() -> None:
    f = only_error(diagnose("ollama/synthetic-offload-oom.log"))
    r = f.remedies[0]
    assert (r.id, r.settings, r.fits) == ("ollama.num-gpu", {"num_gpu": "16"}, None)


def test_kv_failure_suggests_smaller_context_and_q8_cache() -> None:
    f = only_error(diagnose("llamacpp/synthetic-kv-cache-oom.log"))
    assert remedy(f, "ggml.ctx-size").flags == {"-c": "65536"}
    # no build line: the newest sample answers, where -fa takes on|off|auto (b6431+)
    assert remedy(f, "ggml.kv-cache-type").flags == {"--cache-type-k": "q8_0", "--cache-type-v": "q8_0", "-fa": "on"}


def test_runtime_oom_halves_ubatch() -> None:
    f = only_error(diagnose("llamacpp/synthetic-runtime-cuda-error.log"))
    assert remedy(f, "ggml.ubatch-size").flags == {"-ub": "256", "-b": "256"}
    assert remedy(f, "ggml.ctx-size").flags == {"-c": "16384"}
