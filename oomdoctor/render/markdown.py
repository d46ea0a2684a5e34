"""Markdown renderer (chat, issues, the HTTP service)."""

from __future__ import annotations

from typing import Any

from oomdoctor.render.common import figure_items, fits_label, occurrences_note, remedy_snippet, where
from oomdoctor.report import Report
from oomdoctor.units import format_size


def render_markdown(report: Report, **_: Any) -> str:
    out: list[str] = []
    errors = [f for f in report.findings if f.severity == "error"]
    if not report.findings:
        out.append("**oomdoctor**: no out-of-memory failure found.")
        return "\n".join(out) + "\n"
    out.append(
        f"**oomdoctor**: {len(errors)} out-of-memory failure(s), "
        f"{len(report.findings) - len(errors)} warning(s)"
    )
    ctx = report.context
    facts = [
        x
        for x in (
            ctx.engine and f"engine {ctx.engine}{' ' + ctx.engine_version if ctx.engine_version else ''}",
            ctx.model and f"model `{ctx.model}`",
            ctx.gpu_name,
            ctx.gpu_total_bytes and f"{format_size(ctx.gpu_total_bytes)} GPU",
        )
        if x
    ]
    if facts:
        out.append("_" + " · ".join(str(f) for f in facts) + "_")
    for f in report.findings:
        out.append("")
        sev = "❌" if f.severity == "error" else "⚠️"
        occ = occurrences_note(f)
        out.append(f"### {sev} {f.title}")
        out.append(f"`{f.kind}` · phase **{f.phase}** · {where(f)}" + (f" · {occ}" if occ else ""))
        out.append("")
        out.append(f"> {f.message[:600]}")
        items = figure_items(f)
        if items:
            out.append("")
            out.append(" · ".join(f"{k}: **{v}**" for k, v in items))
        if f.remedies:
            out.append("")
            out.append("**Try, in this order:**")
            for r in f.remedies:
                snippet = remedy_snippet(r)
                saves = f", saves {format_size(r.saves_bytes)}" if r.saves_bytes else ""
                out.append(f"{r.rank}. {r.title}" + (f": `{snippet}`" if snippet else "") + f" ({fits_label(r)}{saves})")
                if r.why:
                    out.append(f"   - why: {r.why}")
                if r.tradeoff:
                    out.append(f"   - cost: {r.tradeoff}")
                if r.command:
                    out.append(f"   - command: `{r.command}`")
    return "\n".join(out) + "\n"
