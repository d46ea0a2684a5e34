"""A run of one candidate line repeated (4 MiB of ``CUDA out of memory``) costs a bounded number
of line readings, not one per copy, and passing over its middle changes no report: the same
findings, lines, occurrences and figures as reading every copy (issue 36 item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oomdoctor.scan.runs as runs
from oomdoctor.report import Report
from oomdoctor.rulepack import default_pack
from oomdoctor.scan.matching import RuleMatching
from oomdoctor.scanner import Scanner

PACK = default_pack()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _scan(data: bytes, chunk: int) -> Report:
    scanner = Scanner(PACK, source="log")
    for i in range(0, len(data), chunk):
        scanner.feed(data[i : i + chunk])
    return scanner.close()


def _both(data: bytes, chunk: int, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, object], dict[str, object]]:
    """The report with runs folded, and with every copy read."""
    folded = _scan(data, chunk).model_dump(mode="json")
    with monkeypatch.context() as m:
        m.setattr(runs, "RUN_HEAD", 10**9)
        read = _scan(data, chunk).model_dump(mode="json")
    return folded, read


@pytest.mark.parametrize("line", [b"CUDA out of memory\n", b"Tried to allocate \n"])
def test_a_long_run_costs_a_bounded_number_of_matches(line: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    match = RuleMatching._match

    def counting(self: RuleMatching, p: object) -> None:
        calls["n"] += 1
        match(self, p)  # type: ignore[arg-type]

    monkeypatch.setattr(RuleMatching, "_match", counting)
    small = _scan(line * 1_000, 256 << 10)
    small_calls, calls["n"] = calls["n"], 0
    big = _scan(line * ((4 << 20) // len(line)), 256 << 10)  # 4 MiB, 220,000 copies, in 16 chunks
    # the head of the run, then the tail of each chunk's part: not one per copy
    assert calls["n"] <= small_calls + 17 * (runs.RUN_TAIL + 16)
    assert calls["n"] < 5_000
    assert [(f.rule, f.occurrences, f.location.line) for f in big.findings] == [
        (f.rule, f.occurrences, f.location.line) for f in small.findings
    ]
    assert big.findings


def _fixtures() -> list[Path]:
    every = sorted(FIXTURES.glob("*/*.log"))
    return every[::12]


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_folding_a_run_changes_no_report(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The line of a fixture's first finding repeated 300 times in place: the report is the one
    reading every copy gives, fed in small and large chunks."""
    data = path.read_bytes()
    first = _scan(data, 1 << 20).findings
    if not first:
        pytest.skip("no finding")
    lines = data.split(b"\n")
    at = first[0].location.line
    if not 1 <= at <= len(lines):
        pytest.skip("the finding is not on a line of its own")
    repeated = b"\n".join([*lines[: at - 1], *[lines[at - 1]] * 300, *lines[at:]])
    for chunk in (4096, 1 << 20):
        folded, read = _both(repeated, chunk, monkeypatch)
        assert json.dumps(folded, sort_keys=True) == json.dumps(read, sort_keys=True)


@pytest.mark.parametrize(
    "line",
    [
        # a warning: every copy is an occurrence
        "[2025-06-01 00:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_token_ratio: 0.2000 -> 0.3000\n",
        # an error whose match reads into the copies after it (every fifth copy is matched)
        "RuntimeError: Decode out of memory. Try to lower your batch size.\n",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
        "of 79.19 GiB of which 1.00 MiB is free.\n",
    ],
)
def test_a_run_counts_its_copies_as_reading_them_does(line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = ("INFO start\n" + line * 800 + "Available tokens: 2048, requested 148\nINFO done\n").encode()
    folded, read = _both(data, 64 << 10, monkeypatch)
    assert folded == read
    assert folded["findings"]
