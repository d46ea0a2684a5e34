"""Slack Block Kit renderer.

Stays inside Slack's limits: section text ≤ 3000 characters, section fields ≤ 10 of ≤ 2000
characters, header ≤ 150, ≤ 50 blocks, and a total text budget well under the ~13 k characters
at which Slack starts refusing messages (``msg_blocks_too_long``). Flags are code spans, the
matched log line is a code block, and dynamic text is escaped (``& < >``) as Slack requires.
Findings that do not fit are not cut mid-way: a closing context block says how many were left
out and how to get the details; ``text`` is the plain fallback for notifications.
"""

from __future__ import annotations

import json
from typing import Any

from oomdoctor.i18n import _
from oomdoctor.render.common import (
    code_label,
    code_text,
    colon,
    figure_items,
    occurrences_note,
    phase_text,
    remedy_headline,
    remedy_snippet,
    setting_lines,
    shown_codes,
)
from oomdoctor.render.markdown import context_facts, location_text, summary_line
from oomdoctor.render.why import labelled_text, why_line
from oomdoctor.report import Finding, Report

MAX_TEXT = 3000
MAX_BLOCKS = 50
MAX_FIELDS = 10
MAX_FIELD = 2000
MAX_HEADER = 150
#: total characters of text across all blocks
MAX_TOTAL = 12000
MESSAGE_CHARS = 500


def esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code(text: str) -> str:
    """An inline code span (Slack has no escape for a backtick inside one)."""
    return "`" + esc(text.replace("`", "'").replace("\n", " ")) + "`"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, MAX_TEXT)}}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _clip(text, MAX_TEXT)}]}


def _chunks(lines: list[str], limit: int = MAX_TEXT) -> list[str]:
    """Join lines into texts of at most ``limit`` characters, never splitting a line (unless alone)."""
    out: list[str] = []
    cur = ""
    for line in lines:
        line = _clip(line, limit)
        if cur and len(cur) + 1 + len(line) > limit:
            out.append(cur)
            cur = line
        else:
            cur = f"{cur}\n{line}" if cur else line
    if cur:
        out.append(cur)
    return out


def finding_blocks(f: Finding, max_remedies: int = 6) -> list[dict[str, Any]]:
    sev = ":x:" if f.severity == "error" else ":warning:"
    occ = occurrences_note(f)
    head = (
        f"{sev} *{esc(f.title)}*\n{code(f.kind)} · " + _("phase *{phase}*").format(phase=esc(phase_text(f.phase)))
        + f" · {esc(location_text(f))}"
        + (f" · {esc(occ)}" if occ else "")
    )
    blocks: list[dict[str, Any]] = [{"type": "divider"}, _section(head)]
    msg = _clip(f.message, MESSAGE_CHARS).replace("```", "'''")
    blocks.append(_section(f"```{esc(msg)}```"))
    items = figure_items(f)
    if items:
        fields = [
            {"type": "mrkdwn", "text": _clip(f"*{esc(k)}*\n{esc(v)}", MAX_FIELD)} for k, v in items[:MAX_FIELDS]
        ]
        blocks.append({"type": "section", "fields": fields})
    lines: list[str] = []
    why = why_line(f)
    if why:
        lines.append(esc(why))
    if f.remedies:
        lines.append("*" + _("Try, in this order:") + "*")
    command_shown = False
    for r in f.remedies[:max_remedies]:
        lines.append(remedy_headline(r, esc))
        # as in text: the whole command under the first remedy that has one, the flags after it
        show_command = bool(r.command) and not command_shown
        for line in shown_codes(r, show_command):
            label = code_label(line)
            gap = "" if not label or label.endswith("：") else " "  # no space after a full-width colon
            lines.append("      " + esc(label) + gap + code(code_text(line)))
        if show_command:
            lines.append("      " + code("$ " + (r.command or "")))
            command_shown = True
        lines.extend(f"      {esc(line)}" for line in setting_lines(r))
        if r.why:
            lines.append(f"      _{esc(_clip(r.why, 300))}_")
        for step in r.run:
            lines.append("      " + labelled_text(esc(step.label), code(step.command)))
    if len(f.remedies) > max_remedies:
        lines.append("_" + _("…and {n} more remedies (see the full report).").format(n=len(f.remedies) - max_remedies) + "_")
    blocks += [_section(t) for t in _chunks(lines)]
    return blocks


def _size(blocks: list[dict[str, Any]]) -> int:
    return len(json.dumps(blocks, ensure_ascii=False))


def fallback_text(report: Report) -> str:
    text = f"oomdoctor{colon()}{summary_line(report)}"
    errors = [f for f in report.findings if f.severity == "error"] or report.findings
    if errors:
        f = errors[0]
        text += f" — {f.kind}"
        if f.remedies and remedy_snippet(f.remedies[0]):
            text += _(": try {snippet}").format(snippet=remedy_snippet(f.remedies[0]))
    return _clip(text, MAX_TEXT)


def render_slack_blocks(report: Report, *, response_type: str | None = None) -> dict[str, Any]:
    """A Slack message payload ``{"text": fallback, "blocks": [...]}`` (plus ``response_type`` if given)."""
    icon = ":rotating_light:" if report.has_errors else (":warning:" if report.findings else ":white_check_mark:")
    header = {
        "type": "header",
        "text": {"type": "plain_text", "text": _clip(f"{icon} oomdoctor{colon()}{summary_line(report)}", MAX_HEADER), "emoji": True},
    }
    blocks: list[dict[str, Any]] = [header]
    facts = context_facts(report)
    if facts:
        blocks.append(_context(" · ".join(esc(x) for x in facts)))
    shown = 0
    for f in report.findings:
        fb = finding_blocks(f)
        # keep one block and some room free for the "details" note
        if len(blocks) + len(fb) > MAX_BLOCKS - 1 or _size(blocks + fb) > MAX_TOTAL - 400:
            fb = finding_blocks(f, max_remedies=2)
            if shown or len(blocks) + len(fb) > MAX_BLOCKS - 1 or _size(blocks + fb) > MAX_TOTAL - 400:
                break
        blocks += fb
        shown += 1
    left = len(report.findings) - shown
    if left:
        blocks.append(
            _context(
                _(
                    "…{left} more finding(s) not shown (Slack message limits). Details: run "
                    "`oomdoctor --format markdown` on the log, or POST it to `/v1/diagnose`."
                ).format(left=left)
            )
        )
    payload: dict[str, Any] = {"text": fallback_text(report), "blocks": blocks}
    if response_type:
        payload = {"response_type": response_type, **payload}
    return payload


def render_slack_json(report: Report, **_options: Any) -> str:
    return json.dumps(render_slack_blocks(report), indent=2, ensure_ascii=False) + "\n"
