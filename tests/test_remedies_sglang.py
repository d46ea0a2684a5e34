"""SGLang remedies: values computed from the log's figures, and silence outside SGLang logs."""

from __future__ import annotations

import oomdoctor
from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location
from tests.engines_util import diagnose, diagnose_text, only_error, remedy, remedy_ids


def test_raise_fraction_from_a_too_low_value() -> None:
    r = remedy(only_error(diagnose("sglang/other-021.log")), "sglang.mem-fraction-static.raise")
    assert r.flags == {"--mem-fraction-static": "0.88"}


def test_raise_fraction_from_the_weights_share() -> None:
    # 1 - 17.54/78.68 = 0.7771 minimum, + 0.05 for the KV pool = 0.8271 -> 0.83
    f = only_error(diagnose("sglang/synthetic-not-enough-memory.log"))
    assert f.remedies[0].id == "sglang.mem-fraction-static.raise"
    assert f.remedies[0].flags == {"--mem-fraction-static": "0.83"}


def test_cuda_graph_failure_lowers_fraction_and_max_bs() -> None:
    f = only_error(diagnose("sglang/synthetic-cuda-graph-oom.log"))
    assert remedy(f, "sglang.mem-fraction-static.lower").flags == {"--mem-fraction-static": "0.85"}
    assert remedy(f, "sglang.cuda-graph-max-bs").flags == {"--cuda-graph-max-bs": "80"}
    assert remedy(f, "sglang.disable-cuda-graph").flags == {"--disable-cuda-graph": ""}


def test_prefill_chunk_fits_the_available_tokens() -> None:
    f = only_error(diagnose("sglang/synthetic-prefill-oom.log"))
    # min(8192 // 2, 3000) rounded down to 64 = 2944; 256 // 2 running requests
    assert remedy(f, "sglang.chunked-prefill-size").flags == {"--chunked-prefill-size": "2944"}
    assert remedy(f, "sglang.max-running-requests").flags == {"--max-running-requests": "128"}


def _torch_finding(engine_ctx: str | None) -> AdviceInput:
    f = Finding(
        rule="torch.cuda-oom", kind="torch.cuda-oom", engine="pytorch", severity="error", title="t",
        message="m", location=Location(line=1, end_line=1), figures={"requested_bytes": 2**30},
    )
    return AdviceInput(f, Context(engine=engine_ctx, launch_args={"mem_fraction_static": "0.9"}))


def test_sglang_remedies_answer_only_for_sglang_logs() -> None:
    assert calculator("sglang.mem-fraction-static.lower")(_torch_finding("vllm")) is None
    got = calculator("sglang.mem-fraction-static.lower")(_torch_finding("sglang"))
    assert got is not None and got.flags == {"--mem-fraction-static": "0.85"}


# -- CUDA-graph capture: SGLang's own order (cuda_graph_runner.py 0.4.6-0.5.3 "Possible solutions") --

_CAPTURE_FAILED = (
    "[2025-06-01 10:00:31 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 260, in __init__\n'
    "    self.capture()\n"
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity"
    " of 79.10 GiB of which 512.00 MiB is free.\n"
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
)


def test_capture_failure_ranks_disable_cuda_graph_last() -> None:
    """--disable-cuda-graph 'fits' (no graphs, nothing captured) yet comes after the cheaper two."""
    f = only_error(diagnose("sglang/synthetic-cuda-graph-oom.log"))
    ids = remedy_ids(f)
    assert ids[:3] == ["sglang.mem-fraction-static.lower", "sglang.cuda-graph-max-bs", "sglang.disable-cuda-graph"]
    assert f.remedies[0].flags == {"--mem-fraction-static": "0.85"}  # 0.9 - 0.05
    assert f.remedies[2].fits is True


def test_capture_failure_from_the_runs_values() -> None:
    log = ("[2025-06-01 10:00:00] server_args=ServerArgs(model_path='m', mem_fraction_static=0.88, "
           "cuda_graph_max_bs=160, tp_size=1)\n") + _CAPTURE_FAILED
    f = only_error(diagnose_text(log))
    assert [(r.id, r.flags) for r in f.remedies[:3]] == [
        ("sglang.mem-fraction-static.lower", {"--mem-fraction-static": "0.83"}),
        ("sglang.cuda-graph-max-bs", {"--cuda-graph-max-bs": "80"}),
        ("sglang.disable-cuda-graph", {"--disable-cuda-graph": ""}),
    ]


