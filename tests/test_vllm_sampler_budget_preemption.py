"""vLLM's own advice per failure shape:

- the sampler warm-up ("CUDA out of memory occurred when warming up sampler with N dummy requests.
  Please try lowering `max_num_seqs` or `gpu_memory_utilization`", v1/worker/gpu_model_runner.py
  _dummy_sampler_run, 0.10.1-0.13.0): the buffer scales with the dummy requests (max_num_seqs), so a
  --max-num-seqs sized from it leads, the utilization second;
- a KV-cache allocation with PyTorch already holding more than the assumed default budget: the run's
  utilization is not the default, so no value is computed from it (the knob in words, the delta);
- V0's preemption warning (core/scheduler.py, 0.4.3-0.10.2): the KV cache ran out of blocks, a
  throughput warning, with the message's own knobs offered.
"""

from __future__ import annotations

from oomdoctor import diagnose

_SAMPLER = (
    "ERROR 03-16 06:12:38 [multiproc_executor.py:375] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 1.74 GiB. GPU 0 has a total capacity of 15.48 GiB of which 953.94 MiB is free. Including "
    "non-PyTorch memory, this process has 14.53 GiB memory in use. Of the allocated memory 12.19 GiB is "
    "allocated by PyTorch, and 368.65 MiB is reserved by PyTorch but unallocated.\n"
    '  File "/workspace/vllm/vllm/v1/worker/gpu_model_runner.py", line 1292, in _dummy_sampler_run\n'
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
    "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.\n"
)

_KV_ALLOC = (
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2901, in '
    "_allocate_kv_cache_tensors\n"
    "    tensor = torch.zeros(\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 0 has a total capacity of "
    "23.52 GiB of which 115.69 MiB is free. Including non-PyTorch memory, this process has 23.37 GiB memory in "
    "use. Of the allocated memory 22.69 GiB is allocated by PyTorch, and 209.68 MiB is reserved by PyTorch but "
    "unallocated.\n"
)

_PREEMPT = (
    "WARNING 07-15 10:01:22 scheduler.py:1089] Sequence group 224 is preempted by PreemptionMode.RECOMPUTE mode "
    "because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption=51\n"
)


def _one(text: str):  # type: ignore[no-untyped-def]
    report = diagnose(text)
    assert len(report.findings) == 1
    return report.findings[0]


def test_sampler_warmup_leads_with_max_num_seqs_sized_from_the_buffer() -> None:
    f = _one(_SAMPLER)
    assert f.cause is not None and f.cause.id == "sampler-warmup"
    first, second = f.remedies[0], f.remedies[1]
    # 1024 × 953.94 MiB free / 1.74 GiB = 548 → the power of two at or below: 512 (half); its buffer is
    # 1.74 GiB × 512 / 1024 = 890.88 MiB, within the free memory
    assert first.id == "vllm.max-num-seqs" and first.flags == {"--max-num-seqs": "512"} and first.fits is True
    assert "890.88 MiB" in first.why and "953.94 MiB free" in first.why
    # vLLM's second knob stays second: 0.90 − 1.74 GiB / 15.48 GiB = 0.78
    assert second.id == "vllm.gpu-memory-utilization.lower"
    assert second.flags == {"--gpu-memory-utilization": "0.78"}


def test_sampler_warmup_with_little_free_memory_goes_below_half() -> None:
    text = _SAMPLER.replace("953.94 MiB is free", "300.00 MiB is free")
    f = _one(text)
    seqs = next(r for r in f.remedies if r.id == "vllm.max-num-seqs")
    # 1024 × 300 MiB / 1781.76 MiB = 172 → 128; 1.74 GiB × 128 / 1024 = 222.72 MiB
    assert seqs.flags == {"--max-num-seqs": "128"} and "222.72 MiB" in seqs.why


def test_kv_allocation_above_the_default_budget_asks_for_the_utilization() -> None:
    f = _one("vLLM API server version 0.10.1\n" + _KV_ALLOC)
    assert f.phase == "kv-cache-alloc"
    lower = next(r for r in f.remedies if r.id == "vllm.gpu-memory-utilization.lower")
    # 22.69 GiB held > 0.90 × 23.52 GiB = 21.17 GiB: no value from the default
    assert lower.flags == {} and lower.title.startswith("Lower --gpu-memory-utilization from the value this run used")
    assert "21.17 GiB" in lower.why and "1.02 GiB / 23.52 GiB = 0.05" in lower.why
    assert not any("--gpu-memory-utilization" in r.flags for r in f.remedies)


def test_kv_allocation_with_the_utilization_stated_is_computed() -> None:
    args = "INFO 05-09 16:24:00 [utils.py:326] non-default args: {'gpu_memory_utilization': 0.98}\n"
    f = _one("vLLM API server version 0.10.1\n" + args + _KV_ALLOC)
    lower = next(r for r in f.remedies if r.id == "vllm.gpu-memory-utilization.lower")
    # 0.98 − 1.02 GiB / 23.52 GiB = 0.936 → 0.93
    assert lower.flags == {"--gpu-memory-utilization": "0.93"}


def test_preemption_is_the_kv_cache_and_a_warning_with_the_message_knobs() -> None:
    f = _one(_PREEMPT)
    assert f.severity == "warning"
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert "51 so far, in recompute mode" in f.cause.summary and "not a crash" in f.cause.summary
    assert "Activations" not in f.cause.summary
    by_id = {r.id: r for r in f.remedies}
    assert by_id["vllm.gpu-memory-utilization.raise"].flags == {"--gpu-memory-utilization": "0.95"}
    assert by_id["vllm.max-num-seqs"].flags == {} and "Optional" in by_id["vllm.max-num-seqs"].why
    assert by_id["vllm.tensor-parallel-size"].flags == {}
    assert "tensor-parallel-size" in by_id["vllm.tensor-parallel-size"].title


def test_preemption_halves_the_logged_max_num_seqs() -> None:
    args = "INFO 07-15 10:00:00 [utils.py:326] non-default args: {'max_num_seqs': 256}\n"
    f = _one(args + _PREEMPT)
    seqs = next(r for r in f.remedies if r.id == "vllm.max-num-seqs")
    assert seqs.flags == {"--max-num-seqs": "128"} and "half of 256 is 128" in seqs.why


def test_preemption_inside_an_rl_rollout_gets_no_vllm_flags() -> None:
    """new-039: verl's rollout engine logs V0's preemption warning. verl configures vLLM through its own
    settings (actor_rollout_ref.rollout.*), so vLLM's CLI flags are not offered there; the cause still
    says what the warning means."""
    from tests.engines_util import diagnose

    f = diagnose("vllm/new-039.log").findings[0]
    assert f.product == "verl" and f.kind == "vllm.kv-cache.preemption" and f.severity == "warning"
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert not any(r.flags for r in f.remedies)
