"""Terminal renderer: one section per finding, remedies ranked, commands on lines of their own.

The layout follows the terminal's width. Prose wraps at word boundaries with hanging indents;
a command or a set of flags is never wrapped, so it can be selected and pasted whole (there is
no border for a long line to break). Echoed log messages are cut at a word boundary with "…".
Plain output (``--plain``, a stream that is not a terminal, or ``NO_COLOR``) has no colour and
no rules; the words are the same.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import unicodedata
from typing import Any

from oomdoctor.i18n import _
from oomdoctor.render.common import (
    by_source,
    code_label,
    code_text,
    confidence_label,
    facts_of,
    figure_items,
    fits_label,
    occurrences_note,
    phase_text,
    product_name,
    remedy_snippet,
    result_text,
    setting_lines,
    shown_codes,
    where,
)
from oomdoctor.render.why import why_line
from oomdoctor.report import Finding, Remedy, Report
from oomdoctor.units import format_size

#: echoed messages longer than this are cut (at a word boundary, with "…")
MESSAGE_CHARS = 400
#: narrowest layout; below it lines just run longer
MIN_WIDTH = 40
DEFAULT_WIDTH = 100
#: indents: the finding's text, a remedy's prose, its flags and command
BODY = "  "
REMEDY = "     "
CODE = "       "

#: a number and its unit stay on one line ("5.08 GiB", not "5.08" / "GiB"), also before Japanese ("0 Bでした")
_KEEP = re.compile(r"(\d) (?=(?:[KMGT]i?B|B|bytes|tokens|GB|MB)(?![A-Za-z0-9_]))")

#: no line starts with these (closing punctuation, Japanese or not) ...
_NO_START = frozenset("、。，．・：；？！ー）」』】〕〉》”’)]}%,.:;!?…")
#: ... and none ends with these (opening brackets; a full-width colon stays with what it introduces)
_NO_END = frozenset("（「『【〔〈《“‘([{：")

_STYLES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def _terminal_columns() -> int:
    """``COLUMNS``, else the width of the terminal on stdout, else on stderr (pipe mode prints on
    stderr while stdout is a pipe); 0 when none says. As ``shutil.get_terminal_size`` does, without
    importing shutil (which imports zlib, bz2 and lzma for its archives: about 3 ms of a small
    log's run)."""
    with contextlib.suppress(KeyError, ValueError):
        columns = int(os.environ["COLUMNS"])
        if columns > 0:
            return columns
    with contextlib.suppress(AttributeError, ValueError, OSError):  # (no stdout: None)
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        if columns:
            return columns
    with contextlib.suppress(ValueError, OSError):
        return os.get_terminal_size(2).columns
    return 0


def terminal_width(width: int | None = None) -> int:
    """``width``, else ``COLUMNS``, else the width of the terminal on stdout or stderr (pipe mode
    prints on stderr while stdout is a pipe), else 100; never under :data:`MIN_WIDTH`."""
    return max(MIN_WIDTH, width if width is not None else _terminal_columns() or DEFAULT_WIDTH)


def _wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def cell_len(text: str) -> int:
    """Terminal cells ``text`` takes: East Asian wide and fullwidth characters take two."""
    return sum(2 if _wide(ch) else 1 for ch in text)


def pad_cells(text: str, cells: int) -> str:
    """``text`` padded with spaces to ``cells`` terminal cells."""
    return text + " " * max(0, cells - cell_len(text))


def _chunks(text: str) -> list[tuple[str, str]]:
    """``text`` as (separator, chunk) pairs: the places a line may break. A break is allowed at
    whitespace (the separator, dropped at a line end) and next to a wide character, as Japanese
    breaks between any two characters, except before closing and after opening punctuation."""
    out: list[tuple[str, str]] = []
    sep, cur = "", ""
    short = _short_words(text)
    for i, ch in enumerate(text):
        if ch in " \t\n":
            if cur:
                out.append((sep, cur))
                sep, cur = "", ""
            sep += " "
            continue
        if (
            cur and (_wide(ch) or _wide(cur[-1])) and ch not in _NO_START and cur[-1] not in _NO_END
            and not (short[i] and short[i - 1])
        ):
            out.append((sep, cur))
            sep, cur = "", ""
        cur += ch
    if cur:
        out.append((sep, cur))
    return out


#: a run of at most this many wide letters between narrow text, spaces or punctuation is one word
#: kept on one line (場所, 製品, エンジン: a label is not split across two lines)
SHORT_WORD = 4


def _short_words(text: str) -> list[bool]:
    """For each character: whether it belongs to a short run of wide letters (see ``SHORT_WORD``)."""
    letter = [_wide(ch) and ch not in _NO_START and ch not in _NO_END and not unicodedata.category(ch).startswith("P")
              for ch in text]
    out = [False] * len(text)
    i = 0
    while i < len(text):
        if not letter[i]:
            i += 1
            continue
        j = i
        while j < len(text) and letter[j]:
            j += 1
        if j - i <= SHORT_WORD:
            out[i:j] = [True] * (j - i)
        i = j
    return out


def wrap_cells(text: str, width: int, indent: str = "", hang: str = "") -> list[str]:
    """Greedy word wrap at ``width`` terminal cells (see :func:`_chunks` for where lines break);
    a chunk wider than a line stays whole. Continuation lines start with ``hang``."""
    lines: list[str] = []
    line, used, empty = indent, cell_len(indent), True
    for sep, chunk in _chunks(text):
        w = cell_len(chunk)
        if not empty and used + len(sep) + w > width:
            lines.append(line)
            line, used = hang + chunk, cell_len(hang) + w
            continue
        if not empty:
            line += sep
            used += len(sep)
        line += chunk
        used += w
        empty = False
    if not empty:
        lines.append(line)
    return lines


def cut_message(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` on one line, cut at the last word boundary before ``limit`` with "…"."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 1]
    space = head.rfind(" ")
    if space > limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:") + "…"


class TextLayout:
    """Lines being laid out at ``width``, with colour or not."""

    def __init__(self, width: int, color: bool) -> None:
        self.width = width
        self.color = color
        self.lines: list[str] = []

    def style(self, text: str, *names: str) -> str:
        if not self.color or not names:
            return text
        codes = ";".join(_STYLES[n] for n in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def prose(self, text: str, indent: str, hang: str | None = None, *styles: str) -> None:
        """Word-wrapped text; continuation lines indented by ``hang`` (default: ``indent``)."""
        wrapped = wrap_cells(
            _KEEP.sub("\\1\x1f", text), self.width, indent, hang if hang is not None else indent
        ) or [indent]
        wrapped = [line.replace("\x1f", " ") for line in wrapped]
        self.lines.extend(self.style(line, *styles) if styles else line for line in wrapped)

    def labelled(self, label: str, text: str, indent: str, *styles: str) -> None:
        """``label: text`` with the text's continuation lines under its first word."""
        from oomdoctor.render.why import labelled_text

        line = labelled_text(label, text)
        self.prose(line, indent, indent + " " * (cell_len(line) - cell_len(text)), *styles)

    def code(self, text: str, indent: str = CODE) -> None:
        """A command or flags: one line, never wrapped."""
        self.lines.append(indent + self.style(text, "green"))


def remedy_code(r: Remedy, out: TextLayout, show_command: bool = True) -> bool:
    """A remedy's code lines, each under its label (:func:`~oomdoctor.render.common.code_label`);
    with ``show_command`` its whole command (``$ ...``) in place of its flags. Whether it showed one."""
    show_command = show_command and bool(r.command)
    for line in shown_codes(r, show_command):
        label = code_label(line)
        if label:
            out.prose(label, REMEDY, REMEDY + "  ", "dim")
        out.code(code_text(line))
    if show_command:
        out.code("$ " + (r.command or ""))
    return show_command


def _title(out: TextLayout, f: Finding) -> None:
    colour = "red" if f.severity == "error" else "yellow"
    if out.color:
        bar = "─" * max(3, out.width - cell_len(f.title) - 4)
        out.lines.append(out.style(f"── {f.title} {bar}", colour, "bold"))
    else:
        out.lines.append(f.title)


def finding_lines(f: Finding, out: TextLayout) -> None:
    """The section of one finding."""
    _title(out, f)
    if f.product:
        head = _("{kind} · phase: {phase} · engine: {engine} · product: {product} · at {where}").format(
            kind=f.kind, phase=phase_text(f.phase), engine=f.engine, product=product_name(f.product), where=where(f)
        )
    else:
        head = _("{kind} · phase: {phase} · engine: {engine} · at {where}").format(
            kind=f.kind, phase=phase_text(f.phase), engine=f.engine, where=where(f)
        )
    occ = occurrences_note(f)
    if occ:
        head += f" · {occ}"
    out.prose(head, BODY, BODY + "  ", "dim")
    out.prose(cut_message(f.message), BODY, BODY, "dim")
    items = figure_items(f)
    if items:
        out.lines.append("")
        label = max(cell_len(k) for k, _v in items)
        for k, v in items:
            out.prose(f"{pad_cells(k, label)}  {v}", BODY, BODY + " " * (label + 2))
    why = why_line(f)  # "Why: ...": the cause in words, after the figures and before the remedies
    if why:
        out.lines.append("")
        out.prose(why, BODY, BODY + " " * (cell_len(why) - cell_len(f.cause.summary if f.cause else "")))
    if f.remedies:
        out.lines.append("")
        out.lines.append(out.style(BODY + _("Remedies, best first:"), "bold"))
        command_shown = False
        for r in f.remedies:
            number = f"{r.rank}. "
            out.prose(number + r.title, BODY, BODY + " " * len(number), "bold")
            facts = f"{fits_label(r)} · {confidence_label(r.confidence)}"
            if r.saves_bytes:
                facts += " · " + _("saves {size}").format(size=format_size(r.saves_bytes))
            out.prose(facts, REMEDY)
            # the whole command under the first remedy that has one; after it, each remedy's flags
            # under their program's name (every command is in Markdown and JSON)
            command_shown = remedy_code(r, out, show_command=not command_shown) or command_shown
            for line in setting_lines(r):
                out.prose(line, REMEDY, REMEDY + "  ")
            for step in r.run:  # a command to run by hand: its label, then the command on its own line
                out.prose(step.label, REMEDY)
                out.code("$ " + step.command)
            if r.why:
                out.labelled(_("why:"), r.why, REMEDY)
            if r.tradeoff:
                out.labelled(_("cost:"), r.tradeoff, REMEDY, "dim")
    out.lines.append("")


def render_findings_text(findings: list[Finding], *, color: bool = False, width: int | None = None) -> str:
    """The sections of ``findings`` (no summary line): what pipe mode prints as they are found."""
    out = TextLayout(terminal_width(width), color)
    for f in findings:
        finding_lines(f, out)
    return "".join(line + "\n" for line in out.lines)


def brief_line(f: Finding) -> str:
    """``--brief``: one line per finding, never wrapped (terminals, CI logs, grep): where, kind,
    cause and the first remedy with its flags or command."""
    cause = f.cause.summary if f.cause is not None and f.cause.summary else f.title
    line = f"{where(f)}: {f.kind}: {' '.join(cause.split())}"
    if f.remedies:
        r = f.remedies[0]
        code = remedy_snippet(r) or (r.command or "") or (r.run[0].command if r.run else "")
        fix = f"{r.title}: {code}" if code else r.title
        line += " " + _("Fix: {fix}").format(fix=" ".join(fix.split()))
    return line


def render_brief_findings(findings: list[Finding], **_options: Any) -> str:
    return "".join(brief_line(f) + "\n" for f in findings)


def render_brief(report: Report, **_options: Any) -> str:
    """``--brief``: a line per finding, then the summary line of every text report."""
    return render_brief_findings(report.findings) + summary_line(report) + "\n"


def summary_line(report: Report) -> str:
    """The last line of every text report, in file, pipe and run modes alike."""
    from oomdoctor.render.common import result_text

    return _("oomdoctor: {result}.").format(result=result_text(report.summary.errors, report.summary.warnings))


def per_source_lines(report: Report) -> list[str]:
    """With several sources, one result line for each (``a.log: 1 out-of-memory failure, ...``)."""
    if len(report.sources) < 2:
        return []
    out = []
    for source in report.sources:
        mine = [f for f in report.findings if f.location.source == source]
        errors = sum(f.severity == "error" for f in mine)
        warnings = len(mine) - errors
        out.append(f"{source}: {result_text(errors, warnings)}")
    return out


def source_heading(source: str, facts: list[str], out: TextLayout) -> None:
    """The line above a source's findings when the report has several: its name and its run's facts."""
    text = " · ".join([source, *facts])
    if out.color:
        bar = "═" * max(3, out.width - cell_len(text) - 4)
        out.lines.append(out.style(f"══ {text} {bar}", "cyan", "bold"))
    else:
        out.lines.append(f"== {text} ==")
    out.lines.append("")


def render_text(report: Report, *, color: bool = False, width: int | None = None, **_options: Any) -> str:
    """The whole report: every finding (with several sources, under a heading for each source that
    has some, with that source's own facts), a result line per source when there are several, then
    :func:`summary_line`."""
    per_source = "".join(line + "\n" for line in per_source_lines(report))
    if len(report.sources) < 2:
        body = render_findings_text(report.findings, color=color, width=width)
    else:
        out = TextLayout(terminal_width(width), color)
        for source, findings in by_source(report):
            if findings:
                source_heading(source, facts_of(report.context_of(source)), out)
                for f in findings:
                    finding_lines(f, out)
        body = "".join(line + "\n" for line in out.lines)
    return body + per_source + healthy_text(report, width) + cut_note(report) + summary_line(report) + "\n"


def cut_note(report: Report) -> str:
    """:func:`~oomdoctor.render.common.cut_lines_text` as a line of its own (empty when no line was cut)."""
    from oomdoctor.render.common import cut_lines_text

    note = cut_lines_text(report)
    return note + "\n" if note else ""


def healthy_text(report: Report, width: int | None = None) -> str:
    """A run without an out-of-memory failure is an answer too: what its log shows of the memory
    (:func:`~oomdoctor.render.common.healthy_facts`), with a warning when the headroom is thin.
    Empty with a failure, several sources or nothing to show."""
    from oomdoctor.render.common import healthy_facts

    if report.summary.errors or len(report.sources) > 1:
        return ""
    rows, warnings = healthy_facts(report.context)
    if not rows:
        return ""
    out = TextLayout(terminal_width(width), False)
    out.lines.append(_("What the log shows:"))
    label = max(cell_len(k) for k, _v in rows)
    for k, v in rows:
        out.prose(f"{pad_cells(k, label)}  {v}", BODY, BODY + " " * (label + 2))
    for w in warnings:
        out.prose(_("Warning: {warning}").format(warning=w), BODY, BODY + "  ")
    out.lines.append("")
    return "".join(line + "\n" for line in out.lines)
