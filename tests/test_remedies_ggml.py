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
    # the KV cache sits in CUDA_Host memory here: shrinking it frees no GPU memory, so no KV type
    assert "ollama.kv-cache-type" not in ids
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


_OLLAMA_RUNNER = (
    'time=2025-12-02T17:06:47.184-05:00 level=INFO source=runner.go:1271 msg=load request="{Operation:alloc LoraPath:[] '
    "Parallel:2 BatchSize:1024 FlashAttention:false KvSize:8192 KvCacheType: NumThreads:8 GPULayers:30[ID:GPU-0 Layers:30(2..31) ] "
    'MultiUserCache:false ProjectorPath: MainGPU:0 UseMmap:false}"\n'
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 3072.00 MiB on device 0: cudaMalloc failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 3221225472\n"
)


def test_ollama_runner_load_request_gives_ollama_options_from_its_own_numbers() -> None:
    import oomdoctor

    f = only_error(oomdoctor.diagnose(_OLLAMA_RUNNER.encode(), source="<ollama>"))
    assert f.engine == "ollama"
    # an ollama user sets options and variables, never the runner's llama.cpp flags
    assert all(not r.flags for r in f.remedies), [(r.id, r.flags) for r in f.remedies]
    # KvSize is num_ctx × Parallel: 8192 / 2 = 4096 per slot, halved
    assert remedy(f, "ollama.num-ctx").settings == {"num_ctx": "2048"}
    # BatchSize 1024 → 512; the compute buffer of 3.00 GiB roughly halves
    nb = remedy(f, "ollama.num-batch")
    assert nb.settings == {"num_batch": "512"} and nb.saves_bytes == 3221225472 // 2
    assert "num_batch (1024)" in nb.why
    assert remedy(f, "ollama.flash-attention").env == {"OLLAMA_FLASH_ATTENTION": "1"}  # FlashAttention:false
    assert remedy(f, "ollama.num-parallel").env == {"OLLAMA_NUM_PARALLEL": "1"}  # Parallel:2
    assert remedy(f, "ollama.num-gpu").settings == {"num_gpu": "15"}  # half of GPULayers:30


def test_no_ollama_fixture_gets_a_llamacpp_flag() -> None:
    from pathlib import Path

    import oomdoctor

    logs = sorted((Path(__file__).parent.parent / "fixtures" / "ollama").glob("*.log"))
    assert len(logs) >= 8
    for log in logs:
        for f in oomdoctor.diagnose(log.read_bytes(), source=log.name).findings:
            assert f.engine == "ollama", (log.name, f.engine)
            assert all(not r.flags for r in f.remedies), (log.name, [(r.id, r.flags) for r in f.remedies])


def test_llamacpp_context_is_cut_by_the_kv_bytes_per_token_it_printed() -> None:
    import oomdoctor

    log = (
        "llama_context: n_ctx         = 32768\n"
        "llama_kv_cache_unified:      CUDA0 KV buffer size =  4096.00 MiB\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1000.00 MiB on device 0: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1048576000\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n"
    )
    f = only_error(oomdoctor.diagnose(log.encode(), source="<cut>"))
    r = remedy(f, "ggml.ctx-size")
    # 4096 MiB / 32768 tokens = 128 KiB per token; ⌈1000 MiB / 128 KiB⌉ = 8000 tokens;
    # 32768 − 8000 = 24768 → 24576 (a multiple of 256), which frees 8192 × 128 KiB = 1 GiB
    assert r.flags == {"-c": "24576"} and r.saves_bytes == 2**30
    assert r.title == "Lower the context to 24576 tokens" and "= 8000 tokens fewer" in r.why


def test_llamacpp_kv_allocation_is_the_cache_for_n_ctx_tokens() -> None:
    f = only_error(diagnose("llamacpp/synthetic-kv-cache-oom.log"))
    r = remedy(f, "ggml.ctx-size")
    # the failed 7168 MiB is the cache for 131072 tokens (56 KiB each): half the context, half of it
    assert r.flags == {"-c": "65536"} and r.saves_bytes == 7168 * 2**20 // 2
    assert "56.00 KiB per token" in r.why


def test_a_cache_on_another_gpu_is_not_used_to_size_the_cut() -> None:
    import oomdoctor

    log = (
        "llama_context: n_ctx         = 32768\n"
        "llama_kv_cache_unified:      CUDA1 KV buffer size =  4096.00 MiB\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1000.00 MiB on device 0: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1048576000\n"
    )
    f = only_error(oomdoctor.diagnose(log.encode(), source="<other-gpu>"))
    assert remedy(f, "ggml.ctx-size").flags == {"-c": "16384"}  # halved: CUDA1's cache says nothing of CUDA0
