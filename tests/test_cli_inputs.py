"""Hostile CLI inputs: a huge regular-file stdin in constant memory, and one-line errors for a bad
--model-config, a deeply nested rule file, an unreadable --follow file and a closed stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VLLM_054 = ROOT / "fixtures/vllm/vllm-054.log"


def oomdoctor(*args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=120, **kw)  # type: ignore[call-overload, no-any-return]


def one_error_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("oomdoctor: error: "), lines
    assert "Traceback" not in lines[0] and "internal error" not in lines[0]
    return lines[0]


# -- stdin that is a regular file ------------------------------------------------------------------


def test_regular_file_stdin_is_analysed_whole_in_constant_memory(tmp_path: Path) -> None:
    """``oomdoctor < log``: 160 MiB read in bounded memory (the lossless branch held it all: 250 MB
    RSS for 200 MB), every byte analysed, the failure at the very end found at its exact line."""
    filler = b"".join(b"2026-01-01 12:00:%02d worker %d handled request id=%d in 12 ms\n" % (i % 60, i % 7, i) for i in range(20000))
    log = tmp_path / "big.log"
    lines = 0
    with log.open("wb") as fh:
        while fh.tell() < 160 << 20:
            fh.write(filler)
            lines += filler.count(b"\n")
        fh.write(VLLM_054.read_bytes())
    probe = (
        "import resource, subprocess, sys\n"
        f"with open({str(log)!r}, 'rb') as f:\n"
        "    p = subprocess.run([sys.executable, '-m', 'oomdoctor', '-q', '-f', 'json'], stdin=f,\n"
        "                       stdout=subprocess.PIPE)\n"  # -q: the report on stdout
        "sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + '\\n')\n"
        "sys.stdout.buffer.write(p.stdout)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=300, check=True).stdout
    rss_kib, _, report = out.partition(b"\n")
    assert int(rss_kib) < 80 * 1024, f"peak RSS {int(rss_kib) // 1024} MiB"
    import json

    rep = json.loads(report)
    assert rep["summary"]["errors"] == 1
    first = VLLM_054.read_bytes()[: VLLM_054.read_bytes().index(b"ValueError: To serve")].count(b"\n") + 1
    assert rep["findings"][0]["location"]["line"] == lines + first


# -- --model-config ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d / "missing.json", "No such file or directory"),
        (lambda d: d, "is a directory"),
        (lambda d: (d / "bin.json").write_bytes(bytes(range(256)) * 8) and d / "bin.json", "binary"),
        (lambda d: (d / "list.json").write_text("[1, 2]") and d / "list.json", "not a JSON object"),
        (lambda d: (d / "bad.json").write_text("{hidden_size: 4096}") and d / "bad.json", "not JSON"),
    ],
    ids=["missing", "directory", "binary", "not-an-object", "not-json"],
)
def test_unusable_model_config_is_one_error_line(tmp_path: Path, make: object, reason: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    for args in (
        [str(VLLM_054), "--model-config", str(path)],
        ["run", "--model-config", str(path), "--", sys.executable, "-c", "pass"],
    ):
        proc = oomdoctor(*args)
        assert proc.returncode == 2
        line = one_error_line(proc)
        assert f"--model-config {path}" in line and reason in line


def test_a_readable_model_config_is_used(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32}')
    assert oomdoctor(str(VLLM_054), "--model-config", str(cfg)).returncode == 1  # the OOM, no error


# -- rule files, --follow, closed stdout --------------------------------------------------------------


def test_deeply_nested_rule_file_names_the_file(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    proc = oomdoctor(str(VLLM_054), "--rules", str(rules))
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert "deep.toml" in line and "nested too deeply" in line


def test_follow_of_an_unreadable_file_gives_the_os_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Root reads any file, so the refusal is simulated where the follower opens the file."""
    import oomdoctor.cli.follow as follow
    from oomdoctor.rulepack import default_pack

    target = tmp_path / "locked.log"
    target.write_text("x\n")

    def refuse(path: object, *args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(follow, "open", refuse, raising=False)
    code = follow.follow_file(str(target), default_pack(), {}, "text", None, "error")
    assert code == 2
    err = capsys.readouterr().err
    assert err == f"oomdoctor: error: {target}: cannot read: Permission denied\n"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_closed_stdout_is_one_line_exit_2(fmt: str) -> None:
    proc = subprocess.run(
        f"{sys.executable} -m oomdoctor {VLLM_054} -f {fmt} >&-", shell=True, capture_output=True, timeout=60
    )
    assert proc.returncode == 2
    assert "stream is closed" in one_error_line(proc)


def test_closed_stdout_with_output_file_still_writes(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run(
        f"{sys.executable} -m oomdoctor {VLLM_054} -f json -o {out} >&-", shell=True, capture_output=True, timeout=60
    )
    assert proc.returncode == 1 and out.read_text().startswith("{")


@pytest.mark.parametrize("args", [["rules", "list"], ["rules", "show", "torch.cuda-oom"], ["rules", "list", "--json"]])
def test_a_reader_that_closed_the_pipe_is_no_error(args: list[str]) -> None:
    # `oomdoctor rules list | head`: the reader is gone before the listing is written; like ls,
    # exit quietly with 0 (was: exit 1, click's answer to a broken pipe)
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "oomdoctor", *args], stdout=write, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, b"")