def _capture_failed(version: str) -> Finding:
    return only_error(oomdoctor.diagnose(_CAPTURE_FAILED.encode(), source="<test>", hints={"version": version}))


def test_capture_failure_without_settings_halves_the_releases_default() -> None:
    """No fraction, no max bs in the log: the fraction worded (SGLang's first advice), the max batch
    size from the release's default for the 79.10 GiB GPU at TP 1, halved."""
    f = _capture_failed("0.4.9")  # 0.4.8-0.5.2 above 35 GiB: up to 160
    assert remedy_ids(f)[:3] == ["sglang.mem-fraction-static.lower", "sglang.cuda-graph-max-bs",
                                 "sglang.disable-cuda-graph"]
    assert f.remedies[0].flags == {} and f.remedies[0].title == "Lower --mem-fraction-static by 0.05"
    assert remedy(f, "sglang.cuda-graph-max-bs").flags == {"--cuda-graph-max-bs": "80"}
    assert "SGLang 0.4.9 captures graphs up to batch size 160" in remedy(f, "sglang.cuda-graph-max-bs").why
    # 0.5.3: 256 at TP < 4 between 60 and 160 GiB (server_args.py _handle_gpu_memory_settings)
    assert remedy(_capture_failed("0.5.3"), "sglang.cuda-graph-max-bs").flags == {"--cuda-graph-max-bs": "128"}
    # no release: no default to halve, and no value made up
    bare = only_error(oomdoctor.diagnose(_CAPTURE_FAILED.encode(), source="<t>"))
    assert "sglang.cuda-graph-max-bs" not in remedy_ids(bare)


def test_release_defaults_of_cuda_graph_max_bs() -> None:
    from oomdoctor.advisor.sglang_fit import release_cuda_graph_max_bs as d

    assert d((0, 4, 0), 24_000, 1) == 8 and d((0, 4, 0), 81_000, 1) == 160
    assert d((0, 4, 6), 24_000, 4) == 80 and d((0, 4, 6), 140_000, 1) == 256
    assert d((0, 4, 7), 183_000, 1) == 512 and d((0, 4, 8), 30 * 1024, 1) == 8
    assert d((0, 5, 2), 95 * 1024, 1) == 256 and d((0, 5, 3), 40 * 1024, 1) == 32
    assert d((0, 4, 3), 81_000, 1) is None and d(None, 81_000, 1) is None


# -- retraction: a warning the scheduler corrects (scheduler.py update_running_batch) --------------

_RETRACT = ("[2025-10-01 10:00:00] server_args=ServerArgs(model_path='m', mem_fraction_static=0.85, tp_size=1)\n"
            "[2025-10-01 10:05:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 5, "
            "#aborted_retracted_reqs: 0, #new_token_ratio: 0.4000 -> 0.6000\n")


def test_retraction_is_explained_as_the_scheduler_correcting_itself() -> None:
    (f,) = diagnose_text(_RETRACT).findings
    assert f.severity == "warning" and f.figures["retracted_requests"] == 5
    assert f.cause is not None and f.cause.summary.startswith(
        "The KV pool filled up while decoding: SGLang's scheduler put running requests back in the waiting queue (#retracted_reqs: 5) "
        "and raised new_token_ratio from 0.40 to 0.60")
    assert "nothing left" not in f.cause.summary.lower()
    assert remedy(f, "sglang.schedule-conservativeness").flags == {"--schedule-conservativeness": "1.3"}
    assert remedy(f, "sglang.mem-fraction-static.raise").flags == {"--mem-fraction-static": "0.90"}
    assert "sglang.chunked-prefill-size" not in remedy_ids(f)


def test_retraction_without_settings_words_the_fraction() -> None:
    (f,) = diagnose_text(_RETRACT.splitlines()[1]).findings
    assert remedy(f, "sglang.schedule-conservativeness").why.endswith("1.0 (its default) + 0.3 = 1.3.")
    r = remedy(f, "sglang.mem-fraction-static.raise")
    assert r.flags == {} and r.title == "Optionally raise --mem-fraction-static by 0.05"
