"""Failures whose own line is cut (a vLLM worker's error during CUDA-graph capture), several ranks'
OOM messages interleaved on one line, and several ranks killed together by the host's OOM killer."""

from __future__ import annotations

from oomdoctor.advisor.remedies_training import messages_of_several_ranks
from oomdoctor.fallback import role_figures
from tests.engines_util import diagnose, diagnose_text, only_error, remedy, remedy_ids

CAPTURE_V0 = (
    "(RayWorkerWrapper pid=1861983) INFO 03-27 10:29:03 [model_runner.py:1442] Capturing cudagraphs for decoding. "
    "This may lead to unexpected consequences if the model is not static.\n"
)
RAY_BUDGET = (
    "(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] the current vLLM instance "
    "can use total_gpu_memory (44.53GiB) x gpu_memory_utilization (0.98) = 43.64GiB [repeated 30x across cluster]\n"
    "(RayWorkerWrapper pid=1463574, ip=192.168.10.60) INFO 03-27 10:29:01 [worker.py:267] model weights take 20.64GiB; "
    "non_torch_memory takes 0.28GiB; PyTorch activation peak memory takes 1.52GiB; the rest of the memory reserved "
    "for KV Cache is 21.20GiB. [repeated 30x across cluster]\n"
)
CUT_ERROR = "(RayWorkerWrapper pid=206994, ip=192.168.10.25) ERROR 03-27 10:29:13 [worker_base.py:620] Error executing metho\n"


def _stand_ins(report):  # type: ignore[no-untyped-def]
    return [f for f in report.findings if f.rule == "vllm.worker-error-during-capture"]


def test_cut_worker_error_during_capture_is_a_warning_with_capture_remedies() -> None:
    [f] = _stand_ins(diagnose("vllm/vllm-029.log"))
    assert (f.kind, f.severity, f.phase) == ("vllm.worker-error-during-capture", "warning", "cudagraph-capture")
    assert remedy(f, "vllm.enforce-eager").flags == {"--enforce-eager": ""}
    # 0.98 × 44.53 GiB leaves 0.91 GiB; vLLM's own bound for graphs is 3 GiB: 1 − 3 / 44.53 = 0.9326 → 0.93
    lower = remedy(f, "vllm.gpu-memory-utilization.lower")
    assert lower.flags == {"--gpu-memory-utilization": "0.93"}
    assert "leaves 911.97 MiB" in lower.why
    assert "ask.error-line" in remedy_ids(f)


def test_ray_repeated_summary_is_no_progress_line() -> None:
    # the budget lines are Ray's late summaries of lines printed before the capture began
    report = diagnose_text(CAPTURE_V0 + RAY_BUDGET + CUT_ERROR)
    [f] = _stand_ins(report)
    assert f.phase == "cudagraph-capture"


def test_cuda_error_tail_of_workers_cut_at_initialize_cache() -> None:
    [f] = _stand_ins(diagnose("vllm/vllm-041.log"))
    assert (f.severity, f.phase, f.location.line) == ("warning", "cudagraph-capture", 10)
    assert remedy_ids(f)[0] == "vllm.enforce-eager"
    # no budget figures in the log: no utilization value is computed
    assert "vllm.gpu-memory-utilization.lower" not in remedy_ids(f)


def test_no_stand_in_outside_capture_or_beside_the_real_error() -> None:
    load = (
        "INFO 04-12 08:21:02 [model_runner.py:1110] Starting to load model meta-llama/Llama-3.1-8B-Instruct...\n"
        "(VllmWorkerProcess pid=2211) ERROR 04-12 08:21:09 [worker_base.py:620] Error executing method 'load_model'. "
        "This might cause deadlock in distributed execution.\n"
    )
    assert diagnose_text(load).findings == []
    full = (
        CAPTURE_V0
        + "(VllmWorkerProcess pid=2211) ERROR 03-27 10:29:13 [worker_base.py:620] Error executing method 'capture_model'. "
        "This might cause deadlock in distributed execution.\n"
        + "(VllmWorkerProcess pid=2211) ERROR 03-27 10:29:13 [worker_base.py:620] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 44.53 GiB of which 18.00 MiB is free.\n"
    )
    report = diagnose_text(full)
    assert _stand_ins(report) == []
    assert only_error(report).kind == "torch.cuda-oom"
    healthy = CAPTURE_V0 + "INFO 03-27 10:29:31 model_runner.py:1535] Graph capturing finished in 18 secs, took 0.51 GiB\n"
    assert diagnose_text(healthy).findings == []


