"""Real logs from public bug reports, checked against their labels aspect by aspect.

Each labelled fixture yields one test per aspect (kind, extra error findings, phase, each labelled
figure, the named fix; see tests/corpus.py), so a case that diverges on one aspect is still checked
on all the others. A known divergence is recorded in tests/corpus_divergences.json with the tool's
current value, and that value is asserted: if the tool changes there, in either direction, the
test fails until the file is rewritten (``pytest tests/test_corpus.py --update-divergences``) and
the diff reviewed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus import (
    DIVERGENCES_FILE,
    agrees,
    aspects,
    case_id,
    labelled_cases,
    load_divergences,
    load_label,
    log_for,
    observe,
    report_for,
    wanted,
)

CASES = labelled_cases()
DIVERGENCES = load_divergences()
REWRITE = "python -m pytest tests/test_corpus.py --update-divergences"


def _params() -> list[object]:
    return [
        pytest.param(p, aspect, id=f"{case_id(p)}-{aspect}")
        for p in CASES
        for aspect in aspects(load_label(p))
    ]


@pytest.mark.parametrize(("label_path", "aspect"), _params())
def test_corpus_aspect(label_path: Path, aspect: str) -> None:
    label = load_label(label_path)
    got = observe(label, report_for(log_for(label_path)))[aspect]
    known = DIVERGENCES.get(case_id(label_path), {}).get(aspect)
    if known is None:
        assert agrees(label, aspect, got), f"{aspect}: label says {wanted(label, aspect)!r}, the tool says {got!r}"
        return
    assert not agrees(label, aspect, got), (
        f"{aspect} now agrees with the label: drop the known divergence ({REWRITE})"
    )
    assert got == known["tool"], (
        f"{aspect}: the recorded divergence was {known['tool']!r}, the tool now says {got!r} "
        f"(label: {wanted(label, aspect)!r}); if this is intended: {REWRITE}"
    )


def test_every_recorded_divergence_names_a_case_and_aspect() -> None:
    by_id = {case_id(p): p for p in CASES}
    stale = [
        f"{case}/{aspect}"
        for case, entries in DIVERGENCES.items()
        for aspect in entries
        if case not in by_id or aspect not in aspects(load_label(by_id[case]))
    ]
    assert not stale, f"{DIVERGENCES_FILE.name} holds entries for no labelled aspect: {stale}"


def test_every_recorded_divergence_carries_a_reason() -> None:
    # a divergence nobody explained is an expected answer nobody reviewed: write why the tool and
    # the label differ (what each reads, or what the excerpt cuts) in its "reason"
    unexplained = [
        f"{case}/{aspect}"
        for case, entries in DIVERGENCES.items()
        for aspect, entry in entries.items()
        if not isinstance(entry.get("reason"), str) or not entry["reason"].strip()
    ]
    assert not unexplained, f"{DIVERGENCES_FILE.name}: write a reason for {unexplained}"


def test_every_labelled_case_is_checked_on_kind_or_cleanliness() -> None:
    # a label the aspect list would silently skip (no kind) is a broken fixture
    for p in CASES:
        got = aspects(load_label(p))
        assert "kind" in got or got == ["clean"], p.name
