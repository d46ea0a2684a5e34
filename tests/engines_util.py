"""Helpers for the engine tests: diagnose a fixture, pick findings and remedies."""

from __future__ import annotations

from typing import Any

import oomdoctor
from oomdoctor.report import Finding, Remedy, Report
from tests.corpus import FIXTURES


def diagnose(rel: str, **hints: str) -> Report:
    path = FIXTURES / rel
    return oomdoctor.diagnose(path.read_bytes(), source=path.name, hints=hints or None)


def diagnose_text(text: str) -> Report:
    return oomdoctor.diagnose(text.encode(), source="<test>")


def errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity == "error"]


def only_error(report: Report) -> Finding:
    errs = errors(report)
    assert len(errs) == 1, [f.rule for f in errs]
    return errs[0]


def remedy(finding: Finding, rid: str) -> Remedy:
    for r in finding.remedies:
        if r.id == rid:
            return r
    raise AssertionError(f"no remedy {rid}; got {[r.id for r in finding.remedies]}")


def remedy_ids(finding: Finding) -> list[str]:
    return [r.id for r in finding.remedies]


def figures(finding: Finding, *names: str) -> dict[str, Any]:
    return {n: finding.figures.get(n) for n in names}
