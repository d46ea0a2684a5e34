"""Renderers: each reads a :class:`~oomdoctor.report.Report` and returns text (or blocks)."""

from __future__ import annotations

from collections.abc import Callable

FORMATS = ("text", "json", "jsonl", "markdown", "slack")


def renderer(fmt: str) -> Callable[..., str]:
    """Return ``render(report, **options) -> str`` for a format name."""
    if fmt == "json":
        from oomdoctor.render.json import render_json

        return render_json
    if fmt == "jsonl":
        from oomdoctor.render.json import render_jsonl

        return render_jsonl
    if fmt == "markdown":
        from oomdoctor.render.markdown import render_markdown

        return render_markdown
    if fmt == "slack":
        from oomdoctor.render.slack import render_slack_json

        return render_slack_json
    if fmt == "text":
        from oomdoctor.render.text import render_text

        return render_text
    if fmt == "brief":  # --brief: text, a line per finding (not a --format of its own)
        from oomdoctor.render.text import render_brief

        return render_brief
    raise ValueError(f"unknown format {fmt!r} (choose {', '.join(FORMATS)})")


__all__ = ["FORMATS", "renderer"]
