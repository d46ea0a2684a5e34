"""llama.cpp / ollama: the ggml failure cascade is one finding; phase from what was allocated."""

from __future__ import annotations

import pytest

from tests.engines_util import diagnose, errors, figures, only_error


def test_corpus_weights_buffer() -> None:
    r = diagnose("llamacpp/other-001.log")
    f = only_error(r)
    assert (f.kind, f.phase, f.engine) == ("ggml.alloc-failed", "weights-load", "llama.cpp")
    assert figures(f, "requested_bytes", "buffer_bytes", "gpu_index", "buffer_type") == {
        "requested_bytes": 151851672535,
        "buffer_bytes": 151851674624,
        "gpu_index": 0,
        "buffer_type": "CUDA0",
    }


def test_corpus_ollama_compute_buffer() -> None:
    r = diagnose("ollama/other-005.log")
    f = only_error(r)
    # reserving the compute buffers while creating the context (llama_new_context_with_model):
    # start-up, kv-cache-alloc (the label says inference: tests/corpus_divergences.json)
    assert (f.kind, f.phase, f.engine) == ("ggml.alloc-failed", "kv-cache-alloc", "ollama")
    assert figures(f, "requested_bytes", "buffer_bytes") == {"requested_bytes": 4725932032, "buffer_bytes": 4725934080}
    assert r.context.max_model_len == 65536
    assert r.context.kv_cache_bytes == 8589934592


def test_corpus_ollama_weights() -> None:
    r = diagnose("ollama/other-006.log")
    f = only_error(r)
    assert (f.phase, f.engine, f.figures["requested_bytes"]) == ("weights-load", "ollama", 37259407524)


@pytest.mark.parametrize(
    "rel",
    ["llamacpp/synthetic-healthy-buffers.log", "llamacpp/other-076.log"],
)
def test_healthy_buffer_listings_give_no_error(rel: str) -> None:
    assert not errors(diagnose(rel))


def test_kv_cache_failure_phase() -> None:
    f = only_error(diagnose("llamacpp/synthetic-kv-cache-oom.log"))
    assert (f.phase, f.figures["requested_bytes"]) == ("kv-cache-alloc", 7168 * 2**20)


def test_runtime_pool_oom() -> None:
    f = only_error(diagnose("llamacpp/synthetic-runtime-cuda-error.log"))
    assert (f.rule, f.phase, f.figures) == (
        "ggml.cuda-error-oom",
        "inference",
        {"gpu_index": 0, "function": "ggml_cuda_pool_legacy::alloc"},
    )


def test_ollama_system_memory() -> None:
    f = only_error(diagnose("ollama/synthetic-system-memory.log"))
    assert f.figures == {"required_bytes": round(12.3 * 2**30), "available_bytes": round(8.1 * 2**30)}
