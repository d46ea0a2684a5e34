"""A PyTorch OOM while vLLM creates its model (the traceback ends in torch/utils/_device.py's
__torch_function__: BaseModelLoader.load_model's `with target_device:`, vllm 0.10.1) with PyTorch's
allocated memory already above gpu_memory_utilization × total: the weights exceed the budget. The
phase is weights-load (only in a vLLM log), the cause says so with the figures, the remedies are a
quantized checkpoint, tensor parallelism (worded: the GPU count is not shown) and --cpu-offload-gb
sized from allocated + requested − budget; lowering the utilization is never offered."""

from __future__ import annotations

from pathlib import Path

from oomdoctor import diagnose
from oomdoctor.advisor.vllm_weights_budget import weights_over_budget
from oomdoctor.report import Context, Finding, Location

GiB = 2**30
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vllm" / "synthetic-v1-weights-over-budget.log"

_TAIL = (
    '  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_device.py", line 104, in __torch_function__\n'
    "    return func(*args, **kwargs)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.08 GiB. GPU 0 has a total capacity of "
    "62.47 GiB of which 769.28 MiB is free. Of the allocated memory 61.41 GiB is allocated by PyTorch, and "
    "138.26 MiB is reserved by PyTorch but unallocated.\n"
)
_VLLM = "(APIServer pid=1) INFO 08-20 10:00:02 [api_server.py:1805] vLLM API server version 0.10.1\n"


def _one(text: str):  # type: ignore[no-untyped-def]
    report = diagnose(text)
    assert len(report.findings) == 1
    return report.findings[0]


def _flags(f) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    return [r.flags for r in f.remedies]


def test_fixture_phase_cause_and_offload() -> None:
    f = _one(FIXTURE.read_text())
    assert f.phase == "weights-load"
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    # 77.80 GiB allocated + 1.08 GiB requested − 0.90 × 79.19 GiB (71.27 GiB) = 7.61 GiB
    assert "77.80 GiB" in f.cause.summary and "7.61 GiB above vLLM's budget of 0.90 × 79.19 GiB = 71.27 GiB" in f.cause.summary
    ids = [r.id for r in f.remedies]
    assert ids[0] == "vllm.quantization-4bit"
    offload = next(r for r in f.remedies if r.id == "vllm.cpu-offload-gb")
    assert offload.flags == {"--cpu-offload-gb": "8"}
    # only the overage: the budget then has no room left for the KV cache, so not enough alone
    assert offload.fits is False and offload.title == "Offload at least 8 GiB of weights to CPU memory, more for the KV cache"
    tp = next(r for r in f.remedies if r.id == "vllm.tensor-parallel-size")
    assert tp.flags == {}  # the log shows no GPU count: worded
    assert not any("--gpu-memory-utilization" in fl for fl in _flags(f))


def test_default_utilization_and_the_offload_from_the_budget() -> None:
    f = _one(_VLLM + _TAIL)
    assert f.phase == "weights-load"
    # 61.41 + 1.08 − 0.90 × 62.47 (56.22) = 6.27 GiB → 7, not the request's 336.64 MiB over the free memory
    assert {"--cpu-offload-gb": "7"} in _flags(f)
    assert not any("--gpu-memory-utilization" in fl for fl in _flags(f))


def test_the_logged_utilization_sets_the_budget() -> None:
    args = "(APIServer pid=1) INFO 08-20 10:00:02 [utils.py:326] non-default args: {'gpu_memory_utilization': 0.8}\n"
    f = _one(_VLLM + args + _TAIL)
    # 61.41 + 1.08 − 0.80 × 62.47 (49.98) = 12.51 GiB → 13
    assert {"--cpu-offload-gb": "13"} in _flags(f)
    assert f.cause is not None and "0.80 × 62.47 GiB = 49.98 GiB" in f.cause.summary


def test_the_frame_is_weights_load_only_in_a_vllm_log() -> None:
    assert _one(_TAIL).phase == "unknown"  # any code under `with torch.device(...)` elsewhere


def _finding(allocated: float, phase: str = "weights-load", kind: str = "torch.cuda-oom",
             engine: str = "vllm") -> Finding:
    return Finding(
        rule="t", kind=kind, engine=engine, severity="error", phase=phase, title="t", message="m",
        location=Location(line=1, end_line=1),
        figures={"allocated_bytes": int(allocated * GiB), "requested_bytes": GiB, "total_bytes": 80 * GiB},
    )


