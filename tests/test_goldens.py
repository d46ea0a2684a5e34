"""Golden reports: the whole JSON report of each fixture log, regenerated only by --update-goldens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oomdoctor
from tests.corpus import FIXTURES

LOGS = sorted(FIXTURES.glob("*/*.log"))


def _report_json(log: Path) -> dict:
    report = oomdoctor.diagnose(log.read_bytes(), source=f"{log.parent.name}/{log.name}")
    return json.loads(report.model_dump_json())


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden(log: Path, update_goldens: bool) -> None:
    golden = log.with_suffix(".expected.json")
    got = _report_json(log)
    if update_goldens:
        golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
        return
    assert golden.exists(), f"no golden for {log.name}: run pytest --update-goldens and review it"
    assert got == json.loads(golden.read_text())
