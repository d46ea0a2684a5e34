"""Committed JSON Schemas must match the pydantic models they are generated from."""

from __future__ import annotations

import json

from oomdoctor.report import report_json_schema
from oomdoctor.rulepack.loader import builtin_rules_dir
from oomdoctor.rulepack.schema import schema_text
from tests.corpus import ROOT


def test_rule_schema_is_generated_from_models() -> None:
    committed = (builtin_rules_dir() / "schema.json").read_text()
    assert committed == schema_text(), "run: python -m oomdoctor.rulepack.schema"


def test_report_schema_is_generated_from_models() -> None:
    committed = json.loads((ROOT / "oomdoctor" / "report.schema.json").read_text())
    assert committed == report_json_schema(), "run: python -c \"from oomdoctor.report import main; main()\""


def test_every_fixture_report_validates_against_the_report_schema() -> None:
    import jsonschema

    import oomdoctor

    schema = json.loads((ROOT / "oomdoctor" / "report.schema.json").read_text())
    for log in sorted((ROOT / "fixtures").glob("*/*.log"))[:60]:
        report = json.loads(oomdoctor.diagnose(log.read_bytes()).model_dump_json())
        jsonschema.validate(report, schema)


def test_jsonl_schema_is_generated_from_models() -> None:
    from oomdoctor.render.json import jsonl_json_schema

    committed = json.loads((ROOT / "oomdoctor" / "report-jsonl.schema.json").read_text())
    assert committed == jsonl_json_schema(), "run: python -m oomdoctor.render.json"


def test_every_jsonl_record_validates_against_the_published_schema() -> None:
    import jsonschema

    import oomdoctor
    from oomdoctor.render.json import render_jsonl

    schema = json.loads((ROOT / "oomdoctor" / "report-jsonl.schema.json").read_text())
    kinds = set()
    for log in sorted((ROOT / "fixtures").glob("*/*.log"))[:60]:
        for line in render_jsonl(oomdoctor.diagnose(log.read_bytes())).splitlines():
            record = json.loads(line)
            jsonschema.validate(record, schema)
            kinds.add(record["type"])
    assert kinds == {"finding", "summary"}
    bad = {"type": "finding", "rule": "x"}
    try:
        jsonschema.validate(bad, schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("an incomplete record must not validate")
