"""Slack Block Kit renderer (section text ≤ 3000 characters, ≤ 50 blocks)."""

from __future__ import annotations

import json
from typing import Any

from oomdoctor.render.common import figure_items, fits_label, remedy_snippet, where
from oomdoctor.report import Report

MAX_TEXT = 3000
MAX_BLOCKS = 50


def _section(text: str) -> dict[str, Any]:
    if len(text) > MAX_TEXT:
        text = text[: MAX_TEXT - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def render_slack_blocks(report: Report) -> dict[str, Any]:
    """Return a Slack message payload: ``{"text": fallback, "blocks": [...]}``."""
    errors = sum(f.severity == "error" for f in report.findings)
    if not report.findings:
        summary = "oomdoctor: no out-of-memory failure found."
    else:
        summary = f"oomdoctor: {errors} out-of-memory failure(s), {len(report.findings) - errors} warning(s)"
    blocks: list[dict[str, Any]] = [_section(f"*{summary}*")]
    for f in report.findings:
        figs = " · ".join(f"{k}: *{v}*" for k, v in figure_items(f)[:8])
        head = f"*{f.title}*\n`{f.kind}` · phase *{f.phase}* · {where(f)}" + (f"\n{figs}" if figs else "")
        blocks.append({"type": "divider"})
        blocks.append(_section(head))
        lines = []
        for r in f.remedies[:5]:
            snippet = remedy_snippet(r)
            lines.append(f"{r.rank}. {r.title}" + (f": `{snippet}`" if snippet else "") + f" _({fits_label(r)})_")
        if lines:
            blocks.append(_section("\n".join(lines)))
        if len(blocks) >= MAX_BLOCKS - 1:
            break
    return {"response_type": "in_channel", "text": summary, "blocks": blocks[:MAX_BLOCKS]}


def render_slack_json(report: Report, **_: Any) -> str:
    return json.dumps(render_slack_blocks(report), indent=2) + "\n"
