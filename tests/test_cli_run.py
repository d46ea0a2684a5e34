"""``oomdoctor run -- COMMAND``: tee, merged order, exit status, signals, command context."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
KV_LOG = ROOT / "fixtures" / "vllm" / "vllm-054.log"


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "oomdoctor", "run", *args],
        capture_output=True, timeout=timeout, env=ENV, stdin=subprocess.DEVNULL,
    )


def test_tees_merged_output_in_order_and_exits_with_the_childs_status() -> None:
    script = "import sys\nfor i in range(50):\n    print('out', i)\n    print('err', i, file=sys.stderr)\nsys.exit(3)"
    proc = run("--", sys.executable, "-c", script)
    expected = "".join(f"out {i}\nerr {i}\n" for i in range(50))
    assert proc.stdout.decode() == expected  # one pipe for both: order kept (PYTHONUNBUFFERED=1)
    assert proc.returncode == 3
    assert proc.stderr.decode() == "oomdoctor: no out-of-memory failure found.\n"


def test_sets_pythonunbuffered() -> None:
    proc = run("--", sys.executable, "-c", "import os; print(os.environ['PYTHONUNBUFFERED'])")
    assert proc.stdout == b"1\n"
    assert proc.returncode == 0


def test_command_not_found_is_127_with_one_line() -> None:
    proc = run("--", "no-such-command-oomdoctor", "--flag")
    assert proc.returncode == 127
    assert proc.stderr.decode() == "oomdoctor: error: no-such-command-oomdoctor: command not found\n"
    assert proc.stdout == b""


def test_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("echo hi\n")
    script.chmod(0o644)
    proc = run("--", str(script))
    assert proc.returncode == 126
    assert proc.stderr.decode() == f"oomdoctor: error: {script}: permission denied (not executable)\n"


def test_no_command() -> None:
    proc = run()
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        "oomdoctor: error: run: no command given (usage: oomdoctor run -- COMMAND [ARGS...])\n"
    )


def test_child_killed_by_signal_exits_128_plus_n() -> None:
    proc = run("--", "sh", "-c", "echo before; kill -KILL $$")
    assert proc.stdout == b"before\n"
    assert proc.returncode == 128 + signal.SIGKILL


def test_diagnoses_the_output_and_knows_the_exact_command() -> None:
    argv = ["sh", "-c", f"cat '{KV_LOG}'; exit 1", "vllm", "serve", "Qwen/Qwen3-235B", "--max-model-len", "202752",
            "--gpu-memory-utilization", "0.95"]
    proc = run("-f", "json", "--", *argv)
    assert proc.stdout == KV_LOG.read_bytes()
    assert proc.returncode == 1  # the child's status
    report = json.loads(proc.stderr)
    assert report["findings"][0]["rule"] == "vllm.v1.kv-cache.max-len-exceeds"
    assert report["context"]["command"] == argv
    assert report["context"]["launch_args"]["max_model_len"] == "202752"
    assert report["context"]["launch_args"]["gpu_memory_utilization"] == "0.95"


def test_options_after_the_command_belong_to_the_command() -> None:
    proc = run(sys.executable, "-c", "import sys; print(sys.argv[1:])", "--format", "x")
    assert proc.stdout == b"['--format', 'x']\n"
    assert proc.returncode == 0


def _wait_for(proc: subprocess.Popen[bytes], needle: bytes, timeout: float = 40) -> bytes:
    assert proc.stdout is not None
    buf = b""
    deadline = time.monotonic() + timeout
    while needle not in buf and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        buf += line
    return buf


GRANDCHILD = """
import signal, sys, time
def h(s, f):
    # one write: PYTHONUNBUFFERED makes print() write its pieces separately, and the
    # child's line could land between them
    sys.stdout.write("grandchild got " + signal.Signals(s).name + "\\n")
    sys.exit(0)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, h)
print("grandchild ready", flush=True)
while True:
    time.sleep(0.05)
"""

CHILD = """
import signal, subprocess, sys, time
gc = subprocess.Popen([sys.executable, "-c", GRANDCHILD])
def h(s, f):
    sys.stdout.write("child got " + signal.Signals(s).name + "\\n")
    gc.wait()
    sys.exit(7)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, h)
print("child ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_signals_are_forwarded_to_the_childs_process_group() -> None:
    # child and grandchild each say which signal reached them; the child then exits 7
    child = f"GRANDCHILD = {GRANDCHILD!r}\n" + CHILD
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        proc = subprocess.Popen(
            [sys.executable, "-m", "oomdoctor", "run", "--", sys.executable, "-c", child],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, stdin=subprocess.DEVNULL,
        )
        got = _wait_for(proc, b"child ready\n")
        if b"grandchild ready" not in got:
            got += _wait_for(proc, b"grandchild ready\n")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        text = (got + out).decode()
        assert f"child got {sig.name}" in text, text
        assert f"grandchild got {sig.name}" in text, text
        assert proc.returncode == 7, (sig, proc.returncode, err)
        assert b"Traceback" not in err


def test_pty_gives_the_command_a_terminal() -> None:
    proc = run("--pty", "--", sys.executable, "-c", "import sys; print(sys.stdout.isatty(), sys.stderr.isatty())")
    assert proc.stdout.replace(b"\r\n", b"\n") == b"True True\n"
    assert proc.returncode == 0


def test_the_advisor_prints_the_corrected_command(tmp_path: Path) -> None:
    # a stand-in `vllm` that prints a real V1 KV-cache failure; the exact argv comes from `run`
    fake = tmp_path / "vllm"
    fake.write_text(f"#!/bin/sh\ncat '{KV_LOG}'\nexit 1\n")
    fake.chmod(0o755)
    env = {**ENV, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "run", "--", "vllm", "serve", "zai-org/GLM-4.5-Air",
         "--max-model-len", "202752", "--gpu-memory-utilization", "0.9"],
        capture_output=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1
    assert proc.stdout == KV_LOG.read_bytes()
    assert "$ vllm serve zai-org/GLM-4.5-Air --max-model-len 81392 --gpu-memory-utilization 0.9" in (
        proc.stderr.decode()
    )
