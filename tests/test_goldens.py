"""Golden reports: the whole JSON report of each fixture log, regenerated only by --update-goldens.

A golden is grounded in its label: ``--update-goldens`` refuses to write one whose report
contradicts the fixture's ``.label.json`` (kind, extra error findings, phase, a labelled figure, the
fix that worked) unless tests/corpus_divergences.json records that very divergence. Fix the tool
or the label, or record the divergence (``pytest tests/test_corpus.py --update-divergences``) and
review it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.corpus import (
    FIXTURES,
    describe,
    fixture_report,
    label_for,
    load_divergences,
    load_label,
    unrecorded,
    wanted,
)

LOGS = sorted(FIXTURES.glob("*/*.log"))


def _report_json(log: Path) -> dict:
    return json.loads(fixture_report(log).model_dump_json())  # a fresh dict: callers may change it


def contradictions(log: Path, report: dict) -> list[str]:
    """Why the report may not become this log's golden: one line per unrecorded contradiction."""
    label_path = label_for(log)
    if not label_path.exists():
        return []
    label = load_label(label_path)
    out = []
    for aspect, got in unrecorded(log.stem, label, report, load_divergences()).items():
        out.append(f"{describe(aspect)}: the label says {wanted(label, aspect)!r}, the report says {got!r}")
    return out


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden(log: Path, update_goldens: bool) -> None:
    golden = log.with_suffix(".expected.json")
    got = _report_json(log)
    if update_goldens:
        refused = contradictions(log, got)
        if refused:
            pytest.fail(
                f"refusing to write {golden.relative_to(FIXTURES)}: it would contradict "
                f"{label_for(log).name}, and no known divergence records it:\n  - "
                + "\n  - ".join(refused)
                + "\nFix the tool or the label; or, if the tool is knowingly behind, record it "
                "(python -m pytest tests/test_corpus.py --update-divergences) and review that diff.",
                pytrace=False,
            )
        golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
        return
    assert golden.exists(), f"no golden for {log.name}: run pytest --update-goldens and review it"
    assert got == json.loads(golden.read_text())


def test_update_refuses_a_golden_that_contradicts_its_label(tmp_path: Path) -> None:
    # other-011: the label's kind is torch.cuda-oom with requested = 172.00 MiB = 180355072 bytes
    log = FIXTURES / "deepspeed" / "other-011.log"
    report = _report_json(log)
    assert contradictions(log, report) == []
    bad = json.loads(json.dumps(report))
    bad["findings"][0]["figures"]["requested_bytes"] = 180355073
    bad["findings"][0]["kind"] = "torch.hip-oom"
    got = contradictions(log, bad)
    assert "kind: the label says 'torch.cuda-oom', the report says 'torch.hip-oom'" in got
    assert "figure requested: the label says 180355072, the report says 180355073" in got


def test_update_accepts_a_recorded_divergence_only_as_recorded() -> None:
    # other-026's label says trtllm.oom; the excerpt is a plain PyTorch OOM (recorded divergence)
    log = FIXTURES / "trtllm" / "other-026.log"
    report = _report_json(log)
    assert contradictions(log, report) == []
    moved = json.loads(json.dumps(report))
    moved["findings"] = []
    assert any(line.startswith("kind:") for line in contradictions(log, moved))
