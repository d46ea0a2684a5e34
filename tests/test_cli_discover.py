"""A CLI a new user can discover: help, metavars, --hint keys, exit statuses, one summary line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
KV_LOG = ROOT / "fixtures" / "vllm" / "synthetic-v1-no-blocks.log"


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=60, env=ENV,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)


def test_help_lists_the_subcommands_and_reads_as_words() -> None:
    out = cli("--help").stdout.decode()
    commands = out.split("\nCommands:\n", 1)[1]  # a section of its own, after the options
    for sub in ("run -- COMMAND", "fit", "serve", "rules list|show|test"):
        assert f"\n  {sub}  " in "\n" + commands
    for args in (("--help",), ("run", "--help"), ("fit", "--help"), ("serve", "--help"), ("rules", "list", "--help"),
                 ("rules", "show", "--help"), ("rules", "test", "--help")):
        text = cli(*args).stdout.decode()
        assert "<list[str]>" not in text and "<str>" not in text and "<int>" not in text, args
    assert "KEY=VALUE" in out and "gpus, gpu, gpu-memory" in " ".join(out.split())


def test_an_unknown_hint_key_exits_2_with_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--hint", "gpu_count=2", str(KV_LOG)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oomdoctor: error: unknown hint key 'gpu_count' (known: gpus, gpu, gpu-memory")
    assert err.count("\n") == 1


def test_run_exits_with_the_commands_status_or_by_findings(tmp_path: Path) -> None:
    script = f"import sys; sys.stdout.write(open({str(KV_LOG)!r}).read()); sys.exit(0)"
    child = cli("run", "--", sys.executable, "-c", script)
    assert child.returncode == 0  # the command's own status, though an OOM was found
    assert "oomdoctor: 1 out-of-memory failure, 0 warnings." in child.stderr.decode()
    found = cli("run", "--exit-status", "findings", "--", sys.executable, "-c", script)
    assert found.returncode == 1
    clean = cli("run", "--exit-status", "findings", "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert clean.returncode == 0


def test_the_summary_line_is_the_same_in_pipe_and_file_modes() -> None:
    file_mode = cli(str(KV_LOG)).stdout.decode().splitlines()[-1]
    pipe_mode = cli(stdin=KV_LOG.read_bytes()).stderr.decode().splitlines()[-1]
    assert file_mode == pipe_mode == "oomdoctor: 1 out-of-memory failure, 0 warnings."


def test_serve_on_a_busy_port_is_one_error_line() -> None:
    pytest.importorskip("uvicorn")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        proc = cli("serve", "--port", str(port))
    assert proc.returncode == 2
    assert proc.stderr.decode() == f"oomdoctor: error: cannot listen on 127.0.0.1:{port}: address already in use\n"


def test_each_file_gets_its_own_result(tmp_path: Path) -> None:
    clean = tmp_path / "clean.log"
    clean.write_text("INFO starting\nINFO ready\n")
    out = cli(str(clean), str(KV_LOG)).stdout.decode().splitlines()
    assert out[-3:] == [
        f"{clean}: no out-of-memory failure found",
        f"{KV_LOG}: 1 out-of-memory failure, 0 warnings",
        "oomdoctor: 1 out-of-memory failure, 0 warnings.",
    ]
    single = cli(str(KV_LOG)).stdout.decode().splitlines()
    assert not any(line.startswith(str(KV_LOG) + ":") for line in single)


def test_a_binary_input_gets_a_warning(tmp_path: Path) -> None:
    blob = tmp_path / "core.bin"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    proc = cli(str(blob))
    assert proc.returncode == 0
    assert proc.stderr.decode() == f"oomdoctor: warning: {blob} looks binary (NUL bytes); reading it as text anyway\n"
    assert "warning" not in cli(str(KV_LOG)).stderr.decode()


def test_shell_completion_completes_options() -> None:
    env = {**ENV, "_OOMDOCTOR_COMPLETE": "complete_bash", "COMP_WORDS": "oomdoctor --fo", "COMP_CWORD": "1"}
    proc = subprocess.run([sys.executable, "-m", "oomdoctor"], capture_output=True, timeout=60, env=env,
                          stdin=subprocess.DEVNULL)
    assert proc.stdout.decode().split() == ["--format", "--follow"]
    assert "_oomdoctor_completion" in cli("--show-completion", "bash").stdout.decode()


def _complete(tmp_path: Path, **env: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "oomdoctor"], capture_output=True, timeout=60, cwd=tmp_path,
                          env={**ENV, **env}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode().split()


def test_shell_completion_completes_subcommands(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text("x\n")
    bash = {"_OOMDOCTOR_COMPLETE": "complete_bash"}
    # the first word: a subcommand name or a file
    assert _complete(tmp_path, **bash, COMP_WORDS="oomdoctor ru", COMP_CWORD="1") == ["rules", "run", "run.log"]
    assert _complete(tmp_path, **bash, COMP_WORDS="oomdoctor zz", COMP_CWORD="1") == []  # the shell's own files
    # after a subcommand: its own options and subcommands
    assert _complete(tmp_path, **bash, COMP_WORDS="oomdoctor fit --gpus", COMP_CWORD="2") == ["--gpus"]
    assert _complete(tmp_path, **bash, COMP_WORDS="oomdoctor rules ", COMP_CWORD="2") == ["list", "show", "test"]
    # after a file: still the diagnose options
    assert _complete(tmp_path, **bash, COMP_WORDS="oomdoctor run.log --fo", COMP_CWORD="2") == ["--format", "--follow"]
    # zsh and fish (typer's scripts pass the line instead)
    out = _complete(tmp_path, _OOMDOCTOR_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS="oomdoctor serve --po")
    assert any('"--port"' in w for w in out)


def test_the_readme_lists_every_environment_variable() -> None:
    import re

    names: set[str] = set()
    for path in (ROOT / "oomdoctor").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"OOMDOCTOR_[A-Z][A-Z_]*[A-Z]", text))
    config = (ROOT / "oomdoctor" / "server" / "config.py").read_text(encoding="utf-8")
    names.update("OOMDOCTOR_" + n for n in re.findall(r'(?:get\(|, )"([A-Z][A-Z_]*[A-Z])"\)', config) if not n.startswith("OOMDOCTOR_"))
    from oomdoctor.fleet.config import ENV as FLEET_ENV

    names.update("OOMDOCTOR_" + n for n in FLEET_ENV.values())
    names.discard("OOMDOCTOR_COMPLETE")  # click's completion protocol (_OOMDOCTOR_COMPLETE)
    table = (ROOT / "README.md").read_text(encoding="utf-8").split("Environment variables:", 1)[1]
    missing = sorted(n for n in names if f"`{n}`" not in table)
    assert missing == []
