"""TensorRT-LLM: detection (so a PyTorch OOM inside it is named after it) and its own wordings."""

from __future__ import annotations

from tests.engines_util import diagnose, diagnose_text, only_error


def test_cuda_runtime_oom() -> None:
    r = diagnose("trtllm/synthetic-cuda-runtime-oom.log")
    f = only_error(r)
    assert (f.rule, f.kind, f.engine, f.figures) == (
        "trtllm.cuda-runtime-oom", "trtllm.oom", "tensorrt-llm", {"call": "::cudaMallocAsync"},
    )
    assert r.context.engine == "tensorrt-llm"
    assert r.context.gpu_total_bytes == round(79.10 * 2**30)
    assert r.context.kv_cache_tokens == 129280


def test_torch_oom_inside_trtllm_is_named_after_trtllm() -> None:
    f = only_error(diagnose("trtllm/synthetic-torch-oom-in-trtllm.log"))
    assert (f.kind, f.engine, f.phase) == ("torch.cuda-oom", "tensorrt-llm", "inference")


def test_tensorrt_wordings() -> None:
    f = only_error(diagnose_text(
        "[TRT] [W] Requested amount of GPU memory (17179869184 bytes) could not be allocated. "
        "There may not be enough free memory for allocation to succeed.\n"
    ))
    assert (f.kind, f.figures) == ("trtllm.oom", {"requested_bytes": 17179869184})
