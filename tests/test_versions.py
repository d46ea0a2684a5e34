"""The engine's version is the version of the engine the log is found to be, wherever it is printed.

Each context rule's own examples (tests/test_context_rules.py) show one line -> engine + version;
these show how the lines combine: a package list pasted with a log names versions of several
packages, and only the log's engine's version is the report's ``engine_version``.
"""

from __future__ import annotations

import oomdoctor

SGLANG_OOM = (
    "[2025-02-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1796, in run_scheduler_process\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
    "of which 1.06 GiB is free.\n"
)

VLLM_OOM = (
    "INFO 10-17 10:00:00 api_server.py:528] vLLM API server version 0.6.3.post1\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
    "of which 1.06 GiB is free.\n"
)


def _context(text: str) -> oomdoctor.report.Context:
    return oomdoctor.diagnose(text.encode()).context


def test_a_dependency_in_sglangs_environment_check_does_not_become_the_engine_or_its_version() -> None:
    ctx = _context(SGLANG_OOM + "sglang: 0.4.3.post2\nvllm: 0.7.2\nPyTorch: 2.5.1+cu124\n")
    assert (ctx.engine, ctx.engine_version) == ("sglang", "0.4.3.post2")
    assert ctx.extra["torch_version"] == "2.5.1+cu124"


def test_a_listed_version_of_another_engine_is_not_the_logs_engine_version() -> None:
    ctx = _context(SGLANG_OOM + "vllm==0.7.2\n")
    assert ctx.engine == "sglang"
    assert ctx.engine_version is None


def test_the_banner_and_the_package_list_agree_on_the_engine() -> None:
    ctx = _context(VLLM_OOM + "[pip3] torch==2.4.0\n[pip3] vllm==0.6.3.post1\n")
    assert (ctx.engine, ctx.engine_version, ctx.extra["torch_version"]) == ("vllm", "0.6.3.post1", "2.4.0")


def test_a_package_list_alone_names_the_engine() -> None:
    ctx = _context("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\nvllm                0.5.4\n")
    assert (ctx.engine, ctx.engine_version) == ("vllm", "0.5.4")


def test_a_version_behind_a_cloud_prefix_is_read() -> None:
    log = "".join(
        f"2024-05-01T10:00:00.123000+00:00 ecs/vllm/1a2b3c4d {line}\n" for line in VLLM_OOM.splitlines()
    )
    ctx = _context(log)
    assert (ctx.engine, ctx.engine_version) == ("vllm", "0.6.3.post1")


def test_llamacpp_build_number_is_its_engine_version() -> None:
    # llama.cpp's flag data is sampled by release build (b3889 ... ), so the build its banner prints is
    # the version the flag gate reads
    log = (
        "build: 3542 (1e6f6554) with cc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0 for x86_64-linux-gnu\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMalloc failed: out of memory\n"
    )
    ctx = _context(log)
    assert (ctx.engine, ctx.engine_version) == ("llama.cpp", "3542")
    assert "llamacpp_build" not in ctx.extra
