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


def _fit_text(lang: str, width: int) -> tuple[str, list[str]]:
    from oomdoctor.advisor.catalog import find_gpu, find_model
    from oomdoctor.advisor.fit import fit
    from oomdoctor.cli.fit_cmd import render_fit_text
    from oomdoctor.i18n import use_lang

    with use_lang(lang):
        geo, gpu = find_model("meta-llama/Llama-3.1-8B"), find_gpu("A10G")
        assert geo is not None and gpu is not None
        res = fit(geo, gpu)
        return render_fit_text(res, width=width), [term for term, _b, _s in res.rows]


@pytest.mark.parametrize("lang", ["en", "ja"])
@pytest.mark.parametrize("width", [80, 120])
def test_fit_table_keeps_terms_whole_and_its_note_column_wide(lang: str, width: int) -> None:
    """fit's budget table at 80 and 120 columns in both languages: no line over the width, every
    term whole on one line, and the note column never narrower than NOTE_MIN cells (Japanese terms
    at 80 columns put each note under its term instead of squeezing it to a dozen cells)."""
    from oomdoctor.cli.fit_cmd import NOTE_MIN

    out, terms = _fit_text(lang, width)
    lines = out.splitlines()
    assert all(T.cell_len(line) <= width for line in lines if "$ " not in line and "--" not in line)
    rows = [next(line for line in lines if line.startswith("  " + term + " ")) for term in terms]
    head_w = 2 + max(T.cell_len(term) for term in terms) + 2 + 10
    stacked = all(T.cell_len(row) == head_w for row in rows)  # the size ends the row, the note is below
    assert stacked == (lang == "ja" and width == 80)
    if not stacked:  # three columns: the note column has room
        assert all(T.cell_len(row) > head_w + 2 for row in rows) and width - head_w - 2 >= NOTE_MIN
    assert all(label in out for label in terms)


def test_the_stacked_fit_table_puts_each_note_under_its_term() -> None:
    out, _terms = _fit_text("ja", 80)
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("  重み "))
    assert lines[i + 1].startswith("      カタログ：meta-llama/Llama-3.1-8B")
