"""Committed JSON Schemas must match the pydantic models they are generated from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

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


LOGS = sorted((ROOT / "fixtures").glob("*/*.log"))


@pytest.fixture(scope="module")
def report_validator() -> Any:
    import jsonschema

    schema = json.loads((ROOT / "oomdoctor" / "report.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.fixture(scope="module")
def jsonl_validator() -> Any:
    import jsonschema

    schema = json.loads((ROOT / "oomdoctor" / "report-jsonl.schema.json").read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_fixture_report_validates_against_the_report_schema(
    log: Path, report_validator: Any, jsonl_validator: Any
) -> None:
    import oomdoctor
    from oomdoctor.render.json import render_jsonl

    diagnosed = oomdoctor.diagnose(log.read_bytes())
    report = json.loads(diagnosed.model_dump_json())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in report_validator.iter_errors(report)]
    assert not errors, errors
    # the same report as -f jsonl: every record validates against the published jsonl schema
    for line in render_jsonl(diagnosed).splitlines():
        record = json.loads(line)
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in jsonl_validator.iter_errors(record)]
        assert not errors, (record.get("type"), errors)


def test_every_fixture_is_validated() -> None:
    # the glob above is the whole fixture set, not a sample (it once stopped at the first 60)
    assert len(LOGS) == len(list((ROOT / "fixtures").rglob("*.log")))


def test_jsonl_schema_is_generated_from_models() -> None:
    from oomdoctor.render.json import jsonl_json_schema

    committed = json.loads((ROOT / "oomdoctor" / "report-jsonl.schema.json").read_text())
    assert committed == jsonl_json_schema(), "run: python -m oomdoctor.render.json"


def test_the_jsonl_schema_tells_records_apart(jsonl_validator: Any) -> None:
    import oomdoctor
    from oomdoctor.render.json import render_jsonl

    log = ROOT / "fixtures" / "vllm" / "vllm-054.log"
    kinds = {json.loads(line)["type"] for line in render_jsonl(oomdoctor.diagnose(log.read_bytes())).splitlines()}
    assert kinds == {"finding", "summary"}
    assert list(jsonl_validator.iter_errors({"type": "finding", "rule": "x"})), "an incomplete record must not validate"
