"""The fallback detector's precision: healthy lines and logs give no error finding.

Healthy lines are the upstream catalog's informational entries (tests/data/healthy-upstream-lines.json,
copied from shared/research/upstream-catalog.json), memory-related lines collected from the engines'
healthy output (tests/data/healthy-memory-lines.txt), the memory-related lines of the engines' own
logger calls (tests/data/healthy-engine-source-lines.txt, from the vLLM and SGLang wheels), and every healthy fixture (label kind
``not-oom``). The fallback's own no_match examples (informational lines) are run by
tests/test_rule_examples.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.fallback import is_fallback
from oomdoctor.rulepack import default_pack
from tests.corpus import FIXTURES

DATA = Path(__file__).resolve().parent / "data"
UPSTREAM = json.loads((DATA / "healthy-upstream-lines.json").read_text(encoding="utf-8"))["lines"]
COLLECTED = [
    line
    for line in (DATA / "healthy-memory-lines.txt").read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.startswith("#")
]


def _sourced(path: Path) -> list[tuple[str, str]]:
    """(source, line) pairs of a file where each line follows a "# <package> <version> <file>:<n>" comment."""
    out, source = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# ") and ".py:" in line:
            source = line[2:]
        elif line.strip() and not line.startswith("#"):
            out.append((source, line))
    return out


#: healthy lines instantiated from the engines' own logger calls, each with the call it comes from
FROM_SOURCES = _sourced(DATA / "healthy-engine-source-lines.txt")
HEALTHY_FIXTURES = sorted(
    p.with_name(p.name.replace(".label.json", ".log"))
    for p in FIXTURES.glob("*/*.label.json")
    if json.loads(p.read_text(encoding="utf-8")).get("kind") == "not-oom"
)


def _errors(text: bytes) -> list[str]:
    report = oomdoctor.diagnose(text, source="<healthy>")
    return [f"{f.rule}: {f.message[:120]}" for f in report.findings if f.severity == "error"]


@pytest.mark.parametrize("entry", UPSTREAM, ids=[e["id"] for e in UPSTREAM])
def test_healthy_upstream_line_gives_no_error(entry: dict) -> None:
    assert not _errors(entry["example"].encode("utf-8"))


@pytest.mark.parametrize("line", COLLECTED, ids=[f"line{i}" for i in range(len(COLLECTED))])
def test_collected_healthy_memory_line_gives_no_error(line: str) -> None:
    assert not _errors(line.encode("utf-8"))


@pytest.mark.parametrize(("source", "line"), FROM_SOURCES, ids=[s for s, _ in FROM_SOURCES])
def test_healthy_line_from_an_engines_source_gives_no_error(source: str, line: str) -> None:
    assert not _errors(line.encode("utf-8")), source


def test_the_engines_healthy_lines_together_give_no_error() -> None:
    """All of them as one log (context lines set by some change nothing for the others)."""
    assert not _errors("\n".join(line for _, line in FROM_SOURCES).encode("utf-8"))


def test_every_source_line_names_its_logger_call() -> None:
    assert len(FROM_SOURCES) >= 100
    assert all(s.split()[0] in ("vllm", "sglang") and ".py:" in s for s, _ in FROM_SOURCES)


@pytest.mark.parametrize("log", HEALTHY_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_healthy_fixture_gives_no_error(log: Path) -> None:
    assert not _errors(log.read_bytes())


def test_the_corpora_are_not_empty() -> None:
    assert len(UPSTREAM) >= 50 and len(COLLECTED) >= 40 and len(HEALTHY_FIXTURES) >= 5


def test_every_collected_line_reaches_the_fallback() -> None:
    """The collected lines are near misses of the fallback, not lines it never reads: most of them
    hold one of its literal triggers (so the test exercises its exclusions, not the prefilter)."""
    triggers = [t for r in default_pack().rules if is_fallback(r.id) for t in r.triggers]
    reached = [line for line in COLLECTED if any(t in line.lower() for t in triggers)]
    assert len(reached) >= 8
