"""Markdown renderer (GitHub issues, Mattermost, the HTTP service).

Flags and commands are code spans/blocks (copy-paste safe); the matched log line is a fenced
block so ``*``, ``_`` and ``<`` in it are not read as Markdown. ``max_chars`` keeps the whole
answer under a chat limit (Mattermost: 16383) by dropping whole findings, with a note saying so.
"""

from __future__ import annotations

from typing import Any

from oomdoctor.i18n import _
from oomdoctor.render.common import (
    by_source,
    code_label,
    code_text,
    colon,
    cut_lines_text,
    facts_of,
    failures_text,
    figure_items,
    occurrences_note,
    phase_text,
    product_name,
    remedy_headline,
    result_text,
    setting_lines,
    shown_codes,
    where,
)
from oomdoctor.render.why import labelled_text, why_line
from oomdoctor.report import Finding, Remedy, Report

MESSAGE_CHARS = 600


def code_span(text: str) -> str:
    """``text`` as an inline code span, whatever backticks it contains."""
    text = text.replace("\n", " ")
    run = longest = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def code_block(text: str, lang: str = "") -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text}\n{fence}"


def remedy_code_markdown(r: Remedy) -> list[str]:
    """A remedy's code as fenced blocks in its list item, each with its language (``shell``,
    ``python``, ``json``, ``yaml``) under its label: the whole command when the remedy has one (it
    carries the env and flags), then the settings' lines."""
    out: list[str] = []
    blocks: list[tuple[str, str, str]] = []
    if r.command:
        blocks.append((_("command:"), "shell", r.command))
    for line in shown_codes(r, command=True):
        blocks.append((code_label(line), line.language, code_text(line).removeprefix("$ ")))
    for label, lang, text in blocks:
        if label:
            out.append(f"   - {label}")
        out.extend("     " + row for row in code_block(text, lang).split("\n"))
    return out


def summary_line(report: Report) -> str:
    return findings_summary(report.findings)


def findings_summary(findings: list[Finding]) -> str:
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    if errors and not warnings:
        return failures_text(errors)
    return result_text(errors, warnings)


def context_facts(report: Report) -> list[str]:
    """The facts of the report's run (with several sources, those they all state alike)."""
    return facts_of(report.context)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def location_text(f: Finding) -> str:
    """``line 12`` for a pasted log (source ``<stdin>``, ``<request>``), ``server.log:12`` for a file."""
    loc = f.location
    span = f"{loc.line}" if loc.end_line == loc.line else f"{loc.line}-{loc.end_line}"
    return _("line {span}").format(span=span) if loc.source.startswith("<") else where(f)


def finding_markdown(f: Finding) -> str:
    out: list[str] = []
    sev = "❌" if f.severity == "error" else "⚠️"
    occ = occurrences_note(f)
    out.append(f"### {sev} {f.title}")
    product = ""
    if f.product:
        product = " · " + _("product: {product}").format(product=f"**{product_name(f.product)}**")
    out.append(f"{code_span(f.kind)} · " + _("phase **{phase}**").format(phase=phase_text(f.phase)) + product
               + f" · {location_text(f)}" + (f" · {occ}" if occ else ""))
    out.append("")
    out.append(code_block(_clip(f.message, MESSAGE_CHARS)))
    items = figure_items(f)
    if items:
        out.append("")
        out.append(" · ".join(f"{k}{colon()}**{v}**" for k, v in items))
    why = why_line(f)
    if why:
        out.append("")
        out.append(why)
    if f.remedies:
        out.append("")
        out.append("**" + _("Try, in this order:") + "**")
        for r in f.remedies:
            out.append(remedy_headline(r))
            out.extend(remedy_code_markdown(r))
            out.extend(f"   - {line}" for line in setting_lines(r))
            if r.why:
                out.append("   - " + labelled_text(_("why:"), r.why))
            if r.tradeoff:
                out.append("   - " + labelled_text(_("cost:"), r.tradeoff))
            for step in r.run:
                out.append("   - " + labelled_text(step.label, code_span(step.command)))
    return "\n".join(out)


def _parts(report: Report) -> list[tuple[str, bool]]:
    """The report after its headline, as (text, is a finding) pieces. With several sources, each
    source is a section of its own: its name, its result and facts, then its findings."""
    if len(report.sources) < 2:
        return [("\n\n" + finding_markdown(f), True) for f in report.findings]
    parts: list[tuple[str, bool]] = []
    for source, findings in by_source(report):
        facts = facts_of(report.context_of(source))
        head = f"\n\n## {code_span(source)}{colon()}{findings_summary(findings)}"
        parts.append((head + ("\n_" + " · ".join(facts) + "_" if facts else ""), False))
        parts.extend(("\n\n" + finding_markdown(f), True) for f in findings)
    return parts


def render_markdown(report: Report, *, max_chars: int | None = None, **_options: Any) -> str:
    head = [f"**oomdoctor**{colon()}{summary_line(report)}"]
    if report.summary.cut_lines:
        head.append(cut_lines_text(report))
    facts = context_facts(report)
    if facts:
        head.append("_" + " · ".join(facts) + "_")
    text = "\n".join(head)
    shown = 0
    for part, is_finding in _parts(report):
        rest = len(report.findings) - shown
        note = "\n\n_" + _(
            "…{rest} more finding(s) not shown (message size limit); run "
            "`oomdoctor --format markdown` on the log for the full report."
        ).format(rest=rest) + "_"
        if max_chars is not None and len(text) + len(part) + len(note) + 1 > max_chars:
            if not rest:  # only sections without findings are left: their heads are dropped quietly
                break
            if shown == 0 and is_finding:  # at least the first finding, clipped
                room = max_chars - len(text) - len(note) - 2
                if room > 200:
                    text += _clip(part, room)
            text += note
            break
        text += part
        shown += is_finding
    return text + "\n"
