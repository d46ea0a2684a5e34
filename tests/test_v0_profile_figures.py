"""vLLM 0.6.4's memory profile, printed a few lines before its max-len check fails, gives that
failure its figures: the capacity, the utilization and the KV budget the log states."""

from __future__ import annotations

import oomdoctor
from tests.corpus import FIXTURES


def test_the_profile_line_gives_the_max_len_failure_its_figures() -> None:
    report = oomdoctor.diagnose((FIXTURES / "vllm/vllm-006.log").read_bytes(), source="log")
    errors = [f for f in report.findings if f.severity == "error"]
    assert len(errors) == 1
    f = errors[0]
    # the max-len message names the failure; the profile two lines above opened it
    assert (f.rule, f.kind) == ("vllm.v0.kv-cache.max-len-exceeds", "vllm.kv-cache.max-len-exceeds")
    assert f.message.startswith("The model's max seq len (29000) is larger than")
    assert f.phase == "kv-cache-alloc"
    assert (f.location.line, f.location.end_line) == (2, 5)
    # total_gpu_memory=23.58GiB, kv_cache_size=2.89GiB, gpu_memory_utilization=0.90, # GPU blocks: 1478
    assert f.figures["total_bytes"] == 25318832210
    assert f.figures["kv_cache_available_bytes"] == 3103113871
    assert f.figures["gpu_memory_utilization"] == 0.9
    assert f.figures["num_gpu_blocks"] == 1478
    assert (f.figures["max_seq_len"], f.figures["kv_cache_tokens"]) == (29000, 23648)
    assert {"--max-model-len": "23648"} in [r.flags for r in f.remedies]


def test_the_message_alone_keeps_its_own_two_figures() -> None:
    log = ("The model's max seq len (29000) is larger than the maximum number of tokens that can be stored "
           "in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
           "when initializing the engine.\n")
    f = oomdoctor.diagnose(log).findings[0]
    assert f.rule == "vllm.v0.kv-cache.max-len-exceeds"
    assert f.figures == {"max_seq_len": 29000, "kv_cache_tokens": 23648}


def test_a_healthy_profile_gives_no_finding() -> None:
    log = ("INFO 11-15 10:00:00 worker.py:232] Memory profiling results: total_gpu_memory=79.15GiB "
           "initial_memory_usage=15.51GiB peak_torch_memory=16.36GiB memory_usage_post_profile=15.55GiB "
           "non_torch_memory=0.44GiB kv_cache_size=54.43GiB gpu_memory_utilization=0.90\n"
           "INFO 11-15 10:00:00 gpu_executor.py:113] # GPU blocks: 22982, # CPU blocks: 2048\n")
    assert oomdoctor.diagnose(log).findings == []
