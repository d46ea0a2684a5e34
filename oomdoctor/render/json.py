"""JSON and JSON Lines renderers."""

from __future__ import annotations

import json
from typing import Any

from oomdoctor.report import Finding, Report, report_json_schema


def render_json(report: Report, **_: Any) -> str:
    return report.model_dump_json(indent=2) + "\n"


def finding_jsonl(finding: Finding) -> str:
    return json.dumps({"type": "finding", **finding.model_dump(mode="json")}, separators=(",", ":")) + "\n"


def render_jsonl(report: Report, **_: Any) -> str:
    """One ``finding`` object per line, then one ``summary`` line with the context (one per source too) and counts."""
    return "".join(finding_jsonl(f) for f in report.findings) + jsonl_summary(report)


def jsonl_summary(report: Report) -> str:
    """The closing ``summary`` record of ``-f jsonl`` (written last: the findings stream before it)."""
    tail = {
        "type": "summary",
        "schema_version": report.schema_version,
        "tool": report.tool.model_dump(),
        "sources": report.sources,
        "context": report.context.model_dump(mode="json", exclude_none=True),
        "contexts": [c.model_dump(mode="json", exclude_none=True) for c in report.contexts],
        "summary": report.summary.model_dump(),
        "lang": report.lang,
    }
    if report.cut_lines:
        tail["cut_lines"] = [c.model_dump() for c in report.cut_lines]
    return json.dumps(tail, separators=(",", ":")) + "\n"


def jsonl_json_schema() -> dict[str, Any]:
    """The JSON Schema every ``-f jsonl`` line validates against (committed as
    ``oomdoctor/report-jsonl.schema.json``): a ``finding`` record or the closing ``summary``."""
    defs = report_json_schema()["$defs"]
    finding = json.loads(json.dumps(defs["Finding"]))
    finding["title"] = "FindingRecord"
    finding["properties"] = {"type": {"const": "finding"}, **finding["properties"]}
    finding["required"] = ["type", *finding.get("required", [])]
    summary = {
        "title": "SummaryRecord",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "type": {"const": "summary"},
            "schema_version": {"type": "integer"},
            "tool": {"$ref": "#/$defs/Tool"},
            "sources": {"type": "array", "items": {"type": "string"}},
            "context": {"$ref": "#/$defs/Context"},
            "contexts": {"type": "array", "items": {"$ref": "#/$defs/SourceContext"}},
            "summary": {"$ref": "#/$defs/Summary"},
            "lang": {"type": "string", "description": "The language of the human text (en or ja)."},
            "cut_lines": {"type": "array", "items": {"$ref": "#/$defs/CutLine"}},
        },
        "required": ["type", "schema_version", "tool", "sources", "context", "summary"],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "oomdoctor -f jsonl record",
        "oneOf": [{"$ref": "#/$defs/FindingRecord"}, {"$ref": "#/$defs/SummaryRecord"}],
        "$defs": {**defs, "FindingRecord": finding, "SummaryRecord": summary},
    }


def main() -> None:
    """Write ``oomdoctor/report-jsonl.schema.json``."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "report-jsonl.schema.json"
    path.write_text(json.dumps(jsonl_json_schema(), indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    main()
