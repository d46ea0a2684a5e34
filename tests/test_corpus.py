"""Real logs from public bug reports: kind, phase and every figure exactly as labelled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oomdoctor
from tests.corpus import PHASE_ALIASES, expected_figures, labelled_cases, log_for

CASES = labelled_cases()


def _id(p: Path) -> str:
    return p.name.replace(".label.json", "")


@pytest.mark.parametrize("label_path", CASES, ids=_id)
def test_corpus_case(label_path: Path) -> None:
    label = json.loads(label_path.read_text())
    report = oomdoctor.diagnose(log_for(label_path).read_bytes(), source=log_for(label_path).name)
    errors = [f for f in report.findings if f.severity == "error"]
    if label["kind"] == "not-oom":
        assert not errors, f"healthy log produced {[f.rule for f in errors]}"
        return
    assert errors, "no error finding"
    kinds = [f.kind for f in errors]
    assert label["kind"] in kinds, f"expected {label['kind']}, got {kinds}"
    f = next(f for f in errors if f.kind == label["kind"])
    want_phase = PHASE_ALIASES.get(label["phase"], label["phase"])
    assert f.phase == want_phase
    want = expected_figures(label)
    got = {k: f.figures.get(k) for k in want}
    assert got == want