def test_over_budget_boundary() -> None:
    ctx = Context(engine="vllm")
    # budget 0.90 × 80 GiB = 72 GiB: 71 + 1 is not above it, 71.5 + 1 is
    assert weights_over_budget(_finding(71), ctx) is None
    over = weights_over_budget(_finding(71.5), ctx)
    assert over is not None and over.over == GiB // 2 and over.budget == 72 * GiB
    assert weights_over_budget(_finding(75, phase="profiling"), ctx) is None
    assert weights_over_budget(_finding(75, kind="vllm.kv-cache.no-blocks"), ctx) is None
    # vLLM's own weights failure that carries PyTorch's figures counts too
    assert weights_over_budget(_finding(75, kind="vllm.weights.not-enough-memory"), ctx) is not None
    assert weights_over_budget(_finding(75, engine="pytorch"), Context(engine="sglang")) is None
    assert weights_over_budget(_finding(75, engine="pytorch"), ctx) is not None


# vLLM's linear.py wrapper of the same PyTorch error while it creates an unquantized weight (vllm-023's shape)
_WRAPPED = (
    "(EngineCore_DP0 pid=1) ERROR 11-05 12:19:32 [linear.py:210] Failed to create unquantized linear weights: "
    "CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 93.09 GiB of which 739.81 MiB "
    "is free. Including non-PyTorch memory, this process has 92.34 GiB memory in use. Of the allocated memory "
    "91.68 GiB is allocated by PyTorch, and 1.84 MiB is reserved by PyTorch but unallocated.\n"
)


def test_vllm_wrapped_weights_failure_is_sized_from_the_budget() -> None:
    f = _one(_WRAPPED)
    assert f.phase == "weights-load"
    # 91.68 GiB + 896 MiB − 0.90 × 93.09 GiB (83.78 GiB) = 8.77 GiB, not the 156.19 MiB request − free
    assert f.cause is not None and "8.77 GiB above vLLM's budget of 0.90 × 93.09 GiB = 83.78 GiB" in f.cause.summary
    offload = next(r for r in f.remedies if r.id == "vllm.cpu-offload-gb")
    assert offload.flags == {"--cpu-offload-gb": "9"} and offload.fits is False
    # online fp8 (version unknown: through 0.15 it creates the 16-bit weights first) is not offered
    assert not any("--quantization" in fl for fl in _flags(f))
    assert f.remedies[0].id == "vllm.quantization-4bit"


def _versioned(version: str) -> str:
    return f"(APIServer pid=1) INFO 08-20 10:00:02 [api_server.py:1805] vLLM API server version {version}\n" + _TAIL


def test_online_fp8_only_where_it_quantizes_layer_by_layer() -> None:
    # 0.10.1 and 0.15.1 create the whole model in 16 bits before quantizing: not offered
    for v in ("0.10.1", "0.15.1"):
        assert not any("--quantization" in fl for fl in _flags(_one(_versioned(v)))), v
    # 0.16.0 creates the weights on the meta device and quantizes each layer as it loads
    q = next(r for r in _one(_versioned("0.16.0")).remedies if r.id == "vllm.quantization")
    assert q.flags == {"--quantization": "fp8"} and "layer by layer (from 0.16.0)" in q.why
    # 0.31.0's fp8 refuses a 16-bit checkpoint: fp8_per_tensor is the online method
    q = next(r for r in _one(_versioned("0.31.0")).remedies if r.id == "vllm.quantization")
    assert q.flags == {"--quantization": "fp8_per_tensor"}


def test_online_fp8_helpers() -> None:
    from oomdoctor.advisor.memory_model import fp8_online_streams, fp8_online_value

    assert not fp8_online_streams(None) and not fp8_online_streams((0, 15, 1)) and fp8_online_streams((0, 16, 0))
    assert fp8_online_value((0, 30, 0)) == "fp8" and fp8_online_value((0, 31, 0)) == "fp8_per_tensor"
    assert fp8_online_value(None) == "fp8"


def test_offload_leaves_room_for_one_request() -> None:
    args = ("(APIServer pid=1) INFO 08-20 10:00:02 [utils.py:326] non-default args: "
            "{'model': 'meta-llama/Llama-3.1-70B-Instruct', 'max_model_len': 8192}\n")
    f = _one(_versioned("0.10.1").replace(_TAIL, args + _TAIL))
    offload = next(r for r in f.remedies if r.id == "vllm.cpu-offload-gb")
    # the config's 131.50 GiB of weights − the 56.22 GiB budget = 75.28 GiB, + one 8192-token request at
    # 320 KiB per token (2.50 GiB) = 77.78 GiB → 78
    assert offload.flags == {"--cpu-offload-gb": "78"} and offload.fits is None
    assert "75.28 GiB" in offload.why and "2.50 GiB" in offload.why
    # online fp8 would create the 131.50 GiB in 16 bits first: not in any plan on 0.10.1
    assert not any("--quantization" in fl for fl in _flags(f))
