"""A run without an out-of-memory failure is an answer too (issue 37): what the log shows of the
memory (weights, KV cache size and tokens, full-length requests at once, headroom) and a warning when
the headroom is thin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"


def _text(path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["--lang", "en", "--plain", str(path)]) == 0
    return capsys.readouterr().out


def test_a_healthy_vllm_start(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _text(FIX / "vllm" / "synthetic-v1-healthy-start.log", capsys, monkeypatch) == (
        "What the log shows:\n"
        "  weights          15.27 GiB\n"
        "  KV cache         53.42 GiB (389008 tokens)\n"
        "  max concurrency  11.87 requests of 32768 tokens at once\n"
        "\n"
        "oomdoctor: no out-of-memory failure found.\n"
    )


def test_thin_headroom_outside_the_budget_is_a_warning(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # (the worker's error cut during capture is a warning finding above the summary)
    out = _text(FIX / "vllm" / "vllm-029.log", capsys, monkeypatch)
    assert out.endswith(
        "What the log shows:\n"
        "  weights   20.64 GiB\n"
        "  KV cache  21.20 GiB\n"
        "  headroom  911.97 MiB outside the engine's budget (44.53 GiB × (1 − 0.98))\n"
        "  Warning: only 911.97 MiB of the GPU is left outside the engine's budget: another process on this\n"
        "    GPU, or a larger CUDA-graph capture, may not fit\n"
        "\n"
        "oomdoctor: no out-of-memory failure; 1 memory warning.\n"
    )


def test_a_kv_cache_for_fewer_than_two_full_requests_is_a_warning(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = _text(FIX / "vllm" / "new-033.log", capsys, monkeypatch)
    assert "  max concurrency  1.3 requests of 32768 tokens at once\n" in out
    assert ("  Warning: the KV cache holds 1.3 requests of full length (32768 tokens) at once: a second long\n"
            "    request waits or is preempted\n") in out


def test_concurrency_is_computed_where_the_log_does_not_state_it(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    out = _text(FIX / "sglang" / "synthetic-healthy-startup.log", capsys, monkeypatch)
    assert "  max concurrency  3.21 requests of 131072 tokens at once\n" in out  # 421328 / 131072


def test_a_failure_shows_no_healthy_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lang", "en", "--plain", str(FIX / "vllm" / "vllm-054.log")]) == 1
    assert "What the log shows:" not in capsys.readouterr().out


def test_the_pipe_shows_it_too() -> None:
    import os

    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), "OOMDOCTOR_LANG": "en", "COLUMNS": "100"}
    log = (FIX / "vllm" / "synthetic-v1-healthy-start.log").read_bytes()
    proc = subprocess.run([sys.executable, "-m", "oomdoctor"], input=log, capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout == log
    assert proc.stderr.decode().endswith(
        "  max concurrency  11.87 requests of 32768 tokens at once\n\noomdoctor: no out-of-memory failure found.\n"
    )