def test_interleaved_ranks_count_as_several_gpus_and_keep_exact_figures() -> None:
    log = (
        "torch.cudatorch.cuda..OutOfMemoryErrorOutOfMemoryError: : CUDA out of memory. Tried to allocate 2.00 GiB "
        "(GPU 0; 79.15 GiB total capacity; 77.13 GiB already allocated; 307.31 MiB free; 78.21 GiB reserved in total "
        "by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  "
        "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONFCUDA out of memory. Tried to allocate "
        "2.00 GiB (GPU 3; 79.15 GiB total capacity; 77.13 GiB already allocated; 355.31 MiB free; 78.21 GiB reserved "
        "in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
        "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
    )
    f = only_error(diagnose_text(log))
    # GPU 0's message is whole: its figures, exactly; none of GPU 3's
    assert f.figures == {
        "requested_bytes": 2147483648,
        "gpu_index": 0,
        "total_bytes": 84986665370,
        "allocated_bytes": 82817706885,
        "free_bytes": 322237891,
        "reserved_bytes": 83977348055,
    }
    ids = remedy_ids(f)
    assert "training.shard-state" in ids
    assert "training.zero-offload" not in ids


def test_several_ranks_told_by_the_text() -> None:
    assert messages_of_several_ranks("(GPU 0; 79.15 GiB total capacity ... (GPU 3; 79.15 GiB total capacity")
    assert messages_of_several_ranks("torch.OutOfMemoryErrortorch.OutOfMemoryError: : CUDA out of memory.")
    assert not messages_of_several_ranks("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity")
    assert not messages_of_several_ranks("GPU 1 has a total capacity of 23.65 GiB of which 3.06 MiB is free. GPU 1")


def test_role_figures_name_no_gpu_when_two_are_named() -> None:
    text = "CUDA out of memory. Tried to allocate Tried to allocate 2.00 GiB2.00 GiB (GPU 0; (GPU 3; 79.15 GiB total capacity"
    assert "gpu_index" not in role_figures(text)
    assert role_figures("out of memory (GPU 2; 79.15 GiB total capacity)")["gpu_index"] == 2


def test_several_ranks_killed_by_the_host_size_swap_from_their_sum() -> None:
    f = only_error(diagnose("deepspeed/other-079.log"))
    swap = remedy(f, "host.add-swap")
    # 3 ranks × 21.89 GiB anon + (70.35 MiB file + 14.44 GiB shmem) = 80.19 GiB → 81
    assert swap.settings == {"swap size": "at least 81 GiB"}
    assert "3 ranks" in swap.why and "cannot be swapped out" in swap.why
    load = remedy(f, "host.low-cpu-mem-usage")
    assert load.settings == {"from_pretrained": "low_cpu_mem_usage=True", "use_safetensors": "True"}


def test_one_killed_process_sizes_swap_from_itself() -> None:
    log = (
        "[856341.770960] Out of memory: Killed process 410126 (python) total-vm:79905000kB, anon-rss:22957108kB, "
        "file-rss:72036kB, shmem-rss:15143164kB, UID:1000 pgtables:78032kB oom_score_adj:0\n"
    )
    f = only_error(diagnose_text(log))
    assert remedy(f, "host.add-swap").settings == {"swap size": "at least 37 GiB"}


def test_zero3_gets_no_low_cpu_mem_usage() -> None:
    log = (
        "[2025-01-01 10:00:01,000] [INFO] [config.py:1004:print]   zero_optimization_stage ...... 3\n"
        "[2025-06-02 20:51:24,182] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 410126\n"
        "[2025-06-02 20:51:24,184] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 410127\n"
        "[856341.770960] Out of memory: Killed process 410126 (python) total-vm:79905000kB, anon-rss:22957108kB, "
        "file-rss:72036kB, shmem-rss:15143164kB, UID:1000 pgtables:78032kB oom_score_adj:0\n"
    )
    f = only_error(diagnose_text(log))
    assert "host.low-cpu-mem-usage" not in remedy_ids(f)
    # 2 × 21.89 GiB + 14.51 GiB = 58.30 GiB → 59
    assert remedy(f, "host.add-swap").settings == {"swap size": "at least 59 GiB"}
