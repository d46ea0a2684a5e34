"""Logs exported newest first (RunPod's console, copies of cloud log viewers): the progress line
after the failure in the file, stating an earlier time, is the step the engine had reached
(fresh-081). Chronological logs keep the latest progress line before the failure."""

from __future__ import annotations

from oomdoctor.reader import Line
from oomdoctor.scan.clock import line_time
from tests.engines_util import diagnose_text, only_error

_OOM = (
    "engine.py :190 2024-02-03 03:44:03,976 Error initializing vLLM engine: CUDA out of memory. Tried to allocate "
    "112.00 MiB. GPU 0 has a total capacty of 44.35 GiB of which 53.38 MiB is free. Process 3434 has 44.29 GiB "
    "memory in use. Of the allocated memory 43.50 GiB is allocated by PyTorch, and 291.67 MiB is reserved by "
    "PyTorch but unallocated.\n"
)
_CAPTURE = "INFO 02-03 03:43:49 model_runner.py:625] Capturing the model for CUDA graphs. This may lead to unexpected consequences if the model is not static.\n"
_BLOCKS = "INFO 02-03 03:43:48 llm_engine.py:316] # GPU blocks: 7754, # CPU blocks: 2048\n"


def test_newest_first_export_reads_the_step_from_the_earlier_stated_line_below() -> None:
    log = "2024-02-02 21:44:03.976\n[info]\n" + _OOM + "2024-02-02 21:43:49.554\n[info]\n" + _CAPTURE + _BLOCKS
    f = only_error(diagnose_text(log))
    assert f.phase == "cudagraph-capture"
    assert f.cause is not None and f.cause.id == "cudagraph-capture"


def test_an_earlier_time_hours_away_is_another_clock_not_an_earlier_step() -> None:
    """A chronological log whose loggers keep different time zones: a line below the failure that
    states a time hours earlier is not read as before it."""
    local = "INFO 02-02 21:44:05 model_runner.py:625] Capturing the model for CUDA graphs.\n"
    f = only_error(diagnose_text(_BLOCKS + _OOM + local))
    assert f.phase != "cudagraph-capture"


def test_chronological_log_keeps_the_latest_progress_line_before_the_failure() -> None:
    f = only_error(diagnose_text(_BLOCKS + _CAPTURE + _OOM))
    assert f.phase == "cudagraph-capture"


def test_line_time_reads_vllm_and_python_logging_times() -> None:
    assert line_time(Line(1, "INFO 02-03 03:43:49 model_runner.py:625] x")) == (2, 3, 3, 43, 49)
    assert line_time(Line(1, "engine.py :190 2024-02-03 03:44:03,976 Error")) == (2, 3, 3, 44, 3)
    assert line_time(Line(1, "no time here 12:00")) is None
