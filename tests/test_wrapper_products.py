"""Wrappers that embed an engine speak their own syntax: Xinference's `xinference launch` extra kwargs
(xinference 1.10.0), LangChain's `LlamaCpp(...)` fields (langchain-community 0.3.27) and vLLM-Omni's
per-stage deploy YAML (vllm-omni 0.30.0)."""

from __future__ import annotations

from tests.engines_util import diagnose, diagnose_text, only_error, remedy, remedy_ids

NO_BLOCKS = (
    "(EngineCore_DP0 pid=6804) ValueError: No available memory for the cache blocks. Try increasing"
    " `gpu_memory_utilization` when initializing the engine. See"
    " https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.\n"
)


def test_xinference_launch_takes_snake_case_kwargs() -> None:
    """vllm-009: Xinference's worker log around vLLM's KV-cache check (corpus fixture)."""
    report = diagnose("vllm/vllm-009.log")
    f = only_error(report)
    assert report.context.product == "xinference" and f.product in (None, "xinference")
    r = f.remedies[0]
    assert r.flags == {"--max_model_len": "50512"} and r.settings == {}
    assert r.code[0].where == "xinference launch" and r.code[0].text == "--max_model_len 50512"


def test_xinference_no_blocks_raises_the_launch_kwarg_and_never_offers_vllms_quantization() -> None:
    log = "2026-05-20 00:55:15,994 xinference.core.worker 155 ERROR    Failed to load model qwen2.5-instruct-0\n" + NO_BLOCKS
    f = only_error(diagnose_text(log))
    assert f.remedies[0].flags == {"--gpu_memory_utilization": "0.95"}
    assert all("--quantization" not in r.flags for r in f.remedies)  # Xinference's own launch option


def test_vllm_omni_stage_gets_its_yaml_keys() -> None:
    frame = ('  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1012, in run_engine_core\n'
             "    engine_core = StageEngineCoreProc(*args, **kwargs)\n")
    report = diagnose_text(frame + NO_BLOCKS)
    f = only_error(report)
    assert report.context.product == "vllm-omni"
    r = remedy(f, "vllm.gpu-memory-utilization.raise")
    assert r.flags == {} and r.settings == {"gpu_memory_utilization": "0.95"}
    assert r.code[0].language == "yaml" and r.code[0].text == "gpu_memory_utilization: 0.95"
    assert "stages:" in r.code[0].where


def test_langchain_llamacpp_takes_its_fields() -> None:
    frame = ('  File "/home/u/.venv/lib/python3.11/site-packages/langchain_community/llms/llamacpp.py", line 140,'
             " in validate_environment\n")
    log = (
        "llama_context: n_ctx         = 131072\n"
        "llama_context: n_ubatch      = 512\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 7168.00 MiB on device 0: cudaMalloc failed: out of memory\n"
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 7516192768\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n"
    )
    report = diagnose_text(frame + log)
    f = only_error(report)
    assert report.context.product == "langchain-llamacpp"
    r = remedy(f, "ggml.ctx-size")
    assert r.flags == {} and r.settings == {"n_ctx": "65536"}
    assert r.code[0].text == "LlamaCpp(..., n_ctx=65536)"
    # the KV cache type has no LlamaCpp field (only model_kwargs): not offered as a field
    assert "ggml.kv-cache-type" not in remedy_ids(f)
