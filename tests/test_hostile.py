"""Hostile input: one line ``oomdoctor: error: ...`` on stderr, exit 2, never a traceback."""

from __future__ import annotations

import gzip
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OOM_LOG = (ROOT / "fixtures" / "vllm" / "vllm-054.log").read_bytes()

GOOD_RULE = """\
[[rule]]
id = "test.rule"
title = "A test rule"
engine = "test"
kind = "test"
triggers = ["zzqq"]
pattern = 'zzqq (?P<count>\\d+)'
[[rule.match]]
log = "zzqq 7"
figures = { count = 7 }
"""


def oomdoctor(*args: str, cwd: Path | None = None, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "oomdoctor", *args],
        cwd=cwd,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)},
    )


def one_error(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The single error line; asserts exit 2 and no traceback."""
    err = proc.stderr.decode()
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("oomdoctor: error:")]
    assert len(lines) == 1, err
    return lines[0]


def rule_dir(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "myrules"
    d.mkdir()
    (d / "mine.toml").write_text(text)
    return d


def test_missing_file(tmp_path: Path) -> None:
    assert one_error(oomdoctor("nope.log", cwd=tmp_path)) == "oomdoctor: error: nope.log: no such file"


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    assert one_error(oomdoctor("logs", cwd=tmp_path)) == "oomdoctor: error: logs: is a directory"


def test_permission_denied(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # We run as root, so chmod 000 would still be readable: make open() fail like EACCES does
    # for a normal user instead, and go through the same CLI code in-process.
    import builtins

    from oomdoctor.cli import main

    target = tmp_path / "secret.log"
    target.write_bytes(b"hello\n")
    real_open = builtins.open

    def fake_open(file, *a, **kw):  # type: ignore[no-untyped-def]
        if str(file) == str(target):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *a, **kw)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert main([str(target)]) == 2
    err = capsys.readouterr().err
    assert err == f"oomdoctor: error: {target}: permission denied\n"


def test_unreadable_fifo_without_writer_is_not_needed_for_non_seekable_input(tmp_path: Path) -> None:
    # A non-seekable source (process substitution, FIFO) is read, not rejected.
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat > '{fifo}'"], stdin=subprocess.PIPE)
    assert writer.stdin is not None
    writer.stdin.write(OOM_LOG)
    writer.stdin.close()
    proc = oomdoctor("-f", "json", str(fifo))
    writer.wait(timeout=10)
    assert proc.returncode == 1, proc.stderr
    assert b'"kv_cache_tokens"' in proc.stdout or b"max_seq_len" in proc.stdout


def _big_log() -> bytes:
    filler = b"".join(b"INFO 05-01 10:00:00 [engine.py:1] step %d done\n" % i for i in range(20000))
    return filler + OOM_LOG


def test_truncated_gzip_reports_what_was_read(tmp_path: Path) -> None:
    # the OOM is in the first half; the file is cut before the gzip trailer
    data = gzip.compress(OOM_LOG + _big_log(), compresslevel=1)
    (tmp_path / "cut.log.gz").write_bytes(data[: len(data) // 2])
    proc = oomdoctor("-f", "json", "cut.log.gz", cwd=tmp_path)
    line = one_error(proc)
    assert line.startswith("oomdoctor: error: cut.log.gz: truncated gzip file: the report covers the ")
    assert line.endswith(" bytes read before the end")
    assert b"vllm.v1.kv-cache.max-len-exceeds" in proc.stdout  # the partial report is printed


def test_corrupt_gzip(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(OOM_LOG + _big_log(), compresslevel=1))
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0x5A
    (tmp_path / "bad.log.gz").write_bytes(bytes(data))
    line = one_error(oomdoctor("bad.log.gz", cwd=tmp_path))
    assert line.startswith("oomdoctor: error: bad.log.gz: corrupt gzip data after ")
    assert line.endswith("; the report covers what was read")


def test_truncated_xz(tmp_path: Path) -> None:
    data = lzma.compress(OOM_LOG + _big_log())
    (tmp_path / "cut.log.xz").write_bytes(data[: len(data) - 40])
    proc = oomdoctor("-f", "json", "cut.log.xz", cwd=tmp_path)
    line = one_error(proc)
    assert line.startswith("oomdoctor: error: cut.log.xz: truncated xz file: the report covers the ")
    assert b"vllm.v1.kv-cache.max-len-exceeds" in proc.stdout


def test_corrupt_xz_header(tmp_path: Path) -> None:
    (tmp_path / "bad.xz").write_bytes(b"\xfd7zXZ\x00" + b"\x00garbage" * 10)
    line = one_error(oomdoctor("bad.xz", cwd=tmp_path))
    assert line.startswith("oomdoctor: error: bad.xz: corrupt xz data after 0 bytes (")


def test_unknown_format(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(b"hello\n")
    assert one_error(oomdoctor("--format", "yaml", "a.log", cwd=tmp_path)) == (
        "oomdoctor: error: unknown --format 'yaml' (choose text, json, jsonl, markdown, slack)"
    )


def test_rule_toml_syntax_error(tmp_path: Path) -> None:
    d = rule_dir(tmp_path, GOOD_RULE.replace("pattern = 'zzqq", "pattern = \"zzqq"))
    (tmp_path / "a.log").write_bytes(b"hello\n")
    line = one_error(oomdoctor("--rules", "myrules", "a.log", cwd=tmp_path))
    assert line == "oomdoctor: error: myrules/mine.toml:7:29: TOML syntax error: Unescaped '\\' in a string"
    assert d.exists()


def test_rule_schema_violation(tmp_path: Path) -> None:
    rule_dir(tmp_path, GOOD_RULE.replace('kind = "test"', "kind = 3"))
    (tmp_path / "a.log").write_bytes(b"hello\n")
    assert one_error(oomdoctor("--rules", "myrules", "a.log", cwd=tmp_path)) == (
        "oomdoctor: error: myrules/mine.toml: rule \"test.rule\": kind: 3 is not of type 'string'"
    )


def test_rule_schema_violation_nested_field(tmp_path: Path) -> None:
    rule_dir(tmp_path, GOOD_RULE.replace("window", "x") + "window = 99\n")
    (tmp_path / "a.log").write_bytes(b"hello\n")
    line = one_error(oomdoctor("--rules", "myrules", "a.log", cwd=tmp_path))
    # `window = 99` after [[rule.match]] lands in the example table: an unknown key there
    assert line.startswith('oomdoctor: error: myrules/mine.toml: rule "test.rule": match[0]: ')
    assert "'window'" in line


def test_duplicate_rule_ids(tmp_path: Path) -> None:
    rule_dir(tmp_path, GOOD_RULE + "\n" + GOOD_RULE)
    (tmp_path / "a.log").write_bytes(b"hello\n")
    assert one_error(oomdoctor("--rules", "myrules", "a.log", cwd=tmp_path)) == (
        'oomdoctor: error: myrules/mine.toml: rule "test.rule": id: duplicate rule id (also in myrules/mine.toml)'
    )


def test_duplicate_context_ids(tmp_path: Path) -> None:
    # two context rules under one id: both would run, and a user overriding the id could not know which
    ctx = '[[context]]\nid = "test.ctx"\ntriggers = ["x"]\npattern = \'\'\'x(?P<model>\\w+)\'\'\'\n'
    (tmp_path / "myrules").mkdir()
    (tmp_path / "myrules" / "a.toml").write_text(ctx)
    (tmp_path / "myrules" / "b.toml").write_text(ctx)
    (tmp_path / "a.log").write_bytes(b"hello\n")
    assert one_error(oomdoctor("--rules", "myrules", "a.log", cwd=tmp_path)) == (
        'oomdoctor: error: myrules/b.toml: context "test.ctx": id: duplicate context id (also in myrules/a.toml)'
    )


def test_regex_does_not_compile(tmp_path: Path) -> None:
    rule_dir(tmp_path, GOOD_RULE.replace("(?P<count>\\d+)", "(?P<count>\\d+"))
    (tmp_path / "a.log").write_bytes(b"hello\n")
    assert one_error(oomdoctor("--rules", "myrules", "a.log", cwd=tmp_path)) == (
        'oomdoctor: error: myrules/mine.toml: rule "test.rule": pattern: regex does not compile at position 18: '
        "missing )"
    )


CATASTROPHIC = GOOD_RULE.replace("pattern = 'zzqq (?P<count>\\d+)'", "pattern = 'zzqq (a|aa)+$'").replace(
    'figures = { count = 7 }', ""
)


#: a built-in rule's OOM, beside the user's rule (both rules' lines in one log)
TORCH_OOM = (
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
    b"79.19 GiB of which 1.00 MiB is free.\n"
)


def test_catastrophic_regex_is_caught_at_load_and_only_its_rule_is_dropped(tmp_path: Path) -> None:
    """Issue 36 item 5: a pattern that backtracks exponentially is tried on crafted probes at load;
    the rule is not loaded, with one warning, and the built-in rules still report."""
    rule_dir(tmp_path, CATASTROPHIC)
    (tmp_path / "a.log").write_bytes(b"zzqq " + b"a" * 60 + b"b\n" + TORCH_OOM)
    proc = oomdoctor("--rules", "myrules", "a.log", "-f", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.decode().splitlines() == [
        'oomdoctor: warning: myrules/mine.toml: rule "test.rule": pattern: regex timed out on a probe of 262 '
        "characters (catastrophic backtracking?): rule not loaded"
    ]
    assert [f["rule"] for f in json.loads(proc.stdout)["findings"]] == ["torch.cuda-oom"]


#: backtracks exponentially only behind "zzqq X", which no probe starts with: found at run time
HIDDEN = CATASTROPHIC.replace("'zzqq (a|aa)+$'", "'zzqq X(a|aa)+$'")


def test_catastrophic_regex_at_run_time_drops_only_its_rule(tmp_path: Path) -> None:
    rule_dir(tmp_path, HIDDEN)
    (tmp_path / "a.log").write_bytes(b"zzqq X" + b"a" * 60 + b"b\n" + b"zzqq X" + b"a" * 60 + b"b\n" + TORCH_OOM)
    proc = oomdoctor("--rules", "myrules", "a.log", "-f", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.decode().splitlines() == [  # once, though two lines reach the rule
        'oomdoctor: warning: myrules/mine.toml: rule "test.rule": pattern: regex timed out (catastrophic '
        "backtracking?); this rule is skipped for the rest of the run"
    ]
    assert [f["rule"] for f in json.loads(proc.stdout)["findings"]] == ["torch.cuda-oom"]


def test_catastrophic_regex_in_pipe_mode_drops_its_rule_not_the_analysis(tmp_path: Path) -> None:
    rule_dir(tmp_path, HIDDEN)
    data = b"zzqq X" + b"a" * 60 + b"b\n" + b"after\n" * 1000 + TORCH_OOM
    proc = oomdoctor("--rules", "myrules", "-f", "json", cwd=tmp_path, stdin=data)
    assert proc.returncode == 1
    assert proc.stdout == data
    err = proc.stderr.decode()
    assert err.startswith(
        'oomdoctor: warning: myrules/mine.toml: rule "test.rule": pattern: regex timed out (catastrophic '
        "backtracking?); this rule is skipped for the rest of the run\n"
    )
    assert "torch.cuda-oom" in err


def test_a_user_rule_replacing_a_built_in_one_says_so(tmp_path: Path) -> None:
    rule_dir(tmp_path, GOOD_RULE.replace('id = "test.rule"', 'id = "torch.cuda-oom"'))
    (tmp_path / "a.log").write_bytes(b"zzqq 7\n")
    proc = oomdoctor("--rules", "myrules", "a.log", cwd=tmp_path)
    assert proc.stderr.decode().splitlines()[0] == (
        'oomdoctor: warning: myrules/mine.toml: rule "torch.cuda-oom": replaces the built-in rule of that id '
        "(give it an id of its own to add a rule beside it)"
    )


def test_too_many_user_rules_are_refused_before_compiling(tmp_path: Path) -> None:
    from oomdoctor.rulepack.loader import MAX_USER_RULES

    rule_dir(tmp_path, "\n".join(GOOD_RULE.replace("test.rule", f"test.rule{i}") for i in range(MAX_USER_RULES + 1)))
    (tmp_path / "a.log").write_bytes(b"hello\n")
    assert one_error(oomdoctor("--rules", "myrules", "a.log", cwd=tmp_path)) == (
        f"oomdoctor: error: myrules/mine.toml: too many rules: the rule directories hold more than {MAX_USER_RULES} "
        "(each is tried on every line its triggers find; split the pack or drop unused rules)"
    )


def test_missing_rule_directory(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(b"hello\n")
    assert one_error(oomdoctor("--rules", "nodir", "a.log", cwd=tmp_path)) == (
        "oomdoctor: error: nodir: no such rule directory"
    )


def test_unknown_option(tmp_path: Path) -> None:
    assert one_error(oomdoctor("--frobnicate", cwd=tmp_path)) == (
        "oomdoctor: error: No such option: --frobnicate (Possible options: --format)"
    )
