"""JSON and JSON Lines renderers."""

from __future__ import annotations

import json
from typing import Any

from oomdoctor.report import Finding, Report


def render_json(report: Report, **_: Any) -> str:
    return report.model_dump_json(indent=2) + "\n"


def finding_jsonl(finding: Finding) -> str:
    return json.dumps({"type": "finding", **finding.model_dump(mode="json")}, separators=(",", ":")) + "\n"


def render_jsonl(report: Report, **_: Any) -> str:
    """One ``finding`` object per line, then one ``summary`` line with context and counts."""
    lines = [finding_jsonl(f) for f in report.findings]
    tail = {
        "type": "summary",
        "schema_version": report.schema_version,
        "tool": report.tool.model_dump(),
        "sources": report.sources,
        "context": report.context.model_dump(mode="json", exclude_none=True),
        "summary": report.summary.model_dump(),
    }
    lines.append(json.dumps(tail, separators=(",", ":")) + "\n")
    return "".join(lines)
