"""The terminal layout: follows the width, never wraps a command, cuts echoed messages at a word,
plain without colour; snapshots at 80 and 120 columns (``--update-goldens`` rewrites them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oomdoctor.api import diagnose
from oomdoctor.render import text as T
from oomdoctor.report import Finding, Location, Remedy, Report, Tool

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
CASES = ["vllm/synthetic-v1-worker-failed-profiling", "pytorch/other-013"]
ANSI = re.compile(r"\x1b\[[\d;]*m")


def _report(case: str) -> Report:
    path = ROOT / "fixtures" / f"{case}.log"
    return diagnose(path.read_text(encoding="utf-8"), source=f"fixtures/{case}.log")


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("case", CASES)
def test_snapshot(case: str, width: int, update_goldens: bool) -> None:
    got = T.render_text(_report(case), width=width)
    snap = SNAPSHOTS / f"{case.replace('/', '-')}.{width}.txt"
    if update_goldens:
        snap.write_text(got, encoding="utf-8")
    assert got == snap.read_text(encoding="utf-8")


def _finding(message: str = "CUDA out of memory.", command: str | None = None) -> Finding:
    remedy = Remedy(id="r", rank=1, title="Limit the context", flags={"--max-model-len": "8192"}, fits=True,
                    why="word " * 60, command=command)
    return Finding(rule="x", kind="torch.cuda-oom", engine="vllm", severity="error", title="CUDA out of memory",
                   message=message, location=Location(source="a.log", line=1, end_line=1), remedies=[remedy])


@pytest.mark.parametrize("width", [40, 80, 120, 200])
def test_prose_fits_the_width_and_commands_stay_whole(width: int) -> None:
    command = "vllm serve some/model " + " ".join(f"--flag-{i} {i}" for i in range(30))
    out = T.render_findings_text([_finding(command=command)], width=width)
    lines = out.splitlines()
    assert sum(1 for line in lines if "--flag-0 0" in line) == 1
    assert [line.strip() for line in lines if line.strip().startswith("$ ")] == ["$ " + command]
    assert all(len(line) <= width for line in lines if "$ " not in line)
    # hanging indent: the remedy's "why" continues under its first word
    why = next(i for i, line in enumerate(lines) if line.lstrip().startswith("why:"))
    assert lines[why + 1].startswith(" " * (lines[why].index("why:") + 5) + "word")


def test_the_width_follows_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    assert T.terminal_width() == 60
    out = T.render_findings_text([_finding()])
    assert max(len(line) for line in out.splitlines()) <= 60
    monkeypatch.setenv("COLUMNS", "20")
    assert T.terminal_width() == T.MIN_WIDTH


def test_echoed_messages_are_cut_at_a_word() -> None:
    msg = "CUDA out of memory. " + "Tried to allocate 2.00 GiB on device zero. " * 30
    cut = T.cut_message(msg)
    assert cut.endswith("…") and len(cut) <= T.MESSAGE_CHARS
    assert msg.startswith(cut[:-1]) and msg[len(cut) - 1] == " "
    assert T.cut_message("short message") == "short message"


def test_plain_has_no_colour_and_no_rules_colour_has_both() -> None:
    report = Report(tool=Tool(version="0"), findings=[_finding()])
    plain = T.render_text(report, width=80)
    assert "\x1b[" not in plain and "─" not in plain and "│" not in plain
    coloured = T.render_text(report, width=80, color=True)
    assert "\x1b[31" in coloured and "── CUDA out of memory ─" in coloured
    assert ANSI.sub("", coloured).replace("─", "").split("\n")[1:] == plain.split("\n")[1:]
