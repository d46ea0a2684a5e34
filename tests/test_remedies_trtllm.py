"""TensorRT-LLM remedies: run-time KV fraction first; build-time limits said as such."""

from __future__ import annotations

from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location
from tests.engines_util import diagnose, only_error, remedy


def test_kv_fraction_default_minus_step() -> None:
    f = only_error(diagnose("trtllm/synthetic-cuda-runtime-oom.log"))
    r = f.remedies[0]
    assert r.id == "trtllm.kv-cache-free-gpu-mem-fraction"
    assert r.flags == {"--kv_cache_free_gpu_memory_fraction": "0.80"}
    assert r.settings["KvCacheConfig.free_gpu_memory_fraction"] == "0.80"
    assert "build-time" in remedy(f, "trtllm.max-num-tokens").why


def _inp(engine: str | None, figures: dict[str, object], extra: dict[str, object]) -> AdviceInput:
    f = Finding(
        rule="torch.cuda-oom", kind="torch.cuda-oom", engine="pytorch", severity="error", title="t", message="m",
        location=Location(line=1, end_line=1), figures=figures,
    )
    return AdviceInput(f, Context(engine=engine, extra=extra))


def test_kv_fraction_from_the_missing_bytes() -> None:
    # 0.9 - 1 GiB / 10 GiB - 0.01 = 0.79
    inp = _inp("tensorrt-llm", {"requested_bytes": 2**30}, {"trtllm_available_bytes": 10 * 2**30})
    r = calculator("trtllm.kv-cache-free-gpu-mem-fraction")(inp)
    assert r is not None and r.flags == {"--kv_cache_free_gpu_memory_fraction": "0.79"}


def test_silent_outside_trtllm() -> None:
    inp = _inp("vllm", {"requested_bytes": 2**30}, {})
    for rid in ("trtllm.kv-cache-free-gpu-mem-fraction", "trtllm.max-num-tokens"):
        assert calculator(rid)(inp) is None
