"""Worker processes finding a big file's candidate lines change nothing in the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.inputs import read_blocks
from oomdoctor.prefilter import Prefilter, PurePrefilter
from oomdoctor.prefilter import pool as prefilter_pool
from oomdoctor.prefilter.pool import Precomputed, newlines_before, parallel_blocks, workers_for
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import _BUILTIN_TRIGGERS, Scanner
from tests.corpus import FIXTURES

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")

ROOT = Path(__file__).resolve().parent.parent


def _pure() -> PurePrefilter:
    return PurePrefilter([*default_pack().all_triggers(), *_BUILTIN_TRIGGERS])


def _hyperscan() -> Prefilter:
    from oomdoctor.prefilter.hyperscan_path import HyperscanPrefilter

    return HyperscanPrefilter([*default_pack().all_triggers(), *_BUILTIN_TRIGGERS])


def _big_log(tmp_path: Path) -> Path:
    """Fixture logs end to end, with lines longer than the slack, CRLF lines, blank runs and no
    final newline: chunk bounds fall inside OOM blocks, inside long lines and between lines."""
    parts = []
    for i, log in enumerate(sorted(FIXTURES.glob("**/*.log"))):
        parts.append(log.read_bytes())
        if i % 7 == 0:
            parts.append(b"x" * 9000 + b" CUDA out of memory in a very long line\n")
        if i % 5 == 0:
            parts.append(b"INFO noise\r\n" * 50 + b"\n" * 30)
    path = tmp_path / "big.log"
    path.write_bytes(b"".join(parts) + b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    return path


def _report(path: Path, ahead: bool) -> dict:
    scanner = Scanner(default_pack(), source="big.log", prefilter=_pure())
    pre = Precomputed(scanner.prefilter)
    if ahead:
        scanner.use_prefilter(pre)
    for block in read_blocks(str(path), ahead=pre if ahead else None):
        scanner.feed(block)
    return json.loads(scanner.close().model_dump_json())


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefilter_pool, "CHUNK", 8 << 10)
    monkeypatch.setattr(prefilter_pool, "SLACK", 2 << 10)
    monkeypatch.setenv("OOMDOCTOR_WORKERS", "3")


def test_reports_are_identical_with_and_without_workers(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # line numbers included: the workers count the newlines the scanner then does not
    path = _big_log(tmp_path)
    assert path.stat().st_size > 20 * prefilter_pool.CHUNK
    without = _report(path, ahead=False)
    used: list[int] = []
    answered: list[bool] = []  # per block scanned: the worker's answer was used
    counted: list[bool] = []  # per block scanned: with the worker's newline counts
    real, real_candidates, real_starts = Precomputed.expect, Precomputed.candidates, Precomputed.line_starts

    def expect(self: Precomputed, block: bytes, spans: list, newlines: object = None, held: object = None) -> None:
        used.append(len(block))
        real(self, block, spans, newlines, held)  # type: ignore[arg-type]

    def candidates(self: Precomputed, block: bytes, lo: int = 0, hi: int | None = None) -> list:
        expected = self._block is block
        spans = real_candidates(self, block, lo, hi)
        answered.append(expected and self._block is None)
        return spans

    def line_starts(self: Precomputed, block: bytes) -> dict[int, int] | None:
        known = real_starts(self, block)
        counted.append(known is not None)
        return known

    monkeypatch.setattr(Precomputed, "expect", expect)
    monkeypatch.setattr(Precomputed, "candidates", candidates)
    monkeypatch.setattr(Precomputed, "line_starts", line_starts)
    with_workers = _report(path, ahead=True)
    assert with_workers == without
    assert len(with_workers["findings"]) > 20
    assert sum(used) == path.stat().st_size  # every chunk came from a worker
    # each answer used came with its counts; how many blocks are answered whole depends on where
    # the fixtures' bytes put the chunk bounds (12 of 104 before three llama.cpp/ollama fixtures
    # were added in Dec 2026, 7 of 107 after), so the floor is a handful, not a layout
    assert counted == answered and sum(answered) > 5


def test_newlines_are_counted_before_each_candidate_and_in_all() -> None:
    block = b"a\nCUDA out of memory\n\nb\nOOM again\nc"
    spans = [(2, 20, 1), (24, 33, 1)]
    assert newlines_before(block, spans) == ([1, 4], 5)
    assert newlines_before(block, []) == ([], 5)
    pre = Precomputed(_pure())
    pre.expect(block, spans, newlines_before(block, spans))
    assert pre.line_starts(block) is None  # not answered yet
    assert pre.candidates(block) == spans
    assert pre.line_starts(block) == {0: 0, 2: 1, 21: 2, 24: 4, 34: 5, len(block): 5}
    assert pre.line_starts(block + b"") is not None  # (the same object)
    pre.candidates(b"other\n")
    assert pre.line_starts(block) is None  # only for the block just answered


def test_precomputed_passes_on_what_the_inner_scan_noted() -> None:
    """The CLI wraps the scanner's prefilter in Precomputed: the hyperscan scan's note of where
    periodic needles first are must reach the scanner through it (else every stretch set aside
    costs a scan of its own), and only for a block the inner prefilter scanned."""
    pytest.importorskip("hyperscan")
    from oomdoctor.prefilter.hyperscan_path import HyperscanPrefilter

    pre = Precomputed(HyperscanPrefilter(["out of memory"], present=[b"#running-req:"]))
    assert pre.present_literals == (b"#running-req:",)
    block = b"x\nDecode batch. #running-req: 3\nCUDA out of memory\n"
    assert pre.candidates(block) == [(32, 50, 1)]
    assert pre.present_in(block, 0, len(block)) == 1
    assert pre.present_in(block, 0, 2) == 0
    other = b"CUDA out of memory\n"
    pre.expect(other, [(0, 18, 1)])
    assert pre.candidates(other) == [(0, 18, 1)]  # a worker's answer: nothing scanned here
    assert pre.present_in(other, 0, len(other)) is None


def test_chunks_cover_the_file_exactly_and_end_at_line_starts(tmp_path: Path, small_chunks: None) -> None:
    path = _big_log(tmp_path)
    data = path.read_bytes()
    pre = Precomputed(_pure())
    fd = os.open(path, os.O_RDONLY)
    try:
        blocks = list(parallel_blocks(str(path), fd, len(data), pre, 2))
    finally:
        os.close(fd)
    assert b"".join(blocks) == data
    long_line_cut = 0
    for block in blocks[:-1]:
        if not block.endswith(b"\n"):
            long_line_cut += 1
            assert b"\n" not in block[-prefilter_pool.SLACK :]  # only a line longer than the slack
    assert 0 < long_line_cut <= data.count(b"x" * 9000)  # at most one cut per long line
    assert len(blocks) - long_line_cut > 15


def test_bytes_appended_while_reading_are_read_too(tmp_path: Path, small_chunks: None) -> None:
    path = _big_log(tmp_path)
    data = path.read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:  # the size seen when the file was opened is smaller than what is there by the end
        blocks = list(parallel_blocks(str(path), fd, len(data) - 100_000, Precomputed(_pure()), 2))
    finally:
        os.close(fd)
    assert b"".join(blocks) == data


def test_a_failing_worker_sends_the_scan_back_to_the_main_process(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big_log(tmp_path)
    want = _report(path, ahead=False)
    real = prefilter_pool.bound

    def bound(fd: int, k: int, size: int) -> int:
        if k == 7 and os.getpid() != parent:  # in a worker only
            raise OSError(5, "Input/output error")
        return real(fd, k, size)

    parent = os.getpid()
    monkeypatch.setattr(prefilter_pool, "bound", bound)
    assert _report(path, ahead=True) == want


def test_workers_only_for_big_plain_files_on_linux_with_the_pure_prefilter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OOMDOCTOR_WORKERS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    pure = _pure()
    assert workers_for(pure, 1 << 30) == 4
    assert workers_for(pure, prefilter_pool.MIN_BYTES - 1) == 0
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert workers_for(pure, 1 << 30) == 0
    monkeypatch.setenv("OOMDOCTOR_WORKERS", "0")
    assert workers_for(pure, 1 << 30) == 0
    monkeypatch.setenv("OOMDOCTOR_WORKERS", "2")
    assert workers_for(pure, 10) == 2
    assert workers_for(Precomputed(pure), 1 << 30) == 0  # not a prefilter it can fork
    assert workers_for(_hyperscan(), 1 << 30) == 0  # too fast for workers to pay
    monkeypatch.setenv("OOMDOCTOR_WORKERS", "two")
    with pytest.raises(ValueError, match="OOMDOCTOR_WORKERS='two': expected a whole number"):
        workers_for(pure, 1 << 30)


def test_the_cli_report_is_the_same_with_workers(tmp_path: Path) -> None:
    path = _big_log(tmp_path)
    base = {**os.environ, "OOMDOCTOR_PREFILTER": "python"}

    def run(workers: str) -> str:
        env = {**base, "OOMDOCTOR_WORKERS": workers}
        cmd = [sys.executable, "-m", "oomdoctor", "--format", "json", str(path)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 1, out.stderr
        return out.stdout

    assert run("2") == run("0")


def test_a_worker_count_that_is_not_a_number_is_a_one_line_error() -> None:
    env = {**os.environ, "OOMDOCTOR_WORKERS": "two"}
    log = FIXTURES / "vllm" / "vllm-054.log"
    out = subprocess.run([sys.executable, "-m", "oomdoctor", str(log)], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr == (
        "oomdoctor: error: OOMDOCTOR_WORKERS='two': expected a whole number (0: no worker processes)\n"
    )


def test_an_empty_last_chunk_does_not_end_the_read_before_appended_bytes(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last line has no newline and runs from before the last chunk's bound to the end, so
    that chunk is empty; bytes appended after the workers looked are still read."""
    chunk = prefilter_pool.CHUNK
    lines = b"".join(b"INFO step %06d %s\n" % (i, b"." * 80) for i in range((2 * chunk - 500) // 100))
    data = lines + b"x" * (2 * chunk + 1000 - len(lines))
    path = tmp_path / "grows.log"
    path.write_bytes(data + b"\nCUDA out of memory, appended\n")
    real = prefilter_pool.bound
    # the workers find the bounds of the file as it was before the append
    monkeypatch.setattr(prefilter_pool, "bound", lambda fd, k, size: real(fd, k, len(data)))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert real(fd, 2, len(data)) == len(data)  # chunk 2 is empty
    finally:
        os.close(fd)
    blocks = list(read_blocks(str(path), ahead=Precomputed(_pure())))
    assert b"".join(blocks) == path.read_bytes()
