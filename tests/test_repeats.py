"""A warning printed over and over (a server under memory pressure) is folded into its finding
from each occurrence's own line, without reading the lines after it one by one: the findings
are the ones reading every occurrence with its window gives, occurrences and latest figures
included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomdoctor.report import Report
from oomdoctor.rulepack import default_pack
from oomdoctor.scan.folding import folds_from_its_line
from oomdoctor.scanner import Scanner

PACK = default_pack()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 79.10 GiB of which 1.00 GiB is free.\n"
)
ACCESS = '[2025-06-01 00:00:00] INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'


def _retract(i: int, rank: str = "TP0") -> str:
    return (
        f"[2025-06-01 00:00:{i % 60:02d} {rank}] KV cache pool is full. Retract requests. "
        f"#retracted_reqs: {i % 7 + 1}, #new_token_ratio: 0.{i % 9 + 1}000 -> 0.{i % 8 + 2}000\n"
    )


def _preempted(i: int) -> str:
    return (
        f"WARNING 08-19 00:00:01 [scheduler.py:1560] Sequence group {i} is preempted by "
        "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
        "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more "
        f"KV cache memory. total_num_cumulative_preemption={i * 50 + 1}\n"
    )


def scan(data: bytes, *, fold_repeats: bool = True, chunk: int = 1 << 20) -> tuple[Report, int]:
    """The report, and how many occurrences were folded from their own line."""
    scanner = Scanner(PACK, source="<test>", advise=False)
    folded = [0]
    if fold_repeats:
        inner = scanner._fold_repeat

        def counted(*args: object) -> bool:
            done = inner(*args)  # type: ignore[arg-type]
            folded[0] += done
            return done

        scanner._fold_repeat = counted  # type: ignore[method-assign]
    else:
        scanner._repeat_triggers = lambda _mask: None  # type: ignore[method-assign]
    for i in range(0, len(data), chunk):
        scanner.feed(data[i : i + chunk])
    return scanner.close(), folded[0]


def findings(report: Report) -> list[dict]:
    return [f.model_dump(exclude={"remedies"}) for f in report.findings]


def _same(data: bytes, chunk: int = 1 << 20) -> tuple[Report, int]:
    report, folded = scan(data, chunk=chunk)
    every, _ = scan(data, fold_repeats=False, chunk=chunk)
    assert findings(report) == findings(every)
    assert report.context.model_dump() == every.context.model_dump()
    return report, folded


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.log")), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixtures_give_the_findings_matching_every_occurrence_gives(path: Path) -> None:
    _same(path.read_bytes())


@pytest.mark.parametrize("chunk", [1 << 20, 4096])
def test_a_retract_storm_counts_every_occurrence_and_keeps_the_latest_figures(chunk: int) -> None:
    lines: list[str] = []
    for i in range(3000):
        lines.append(ACCESS)
        if i % 5 == 4:
            lines.append(_retract(i))
        if i == 1500:  # a failure amid them
            lines.append("[2025-06-01 00:00:02 TP0] " + OOM)
    report, folded = _same("".join(lines).encode(), chunk)
    retract = next(f for f in report.findings if f.rule == "sglang.kv-pool-retract")
    assert retract.occurrences == 600
    assert retract.figures == {"retracted_requests": 2999 % 7 + 1, "new_token_ratio_before": 0.3, "new_token_ratio": 0.9}
    assert folded > 500  # (the first, and those while a finding is open, are matched with their window)


def test_a_preemption_storm_keeps_vllms_cumulative_count() -> None:
    log = "".join(ACCESS * 9 + _preempted(i) for i in range(2000)).encode()
    report, folded = _same(log)
    (finding,) = report.findings
    assert (finding.rule, finding.occurrences, finding.figures["preemptions"]) == (
        "vllm.v0.kv-cache.preemption", 2000, 1999 * 50 + 1,
    )
    assert folded == 1999 - 8  # (the 8 while the first is open, AFTER_LINES after it, have their window)


def test_ranks_interleaved_and_wrapped_occurrences_are_read_as_every_line_is() -> None:
    lines: list[str] = []
    for i in range(1200):
        lines.append(ACCESS)
        if i % 4 == 0:
            lines.append(_retract(i, rank="TP1" if i % 8 else "TP0"))
        if i % 100 == 50:  # a terminal wrapped this one before its figures: its window gives them
            head, _, tail = _retract(i).partition("#new_token_ratio")
            lines += [head + "\n", "#new_token_ratio" + tail]
    report, folded = _same("".join(lines).encode(), 4096)
    (finding,) = report.findings
    assert finding.occurrences == 300 + 12
    assert folded > 250


def test_docker_records_of_a_storm_are_folded_too() -> None:
    lines = [line for i in range(1500) for line in ([ACCESS, _retract(i)] if i % 3 == 0 else [ACCESS])]
    records = "".join(json.dumps({"log": line, "stream": "stdout"}) + "\n" for line in lines)
    report, folded = _same(records.encode())
    assert [f.occurrences for f in report.findings] == [500]
    assert folded > 0


def test_what_may_fold_from_its_line() -> None:
    assert folds_from_its_line(PACK.rule("sglang.kv-pool-retract"))
    assert folds_from_its_line(PACK.rule("vllm.v0.kv-cache.preemption"))  # (its extracts are its groups)
    assert not folds_from_its_line(PACK.rule("torch.cuda-oom"))  # an error
    assert not folds_from_its_line(PACK.rule("generic.oom-recovered"))  # no phase; roles; lookaheads
