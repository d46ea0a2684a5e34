"""A request exactly one of the model's weight tensors, while the process holds less than the
model's weights, places a serving engine's failure in weights-load (oomdoctor.advisor.weight_tensors)."""

from __future__ import annotations

from oomdoctor.advisor.catalog import find_model
from oomdoctor.advisor.weight_tensors import weight_tensors
from tests.engines_util import diagnose_text, only_error

_LAUNCH = (
    "$ python -u -m vllm.entrypoints.openai.api_server --host 0.0.0.0 --model mistralai/Mistral-7B-v0.1 "
    "--dtype half --gpu-memory-utilization 0.8  --max-model-len 4096\n"
)


def _oom(request: str = "224.00 MiB", total: str = "10.73 GiB", allocated: str = "9.85 GiB") -> str:
    return (f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {request} (GPU 0; {total} total "
            f"capacity; {allocated} already allocated; 46.44 MiB free; 9.86 GiB reserved in total by PyTorch)\n")


def test_mistral_7b_tensors_per_gpu() -> None:
    # config.json of mistralai/Mistral-7B-v0.1: hidden 4096, intermediate 14336, 32 heads, 8 KV heads
    # of 128, vocabulary 32000
    geo = find_model("mistralai/Mistral-7B-v0.1")
    assert geo is not None
    assert {t.name: t.bytes for t in weight_tensors(geo, 2)} == {
        "q_proj": 4096 * 4096 * 2, "k_proj/v_proj": 1024 * 4096 * 2, "qkv_proj": 6144 * 4096 * 2,
        "o_proj": 4096 * 4096 * 2, "gate_proj/up_proj": 14336 * 4096 * 2, "gate_up_proj": 234881024,
        "down_proj": 4096 * 14336 * 2, "embed_tokens/lm_head": 32000 * 4096 * 2,
    }
    # tensor parallel 2: column-parallel layers split their rows, row-parallel ones their columns
    assert {t.name: (t.rows, t.cols) for t in weight_tensors(geo, 2, tp=2)} == {
        "q_proj": (2048, 4096), "k_proj/v_proj": (512, 4096), "qkv_proj": (3072, 4096), "o_proj": (4096, 2048),
        "gate_proj/up_proj": (7168, 4096), "gate_up_proj": (14336, 4096), "down_proj": (4096, 7168),
        "embed_tokens/lm_head": (16000, 4096),
    }
    # KV heads replicated where TP exceeds them (vLLM): one head per GPU at TP 16
    assert next(t for t in weight_tensors(geo, 2, tp=16) if t.name == "k_proj/v_proj").rows == 128
    # a split that is not even names no tensor
    assert not any(t.name == "embed_tokens/lm_head" for t in weight_tensors(geo, 2, tp=3))


def test_a_request_one_weight_tensor_large_is_weights_load() -> None:
    """fresh-074: 224 MiB is Mistral-7B's merged gate_up_proj in fp16 (2 × 14336 × 4096 × 2 B), and
    the 9.85 GiB held is less than its 14.48 GB of weights: they were still loading."""
    f = only_error(diagnose_text(_LAUNCH + _oom()))
    assert f.phase == "weights-load"
    assert f.account is not None
    entry = next(e for e in f.account.entries if e.name == "weight-tensor")
    assert (entry.bytes, entry.source) == (234881024, "derived")
    assert entry.note.startswith("one gate_up_proj weight of mistralai/Mistral-7B-v0.1: 28672 × 4096 × 2 B")
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    assert f.cause.evidence[-1] == "weight-tensor 224.00 MiB (derived): " + entry.note
    # fp32 weights: the same tensor is twice the size
    f32 = only_error(diagnose_text(_LAUNCH.replace("--dtype half", "--dtype float32") + _oom("448.00 MiB")))
    assert f32.phase == "weights-load"


def test_other_sizes_and_facts_name_no_stage() -> None:
    # a size no tensor has, by a byte's worth of rounding
    assert only_error(diagnose_text(_LAUNCH + _oom("224.01 MiB"))).phase == "unknown"
    # the process already holds the weights: a 4096-token batch through gate_up_proj is 224 MiB too
    assert only_error(diagnose_text(_LAUNCH + _oom(total="22.00 GiB", allocated="13.40 GiB"))).phase == "unknown"
    # no held figure: the size alone cannot tell the weights from that activation
    bare = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 224.00 MiB\n"
    assert only_error(diagnose_text(_LAUNCH + bare)).phase == "unknown"
    # a quantized checkpoint's tensors have other shapes; a model the catalog lacks the MLP width
    # of (its entry has no intermediate_size); a plain PyTorch script (no engine loading a model)
    for launch in (_LAUNCH.replace("--dtype half", "--dtype half --quantization awq"),
                   _LAUNCH.replace("Mistral-7B-v0.1", "Mistral-7B-Instruct-v0.3"),
                   "$ python train.py --model mistralai/Mistral-7B-v0.1\n"):
        assert only_error(diagnose_text(launch + _oom())).phase == "unknown", launch
    # each pipeline stage holds half the layers, 7.24 GB, less than the 9.85 GiB held; weights
    # offloaded to the CPU leave the GPU's share unknown
    for extra in ("--pipeline-parallel-size 2", "--cpu-offload-gb 4"):
        launch = _LAUNCH.replace("--dtype half", f"--dtype half {extra}")
        assert only_error(diagnose_text(launch + _oom())).phase == "unknown", extra
    # a stage the log shows is kept
    capture = "INFO 10-01 12:00:00 model_runner.py:1234] Capturing the model for CUDA graphs. This may lead to unexpected consequences\n"
    assert only_error(diagnose_text(_LAUNCH + capture + _oom())).phase == "cudagraph-capture"
