"""Terminal renderer: a rich panel per finding with the remedies ranked and copy-pasteable."""

from __future__ import annotations

import io
import re
from itertools import pairwise
from typing import Any

from oomdoctor.render.common import figure_items, fits_label, occurrences_note, remedy_snippet, where
from oomdoctor.render.why import why_line
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


#: a panel row: its base style and its (text, style) pieces; None stands for the figures table
Row = tuple[str | None, list[tuple[str, str | None]]] | None


def _rows(f: Finding) -> list[Row]:
    """What a finding's panel says, row by row: the one source of both layouts (rich, plain)."""
    head: list[tuple[str, str | None]] = [(f.kind, "bold"), (f"  phase: {f.phase}  engine: {f.engine}  at {where(f)}", None)]
    occ = occurrences_note(f)
    if occ:
        head.append((f"  ({occ})", None))
    rows: list[Row] = [(None, head), ("dim", [(f.message[:500], None)])]
    if figure_items(f):
        rows.append(None)
    why = why_line(f)
    if why:
        rows.append((None, [(why, None)]))
    if f.remedies:
        rows.append((None, [("Remedies, best first:", "bold")]))
        for r in f.remedies:
            line: list[tuple[str, str | None]] = [
                (f"{r.rank}. {r.title}", "bold"),
                (f"  [{fits_label(r)}; {r.confidence} confidence", None),
            ]
            if r.saves_bytes:
                line.append((f"; saves {format_size(r.saves_bytes)}", None))
            line.append(("]", None))
            rows.append((None, line))
            snippet = remedy_snippet(r)
            if snippet:
                rows.append(("green", [("     " + snippet, None)]))
            if r.command:
                rows.append(("green", [("     $ " + r.command, None)]))
            if r.why:
                rows.append((None, [("     why: " + r.why, None)]))
            if r.tradeoff:
                rows.append(("dim", [("     cost: " + r.tradeoff, None)]))
    return rows


def _finding_panel(f: Finding) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    for row in _rows(f):
        if row is None:
            t = Table.grid(padding=(0, 2))
            t.add_column(style="cyan")
            t.add_column()
            for k, v in figure_items(f):
                t.add_row(k, v)
            parts.append(t)
            continue
        style, pieces = row
        text = Text(style=style or "")
        for piece, piece_style in pieces:
            text.append(piece, style=piece_style)
        parts.append(text)
    style = "red" if f.severity == "error" else "yellow"
    return Panel(Group(*parts), title=f.title, title_align="left", border_style=style)


def render_findings_text(findings: list[Finding], *, color: bool = False, width: int | None = None) -> str:
    if not color:
        plain = _plain_findings(findings, width or 100)
        if plain is not None:
            return "".join(plain)
    return _rich_text(findings, None, color, width)


def _rich_text(findings: list[Finding], summary: str | None, color: bool, width: int | None) -> str:
    console = _console(color, width)
    for f in findings:
        console.print(_finding_panel(f))
    if summary is not None:
        console.print(summary)
    return str(console.file.getvalue())


def _summary_line(report: Report) -> str:
    errors = report.summary.errors
    if errors:
        return f"oomdoctor: {errors} out-of-memory failure(s), {report.summary.warnings} warning(s)."
    if report.summary.warnings:
        return f"oomdoctor: no out-of-memory failure; {report.summary.warnings} memory warning(s)."
    return "oomdoctor: no out-of-memory failure found."


def render_text(report: Report, *, color: bool = False, width: int | None = None, **_: Any) -> str:
    summary = _summary_line(report)
    if not color:
        plain = _plain_findings(report.findings, width or 100)
        if plain is not None and len(summary) <= (width or 100):
            return "".join(plain) + summary + "\n"
    return _rich_text(report.findings, summary, color, width)


# Without colour, the panels above are plain text. For findings made only of printable ASCII
# and the few symbols remedies print (one character = one cell for rich too) and figures that fit beside their labels, the layout is rebuilt
# here exactly as rich lays it out (tests/test_text_plain.py compares both on every fixture and
# on random texts), which spares importing rich for the common case: a report piped to a file.
# Anything else goes through rich.

#: Symbols the remedies print besides ASCII; each is one cell wide (a test asks rich)
PLAIN_SYMBOLS = "×−§–—→÷≤≥≈∝Σ…·°±µ‘’“”"
_PLAIN = re.compile(f"[\\x20-\\x7e\\n{PLAIN_SYMBOLS}]*")
_WORD = re.compile(r"\s*\S+\s*")


def _wrap(text: str, width: int) -> list[str]:
    """rich's ``Text.wrap`` (word wrap, folding words longer than ``width``) for text whose
    characters are one cell wide each."""
    out: list[str] = []
    for line in text.split("\n"):
        breaks: list[int] = []
        offset = 0
        for m in _WORD.finditer(line):
            start, word = m.start(), m.group(0)
            length = len(word.rstrip())
            if width - offset >= length:
                offset += len(word)
            elif length > width:
                chunks = [word[i : i + width] for i in range(0, len(word), width)]
                for i, chunk in enumerate(chunks):
                    if start:
                        breaks.append(start)
                    if i == len(chunks) - 1:
                        offset = len(chunk)
                    else:
                        start += len(chunk)
            elif offset and start:
                breaks.append(start)
                offset = len(word)
        edges = [0, *breaks, len(line)]
        out.extend(line[a:b][:width] for a, b in pairwise(edges))
    return out


def _plain_panel(f: Finding, width: int) -> list[str] | None:
    inner = width - 4
    title = f" {f.title} "
    if width < 8 or not _PLAIN.fullmatch(title) or len(title) > inner:
        return None
    texts: list[str] = []
    body: list[str] = []
    for row in _rows(f):
        if row is None:
            items = figure_items(f)
            label = max(len(k) for k, _ in items)
            for k, v in items:
                if "\n" in k or "\n" in v or label + 2 + len(v) > inner or not v.strip() or v != v.strip():
                    return None
                texts.append(k + v)
                body.append(f"{k:<{label}}  {v}")
            continue
        t = "".join(piece for piece, _ in row[1])
        texts.append(t)
        body.extend(_wrap(t, inner))
    if not all(_PLAIN.fullmatch(t) for t in texts):
        return None
    top = "╭─" + title + "─" * (width - 3 - len(title)) + "╮"
    rows = [f"│ {line:<{inner}} │" for line in body]
    return [top, *rows, "╰" + "─" * (width - 2) + "╯"]


def _plain_findings(findings: list[Finding], width: int) -> list[str] | None:
    out: list[str] = []
    for f in findings:
        panel = _plain_panel(f, width)
        if panel is None:
            return None
        out.extend(line + "\n" for line in panel)
    return out
