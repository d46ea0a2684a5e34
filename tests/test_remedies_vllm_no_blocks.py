"""vLLM's "No available memory for the cache blocks": the message's own advice first, then the knobs
that shrink the profile run's activation peak, other processes, and more GPUs, ranked by cost and
sized only where the log gives a value (research vllm-memory-model.md §1.1, §2.3)."""

from __future__ import annotations

from tests.engines_util import diagnose_text, only_error, remedy, remedy_ids

V1 = (
    "(EngineCore_DP0 pid=223840) ERROR 10-25 13:08:43 [core.py:708] ValueError: No available memory for the cache"
    " blocks. Try increasing `gpu_memory_utilization` when initializing the engine. See"
    " https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.\n"
)
V0_CONFIG = (
    "INFO 04-27 10:11:03 llm_engine.py:70] Initializing an LLM engine with config: model='Qwen/Qwen-7B',"
    " tokenizer='Qwen/Qwen-7B', tokenizer_mode=auto, revision=None, trust_remote_code=True, dtype=torch.bfloat16,"
    " max_seq_len=8192, download_dir=None, load_format=auto, tensor_parallel_size=1, seed=0)\n"
)
V0_ERROR = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"


def test_the_messages_own_advice_leads_then_the_profile_knobs_worded() -> None:
    f = only_error(diagnose_text(V1))
    # (V1: the profile batch is max_num_batched_tokens whatever the length, so no --max-model-len; and
    # other processes fail V1's start-up check instead, so no look at them)
    # (nor more GPUs: the log shows one, or none counted)
    assert remedy_ids(f) == ["vllm.gpu-memory-utilization.raise", "vllm.max-num-batched-tokens"]
    assert f.remedies[0].flags == {"--gpu-memory-utilization": "0.95"}
    # the log sizes none of the others: no flag carries a made-up value
    assert all(not r.flags and not r.settings for r in f.remedies[1:])
    assert f.remedies[1].title == "Lower --max-num-batched-tokens (the profile run's batch)"


def test_a_stated_context_length_is_halved() -> None:
    f = only_error(diagnose_text(V0_CONFIG + V0_ERROR))
    r = remedy(f, "vllm.max-model-len")
    assert r.flags == {"--max-model-len": "4096"}  # 8192 // 2, rounded down to 256
    assert "max(max_model_len, 2048)" in r.why and "half of 8192" in r.why


def test_the_cudagraph_estimate_case_keeps_its_own_list() -> None:
    """With the graph estimate eating the budget (cause cudagraph-capture) the context length is not a knob."""
    log = "INFO 08-19 05:56:57 [gpu_model_runner.py:6936] Estimated CUDA graph memory: 118.65 GiB total\n" + V1
    f = only_error(diagnose_text(log))
    assert f.cause is not None and f.cause.id == "cudagraph-capture"
    assert "vllm.max-model-len" not in remedy_ids(f) and "vllm.max-num-batched-tokens" not in remedy_ids(f)


def test_v0_without_chunked_prefill_never_lowers_the_budget_below_the_length() -> None:
    """V0's SchedulerConfig refuses max_num_batched_tokens below max_model_len without chunked
    prefill: the length is the knob (halved), the batched-token budget is not offered below it."""
    f = only_error(diagnose_text(V0_CONFIG + V0_ERROR))
    assert "vllm.max-num-batched-tokens" not in remedy_ids(f)
    assert remedy(f, "vllm.max-model-len").flags == {"--max-model-len": "4096"}


def test_v0_no_blocks_looks_at_other_processes() -> None:
    """V0 profiles every process's memory into its peak: other processes shrink its KV budget."""
    f = only_error(diagnose_text(V0_CONFIG + V0_ERROR))
    assert remedy(f, "gpu.free-other-processes").run[0].command.startswith("nvidia-smi --query-compute-apps")
