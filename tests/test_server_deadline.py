"""The service's time limit holds within a tenth of itself: the deadline is checked before each
candidate line is read, not between 256 KiB chunks (a 1 s limit used to stop after 14 s of
candidate lines). Time here is a fake clock that each line read advances, so the test counts
lines, not seconds (issue 36 item 3)."""

from __future__ import annotations

import pytest

from oomdoctor.reader import Line
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import Scanner
from oomdoctor.server.limits import AnalysisTimeout, Deadline, analyse

PACK = default_pack()


def _slow_lines(monkeypatch: pytest.MonkeyPatch, cost: float) -> tuple[list[float], list[int]]:
    """Make each line read cost ``cost`` seconds of a fake clock; returns (clock, lines read)."""
    now, reads = [0.0], [0]
    process = Scanner._process

    def slow(self: Scanner, line: Line, mask: int = 0) -> bool:
        reads[0] += 1
        now[0] += cost
        return process(self, line, mask)

    monkeypatch.setattr(Scanner, "_process", slow)
    return now, reads


@pytest.mark.parametrize(("limit", "cost"), [(1.0, 0.001), (20.0, 0.01)])
def test_the_deadline_holds_within_a_tenth(limit: float, cost: float, monkeypatch: pytest.MonkeyPatch) -> None:
    # distinct candidate lines (no run to fold), `cost` seconds of (simulated) work each: the limit
    # is limit/cost lines; the server's default limit (20 s) at 10 ms a line keeps the test short
    now, reads = _slow_lines(monkeypatch, cost)
    data = "".join(f"torch.OutOfMemoryError: CUDA out of memory on request {i}\n" for i in range(40_000)).encode()
    deadline = Deadline(limit, clock=lambda: now[0])
    with pytest.raises(AnalysisTimeout):
        analyse(data, PACK, {}, deadline)
    assert limit <= now[0] <= limit * 1.1
    assert reads[0] <= limit / cost * 1.1


def test_an_analysis_within_its_limit_is_not_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    now, reads = _slow_lines(monkeypatch, 0.001)
    data = b"".join(b"torch.OutOfMemoryError: CUDA out of memory on request %d\n" % i for i in range(500))
    report = analyse(data, PACK, {}, Deadline(1.0, clock=lambda: now[0]))
    assert report.findings
    assert 0 < reads[0] < 1000
