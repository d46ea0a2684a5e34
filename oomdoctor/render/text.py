"""Terminal renderer: a rich panel per finding with the remedies ranked and copy-pasteable."""

from __future__ import annotations

import io
from typing import Any

from oomdoctor.render.common import figure_items, fits_label, occurrences_note, remedy_snippet, where
from oomdoctor.report import Finding, Report
from oomdoctor.units import format_size


def _console(color: bool, width: int | None) -> Any:
    from rich.console import Console

    return Console(
        file=io.StringIO(),
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        width=width or 100,
        highlight=False,
        soft_wrap=False,
    )


def _finding_panel(f: Finding) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    head = Text()
    head.append(f.kind, style="bold")
    head.append(f"  phase: {f.phase}  engine: {f.engine}  at {where(f)}")
    occ = occurrences_note(f)
    if occ:
        head.append(f"  ({occ})")
    parts.append(head)
    parts.append(Text(f.message[:500], style="dim"))
    items = figure_items(f)
    if items:
        t = Table.grid(padding=(0, 2))
        t.add_column(style="cyan")
        t.add_column()
        for k, v in items:
            t.add_row(k, v)
        parts.append(t)
    if f.remedies:
        parts.append(Text("Remedies, best first:", style="bold"))
        for r in f.remedies:
            line = Text()
            line.append(f"{r.rank}. {r.title}", style="bold")
            line.append(f"  [{fits_label(r)}; {r.confidence} confidence")
            if r.saves_bytes:
                line.append(f"; saves {format_size(r.saves_bytes)}")
            line.append("]")
            parts.append(line)
            snippet = remedy_snippet(r)
            if snippet:
                parts.append(Text("     " + snippet, style="green"))
            if r.command:
                parts.append(Text("     $ " + r.command, style="green"))
            if r.why:
                parts.append(Text("     why: " + r.why))
            if r.tradeoff:
                parts.append(Text("     cost: " + r.tradeoff, style="dim"))
    style = "red" if f.severity == "error" else "yellow"
    return Panel(Group(*parts), title=f.title, title_align="left", border_style=style)


def render_findings_text(findings: list[Finding], *, color: bool = False, width: int | None = None) -> str:
    console = _console(color, width)
    for f in findings:
        console.print(_finding_panel(f))
    return str(console.file.getvalue())


def render_text(report: Report, *, color: bool = False, width: int | None = None, **_: Any) -> str:
    console = _console(color, width)
    for f in report.findings:
        console.print(_finding_panel(f))
    errors = report.summary.errors
    if errors:
        console.print(f"oomdoctor: {errors} out-of-memory failure(s), {report.summary.warnings} warning(s).")
    elif report.summary.warnings:
        console.print(f"oomdoctor: no out-of-memory failure; {report.summary.warnings} memory warning(s).")
    else:
        console.print("oomdoctor: no out-of-memory failure found.")
    return str(console.file.getvalue())
