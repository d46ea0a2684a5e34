"""Scanner behaviour the vLLM rules rely on: chunk independence, one finding per failure,
multi-line joining and phase inference."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.report import Finding, Report
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import Scanner

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm"
PACK = default_pack()


def scan(data: bytes | str, chunk: int | None = None) -> Report:
    if isinstance(data, str):
        data = data.encode("utf-8")
    scanner = Scanner(PACK, source="<test>", advise=False)
    if chunk is None:
        scanner.feed(data)
    else:
        for i in range(0, len(data), chunk):
            scanner.feed(data[i : i + chunk])
    return scanner.close()


def summary(f: Finding) -> tuple:
    return (f.rule, f.kind, f.severity, f.phase, f.occurrences, tuple(f.ranks), f.location.line, sorted(f.figures.items(), key=str))


def only(report: Report) -> Finding:
    assert len(report.findings) == 1, [f.rule for f in report.findings]
    return report.findings[0]


# -- chunk independence ------------------------------------------------------------------------


@pytest.mark.parametrize("log", sorted(FIXTURES.glob("*.log")), ids=lambda p: p.stem)
@pytest.mark.parametrize("chunk", [1, 7, 113, 4096])
def test_findings_do_not_depend_on_chunking(log: Path, chunk: int) -> None:
    data = log.read_bytes()
    whole = [summary(f) for f in scan(data).findings]
    assert [summary(f) for f in scan(data, chunk).findings] == whole


def test_whole_reports_of_long_logs_do_not_depend_on_chunking() -> None:
    """Every fixture end to end: failures told again hundreds of lines later, after other ones.
    The whole report (end lines, merged figures) is the same however the bytes arrive."""
    data = b"".join(p.read_bytes() for p in sorted(FIXTURES.parent.glob("**/*.log")))
    whole = scan(data).model_dump_json()
    for chunk in (4096, 65536):
        assert scan(data, chunk).model_dump_json() == whole, chunk


def test_chunking_keeps_context() -> None:
    data = (FIXTURES / "synthetic-v1-healthy-start.log").read_bytes()
    assert scan(data, 5).context == scan(data).context


# -- one finding per failure -------------------------------------------------------------------


def test_two_workers_and_the_engine_core_quote_are_one_failure() -> None:
    f = only(scan((FIXTURES / "synthetic-v1-worker-failed-profiling.log").read_bytes()))
    assert f.kind == "torch.cuda-oom"
    assert f.occurrences == 2  # Worker_TP0 and Worker_TP1; the engine core's quote is a retelling
    assert f.ranks == ["Worker_TP0 pid=300", "Worker_TP1 pid=301"]
    assert f.figures["gpu_index"] == 0 and f.figures["requested_bytes"] == 16 * 2**30


def test_vllm_message_over_the_pytorch_oom_names_the_failure() -> None:
    f = only(scan((FIXTURES / "synthetic-v1-failed-to-load-model.log").read_bytes()))
    assert (f.rule, f.kind, f.phase, f.occurrences) == (
        "vllm.v1.weights.failed-to-load", "vllm.weights.not-enough-memory", "weights-load", 1
    )
    assert f.figures["requested_bytes"] == 2104533975


def test_chained_warmup_oom_takes_the_vllm_rule_and_keeps_pytorch_figures() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 2890, in _dummy_sampler_run\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.86 GiB. GPU 0 has a total capacity of 23.55 GiB of which 1.23 GiB is free.\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try lowering `max_num_seqs`.\n"
    )
    f = only(scan(log))
    assert (f.rule, f.kind, f.phase) == ("vllm.v1.warmup.sampler-oom", "torch.cuda-oom", "warmup")
    assert f.figures["num_dummy_requests"] == 256
    assert f.figures["requested_bytes"] == 1997159793


def test_different_failures_of_one_process_stay_apart() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} GiB. GPU 0 has a total capacity of 23.55 GiB of which 0.10 GiB is free.\n"
    log = oom.format("2.00") + "Traceback (most recent call last):\n" + oom.format("4.00")
    report = scan(log)
    assert [f.figures["requested_bytes"] for f in report.findings] == [2 * 2**30, 4 * 2**30]


def test_repeated_warning_is_one_finding_with_latest_figures() -> None:
    f = only(scan((FIXTURES / "synthetic-v0-preemption-warnings.log").read_bytes()))
    assert (f.rule, f.severity, f.occurrences) == ("vllm.v0.kv-cache.preemption", "warning", 2)
    assert f.figures["preemptions"] == 51


def test_no_blocks_evidence_and_error_are_one_finding() -> None:
    f = only(scan((FIXTURES / "vllm-016.log").read_bytes() + b"[rank0]: ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"))
    assert f.rule == "vllm.kv-cache.no-blocks"
    assert f.figures["kv_cache_available_bytes"] == -1127428915
    assert f.figures["num_gpu_blocks"] == 0


# -- multi-line joining ------------------------------------------------------------------------


def test_budget_lines_are_read_as_one_message() -> None:
    f = only(scan((FIXTURES / "vllm-016.log").read_bytes()))
    assert f.rule == "vllm.v0.kv-cache.budget-exhausted"
    assert (f.figures["total_bytes"], f.figures["gpu_memory_utilization"], f.figures["max_seq_len"]) == (8 * 2**30, 0.7, 4096)
    assert (f.location.line, f.location.end_line) == (3, 5)  # the budget lines and the zero-block line


def test_message_wrapped_at_a_space_keeps_the_estimate() -> None:
    log = (
        "ValueError: To serve at least one request with the models's max seq len (202752), (71.16 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (28.57 GiB). Based on the available memory,\n"
        "the estimated maximum model length is 81392. Try increasing `gpu_memory_utilization`.\n"
    )
    f = only(scan(log))
    assert f.figures["estimated_max_model_len"] == 81392


def test_window_stays_within_one_rank() -> None:
    log = (
        "(Worker_TP0 pid=1) INFO 01-01 00:00:00 [worker.py:1] the current vLLM instance can use total_gpu_memory (8.00GiB) x gpu_memory_utilization (0.70) = 5.60GiB\n"
        "(Worker_TP1 pid=2) INFO 01-01 00:00:00 [worker.py:1] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.\n"
    )
    assert scan(log).findings == []



def test_a_ranked_message_wrapped_by_a_terminal_keeps_its_figures() -> None:
    """The terminal wraps "[rank0]: torch.OutOfMemoryError: ..." into pieces without the prefix;
    they continue rank 0's message. A bare line after another rank's line does not."""
    message = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 2.04 GiB is free. Including non-PyTorch memory, this process has 77.10 GiB memory in "
        "use. Of the allocated memory 72.55 GiB is allocated by PyTorch, and 3.80 GiB is reserved by PyTorch but "
        "unallocated."
    )
    whole = only(scan(f"[rank0]: {message}\n"))
    line = f"[rank0]: {message}"
    wrapped = "\n".join(line[i : i + 100] for i in range(0, len(line), 100)) + "\n"
    assert wrapped.count("\n") == 4
    f = only(scan(wrapped))
    assert f.figures == whole.figures
    assert f.figures["allocated_bytes"] == round(72.55 * 2**30)
    assert (f.location.line, f.location.end_line) == (1, 4)
    # rank 1 speaks in between: the bare piece after its line is not rank 0's
    pieces = wrapped.splitlines(keepends=True)
    interleaved = "".join([pieces[0], "[rank1]: step 12\n", *pieces[1:]])
    assert "allocated_bytes" not in only(scan(interleaved)).figures



def test_a_wrap_after_a_blank_and_one_inside_a_word_are_both_undone() -> None:
    """vLLM's message wrapped at 120 columns: one boundary falls after a blank the terminal
    kept ("the models's " / "max seq len"), another inside a word ("Bas" / "ed on"). Joined
    with newlines, the second is broken; joined with nothing, the first; the blank the reader
    trimmed off the first piece tells them apart."""
    line = (
        "(EngineCore_DP0 pid=379) ERROR 01-28 00:18:18 [core.py:935] ValueError: To serve at least one request with "
        "the models's max seq len (202752), (71.16 GiB KV cache is needed, which is larger than the available KV "
        "cache memory (28.57 GiB). Based on the available memory, the estimated maximum model length is 81392. Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )
    wrapped = "\n".join(line[i : i + 120] for i in range(0, len(line), 120)) + "\n"
    assert "models's \nmax seq len" in wrapped and "Bas\ned on" in wrapped
    whole = only(scan(line + "\n"))
    f = only(scan(wrapped))
    assert f.figures == whole.figures
    assert (f.figures["max_seq_len"], f.figures["estimated_max_model_len"]) == (202752, 81392)



def test_the_reading_with_more_figures_wins_counting_the_rules_extracts() -> None:
    """SGLang's rule matches its first line only and reads the total with an extract; wrapped
    inside "79.10", only the reading joined with nothing gives that figure."""
    line = (
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
        "capacity of 79.10 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 78.58 GiB "
        "memory in use."
    )
    wrapped = line[:120] + "\n" + line[120:] + "\n"
    assert "79.1\n0 GiB" in wrapped
    f = only(scan(wrapped))
    assert f.figures == only(scan(line + "\n")).figures
    assert f.figures["total_bytes"] == round(79.10 * 2**30)


# -- phase inference ---------------------------------------------------------------------------


def test_jupyter_frames_give_the_phase() -> None:
    assert only(scan((FIXTURES / "vllm-027.log").read_bytes())).phase == "kv-cache-alloc"


def test_frames_beat_the_method_marker() -> None:
    # "while processing method initialize_cache" (kv-cache-alloc) around frames of capture_model
    assert only(scan((FIXTURES / "synthetic-v0-worker-capture-oom.log").read_bytes())).phase == "cudagraph-capture"


def test_traceback_header_after_the_failure_does_not_hide_the_frames_before_it() -> None:
    log = (
        "(EngineCore pid=7) ERROR 05-05 07:35:19 [core.py:1136]   File \"/x/vllm/model_executor/layers/quantization/gptq_marlin.py\", line 300, in process_weights_after_loading\n"
        "(EngineCore pid=7) ERROR 05-05 07:35:19 [core.py:1136] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 1.00 MiB is free.\n"
        "(EngineCore pid=7) Traceback (most recent call last):\n"
        "(EngineCore pid=7)   File \"/usr/lib/python3.12/multiprocessing/process.py\", line 314, in _bootstrap\n"
    )
    assert only(scan(log)).phase == "weights-load"


@pytest.mark.parametrize(
    ("before", "phase"),
    [
        ("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading took 14.99 GiB and 4.1 seconds\n", "profiling"),
        ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  40%|████      | 27/67 [00:02<00:03, 12.4it/s]\n", "cudagraph-capture"),
        ("INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 229,344 tokens\n", "inference"),
        ("$ vllm serve Qwen/Qwen3-8B --max-model-len 32768\n", "inference"),
        ("INFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model Qwen/Qwen3-8B...\n", "weights-load"),
        ("", "unknown"),
    ],
)
def test_latest_progress_line_gives_the_phase(before: str, phase: str) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 1.00 MiB is free.\n"
    assert only(scan(before + oom)).phase == phase


def test_later_progress_line_overrides_the_launch_command() -> None:
    log = (
        "$ vllm serve Qwen/Qwen3-8B\n"
        "INFO 01-01 00:00:00 [gpu_model_runner.py:1] Starting to load model Qwen/Qwen3-8B...\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 1.00 MiB is free.\n"
    )
    assert only(scan(log)).phase == "weights-load"


# -- healthy starts ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["synthetic-v1-healthy-start", "vllm-052", "vllm-056", "vllm-057"])
def test_healthy_start_has_no_error(name: str) -> None:
    report = scan((FIXTURES / f"{name}.log").read_bytes())
    assert [f.rule for f in report.findings if f.severity == "error"] == []


def test_method_named_just_before_the_traceback_gives_the_phase() -> None:
    p = "(VllmWorkerProcess pid=521) ERROR 12-01 10:00:00 multiproc_worker_utils.py:240] "
    log = (
        p + "Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks.\n"
        + p + "Traceback (most recent call last):\n"
        + p + '  File "/x/torch/nn/modules/module.py", line 1562, in _call_impl\n'
        + p + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of 23.55 GiB of which 1.00 MiB is free.\n"
    )
    assert only(scan(log)).phase == "profiling"


def test_a_marker_long_before_the_traceback_does_not_count() -> None:
    p = "(VllmWorkerProcess pid=521) ERROR 12-01 10:00:00 multiproc_worker_utils.py:240] "
    log = (
        p + "Exception in worker VllmWorkerProcess while processing method load_model.\n"
        + "".join(p + f"INFO line {i}\n" for i in range(6))
        + p + "Traceback (most recent call last):\n"
        + p + '  File "/x/torch/nn/modules/module.py", line 1562, in _call_impl\n'
        + p + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of 23.55 GiB of which 1.00 MiB is free.\n"
    )
    assert only(scan(log)).phase == "unknown"


def test_a_vllm_process_prefix_names_the_engine() -> None:
    """`(VllmWorkerProcess pid=N)`, `(EngineCore_DP0 pid=N)`, `(Worker_TP1 pid=N)` are vLLM's own prefixes."""
    import oomdoctor

    oom = (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total "
        "capacity; 14.56 GiB already allocated; 3.44 MiB free; 14.63 GiB reserved in total by PyTorch)\n"
    )
    for prefix in ("(VllmWorkerProcess pid=123) ", "(EngineCore_DP0 pid=7) ", "(Worker_TP1 pid=9) "):
        report = oomdoctor.diagnose("vllm-1  | \x1b[1;36m" + prefix + "\x1b[0;0mERROR 06-28 23:40:03 w.py:1] " + oom)
        assert report.context.engine == "vllm", prefix
        assert report.findings[0].engine == "vllm", prefix
    plain = oomdoctor.diagnose("(Worker pid=9) " + oom)
    assert plain.context.engine is None, "a bare (Worker pid=N) is not proof of vLLM"
