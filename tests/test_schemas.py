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


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_fixture_report_validates_against_the_report_schema(log: Path, report_validator: Any) -> None:
    import oomdoctor

    report = json.loads(oomdoctor.diagnose(log.read_bytes()).model_dump_json())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in report_validator.iter_errors(report)]
    assert not errors, errors


def test_every_fixture_is_validated() -> None:
    # the glob above is the whole fixture set, not a sample (it once stopped at the first 60)
    assert len(LOGS) == len(list((ROOT / "fixtures").rglob("*.log")))
