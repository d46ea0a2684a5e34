"""vLLM.rs (a Rust serving engine with vLLM's flag names): its KV-cache planning failure, read from
vllm.rs 1b00e27 src/utils/kvcache_allocator.rs, and the limits it was planned for."""

from __future__ import annotations

from pathlib import Path

import oomdoctor
from tests.engines_util import diagnose_text, only_error, remedy_ids

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vllm-rs" / "fresh-047.log"

_FAILED = (
    "vllm-rs-med0  | 2026-01-20T15:24:43.340496Z ERROR vllm_rs::utils::kvcache_allocator: KVCache allocation "
    "failed: Insufficient GPU memory for KVCache allocation.\n"
    "vllm-rs-med0  | Available: 29353.63 MB, Required: 131072.00 MB, Reserved: 512.00 MB.\n"
    "vllm-rs-med0  | Tips: Try reducing --max-model-len or --max-num-seqs, or free GPU resources.\n"
)
_LAUNCH = "$ docker run --gpus all vllm-rs:latest --m Qwen/Qwen3-30B-A3B --max-model-len 262144 --max-num-seqs 2 --server\n"


def test_the_real_log_is_a_kv_plan_larger_than_the_memory_left() -> None:
    """fresh-047: 128 GiB planned for the KV cache, 28.67 GiB left after loading."""
    f = only_error(oomdoctor.diagnose(FIXTURE.read_bytes(), source=str(FIXTURE)))
    assert (f.rule, f.engine, f.product, f.phase) == ("vllm-rs.kvcache-insufficient", "vllm-rs", "vllm-rs", "kv-cache-alloc")
    assert f.figures["kv_cache_available_bytes"] == 30779511931  # 29353.63 × 1024²
    assert f.figures["kv_cache_needed_bytes"] == 137438953472  # 131072 × 1024²
    assert f.cause is not None and f.cause.id == "kv-cache-exceeds-free"
    assert f.cause.summary == "The KV cache it was asked to plan needs 128.00 GiB; only 28.67 GiB is left for it after loading."


def test_without_the_launch_line_the_limits_shrink_by_the_stated_share() -> None:
    """The two limits are not in the log: their product must drop to ⌊29353.63 / 131072 × 100⌋ = 22 %."""
    f = only_error(diagnose_text(_FAILED))
    assert remedy_ids(f) == ["vllm-rs.max-model-len", "ask.launch-facts"]
    first = f.remedies[0]
    assert first.title == "Lower --max-model-len × --max-num-seqs to 22 % of now, or leave --max-model-len out"
    assert first.flags == {} and first.confidence == "medium"
    assert "Without --max-model-len, vLLM.rs sizes both to the memory left after loading." in first.why


def test_with_the_launch_line_the_context_is_computed() -> None:
    """262144 × 29353.63 / 131072 = 58707.3 tokens, rounded down to a multiple of 256: 58624. Two
    sequences × 22 % leave none, so --max-num-seqs is not offered."""
    f = only_error(diagnose_text(_LAUNCH + _FAILED))
    assert remedy_ids(f) == ["vllm-rs.max-model-len"]
    first = f.remedies[0]
    assert first.flags == {"--max-model-len": "58624"}
    assert (first.fits, first.confidence) == (True, "high")


def test_more_sequences_than_fit_are_cut_to_what_the_memory_holds() -> None:
    """--max-num-seqs 16 at 22 %: ⌊16 × 29353.63 / 131072⌋ = 3 sequences."""
    f = only_error(diagnose_text(_LAUNCH.replace("--max-num-seqs 2", "--max-num-seqs 16") + _FAILED))
    seqs = next(r for r in f.remedies if r.id == "vllm-rs.max-num-seqs")
    assert seqs.flags == {"--max-num-seqs": "3"}


def test_vllms_own_flags_on_a_vllm_log_are_not_read_as_vllm_rs() -> None:
    f = only_error(diagnose_text(
        "vllm serve Qwen/Qwen3-8B --max-model-len 262144 --max-num-seqs 2\n"
        "ValueError: The model's max seq len (262144) is larger than the maximum number of tokens that can be "
        "stored in KV cache (58000). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.\n"
    ))
    assert f.engine == "vllm"
    assert not [r for r in f.remedies if r.id.startswith("vllm-rs.")]
