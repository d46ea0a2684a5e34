"""The same failure told again (same rule, same figures) is one finding within a run of the
program; after a restart banner, or further on than ``SAME_RUN_LINES``, it is the program failing
again: another finding."""

from __future__ import annotations

from oomdoctor.report import Report
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import SAME_RUN_LINES, Scanner

PACK = default_pack()
ABORT = (
    "CUDA error: out of memory\n"
    "  current device: 0, in function ggml_cuda_pool_legacy::alloc at /app/ggml/src/ggml-cuda/ggml-cuda.cu:389\n"
    "  cudaMalloc((void **) &ptr, look_ahead_size)\n"
    "/app/ggml/src/ggml-cuda/ggml-cuda.cu:75: CUDA error\n"
)
SERVED = "srv  log_server_r: request: POST /v1/chat/completions 10.0.0.237 200\n"
VLLM_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free.\n"
)


def scan(text: str) -> Report:
    scanner = Scanner(PACK, source="<test>", advise=False)
    scanner.feed(text.encode())
    return scanner.close()


def told(report: Report) -> list[tuple[str, int, int]]:
    return [(f.rule, f.location.line, f.occurrences) for f in report.findings]


def test_a_llamacpp_abort_after_a_long_gap_is_another_failure() -> None:
    gap = SAME_RUN_LINES + 10
    report = scan(ABORT + SERVED * gap + ABORT)
    assert told(report) == [("ggml.cuda-error-oom", 1, 1), ("ggml.cuda-error-oom", gap + 5, 1)]


def test_the_same_abort_again_within_a_run_is_one_finding_that_happened_twice() -> None:
    gap = 1000
    report = scan(ABORT + SERVED * gap + ABORT)
    assert told(report) == [("ggml.cuda-error-oom", 1, 2)]


def test_a_start_up_banner_separates_runs() -> None:
    banner = "INFO 08-19 00:00:01 [api_server.py:1]  vLLM API server version 0.9.1\n"
    filler = "INFO:     10.0.0.1:5000 - \"POST /v1/completions HTTP/1.1\" 200 OK\n" * 600
    assert told(scan(VLLM_OOM + filler + VLLM_OOM)) == [("torch.cuda-oom", 1, 2)]
    report = scan(VLLM_OOM + filler + banner + VLLM_OOM)
    assert told(report) == [("torch.cuda-oom", 1, 1), ("torch.cuda-oom", 603, 1)]
