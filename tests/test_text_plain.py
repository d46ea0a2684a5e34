"""The plain-text layout of findings (no colour, printable ASCII) must be rich's, character for character."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.render import text as T
from oomdoctor.report import Finding, Location, Remedy
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import Scanner

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted((ROOT / "fixtures").glob("**/*.log"))


def _rich_wrap(text: str, width: int) -> list[str]:
    from rich.console import Console
    from rich.text import Text

    console = Console(file=io.StringIO(), width=width, no_color=True, color_system=None)
    return [line.plain for line in Text(text).wrap(console, width)]


@given(
    st.text(alphabet=st.sampled_from("ab cdefgh  ABC.,-_=/\n"), max_size=300),
    st.integers(min_value=1, max_value=120),
)
@settings(max_examples=400, deadline=None)
def test_wrap_is_richs(text: str, width: int) -> None:
    assert T._wrap(text, width) == _rich_wrap(text, width)


@pytest.mark.parametrize("width", [40, 80, 100])
def test_every_fixture_renders_as_rich_renders_it(width: int) -> None:
    plain_used = 0
    for log in LOGS:
        s = Scanner(default_pack(), source=str(log.relative_to(ROOT)))
        s.feed(log.read_bytes())
        report = s.close()
        summary = T._summary_line(report)
        assert T.render_text(report, width=width) == T._rich_text(report.findings, summary, False, width)
        assert T.render_findings_text(report.findings, width=width) == T._rich_text(
            report.findings, None, False, width
        )
        plain_used += sum(T._plain_panel(f, width) is not None for f in report.findings)
    assert plain_used >= 20  # the shortcut is taken, so this test compares something


def _finding(**kw: object) -> Finding:
    base: dict[str, object] = dict(
        rule="r", kind="torch.cuda-oom", engine="pytorch", severity="error", title="CUDA out of memory",
        message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.18 GiB.",
        location=Location(source="x.log", line=3, end_line=4),
        figures={"requested_bytes": 1266679808, "gpu_index": 0},
    )
    base.update(kw)
    return Finding.model_validate(base)


REMEDY = Remedy(id="x", rank=1, title="Lower it", flags={"--max-model-len": "7200"}, why="because " * 30,
                command="vllm serve " + "a" * 150, tradeoff="shorter prompts")


@pytest.mark.parametrize(
    "finding",
    [
        _finding(),
        _finding(message=""),
        _finding(message="line one\nline two\n\n  indented  ", occurrences=3, ranks=["0", "1"]),
        _finding(message="x" * 499 + " tail"),
        _finding(title="T" * 95),
        _finding(title="T" * 97),
        _finding(remedies=[REMEDY, REMEDY.model_copy(update={"rank": 2, "why": "", "command": None})]),
        _finding(figures={"requested_bytes": 1, "other_processes": [{"pid": 1, "used_bytes": 2}] * 9}),
        _finding(message="naïve ≈ 1 GiB", figures={}),
        _finding(severity="warning", phase="inference"),
    ],
)
@pytest.mark.parametrize("width", [30, 100])
def test_edge_cases_render_as_rich_renders_them(finding: Finding, width: int) -> None:
    assert T.render_findings_text([finding], width=width) == T._rich_text([finding], None, False, width)


def test_the_plain_symbols_are_one_cell_wide_for_rich() -> None:
    from rich.cells import cell_len

    assert all(cell_len(c) == 1 and not c.isspace() for c in T.PLAIN_SYMBOLS)


@given(
    st.text(alphabet=st.sampled_from("ab cdefgh  ABC.,-_=/\n" + T.PLAIN_SYMBOLS), max_size=300),
    st.integers(min_value=1, max_value=120),
)
@settings(max_examples=300, deadline=None)
def test_wrap_is_richs_with_symbols(text: str, width: int) -> None:
    assert T._wrap(text, width) == _rich_wrap(text, width)
