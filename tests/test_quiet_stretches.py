"""Where worker processes find a chunk of a plain file without a candidate line, the main process
passes over all of it but its last ``BEFORE_LINES`` lines unread (``Scanner.pass_quiet``): the
stretch becomes a far span at once, read again only if a failure whose step is not known asks.
The report is the one reading every byte gives."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from oomdoctor.inputs import read_blocks, rereader
from oomdoctor.prefilter import pool as prefilter_pool
from oomdoctor.prefilter.pool import Precomputed, newlines_before, quiet_start
from oomdoctor.prefilter.presence import Presence
from oomdoctor.reader import MAX_LINE_BYTES
from oomdoctor.report import Report
from oomdoctor.rulepack import default_pack
from oomdoctor.scan.state import BEFORE_LINES, FAR_MARK
from oomdoctor.scanner import Scanner

PACK = default_pack()
LOADED = "Loading safetensors checkpoint shards: 100% 4/4\n"
GRAPHS = "Capturing CUDA graph shapes: 100%|##########| 67/67\n"
#: a failure whose rule does not name its step: the latest progress line before it does
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n}.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.00 GiB is free.\n"
)
#: SGLang's batch line: a periodic context line (its latest values are facts of the run)
BATCH = (
    "[2025-06-01 10:01:00 TP0] Prefill batch. #new-seq: 1, #new-token: 1024, #cached-token: 0, "
    "token usage: 0.{n:02d}, #running-req: {n}, #queue-req: 0, \n"
)
#: phase evidence that is no progress line, and plain noise: neither is a candidate line
THROUGHPUT = "INFO 08-19 00:00:20 [LOGGERS.PY:123] ENGINE 000: AVG PROMPT THROUGHPUT: {n}.0 TOKENS/S, RUNNING: 3 REQS\n"
NOISE = "[2025-01-10 00:00:00] heartbeat {n}: all quiet here, nothing to see\n"


def lines(template: str, count: int, start: int = 0) -> str:
    return "".join(template.format(n=i % 100) for i in range(start, start + count))


def summary(report: Report) -> tuple[list[dict], dict]:
    return [f.model_dump(exclude={"remedies"}) for f in report.findings], report.context.model_dump()


def _quiet_log() -> str:
    return (
        lines(NOISE, 6000) + LOADED + lines(NOISE, 4000) + OOM.format(n=2)  # its step: a progress line far behind
        + lines(THROUGHPUT, 3000) + GRAPHS + lines(NOISE, 3000) + OOM.format(n=3)
        + lines(NOISE, 2500) + BATCH.format(n=7) + lines(NOISE, 2500)  # a periodic line: not passed over
        + OOM.format(n=4) + lines(NOISE, 60) + OOM.format(n=5) + lines(NOISE, 3000)  # open across a chunk's start
        + BATCH.format(n=9) + lines(NOISE, 1500) + GRAPHS + lines(NOISE, 1500)  # the latest periodic line,
        # far from any failure and not the latest progress line: read for its value alone
        + "x" * (MAX_LINE_BYTES + 1) + "\n" + lines(NOISE, 3000)  # a line over the cap: not passed over
    )


# -- where a chunk's quiet stretch ends ------------------------------------------------------


def test_a_quiet_chunk_is_passed_over_up_to_its_last_before_lines_lines() -> None:
    block = lines(NOISE, 2000).encode()
    near, head, tail = quiet_start(block, [], block.count(b"\n"), None) or (0, b"", b"")
    assert block[near:].count(b"\n") == BEFORE_LINES and block[near - 1 : near] == b"\n"
    assert (head, tail) == (block[:FAR_MARK], block[near - FAR_MARK : near])


@pytest.mark.parametrize(
    "block, spans, held",
    [
        (lines(NOISE, 2000), [(0, 10, 1)], None),  # a candidate line
        (lines(NOISE, BEFORE_LINES), [], None),  # no more lines than those kept
        (lines(NOISE, BEFORE_LINES + 10), [], None),  # too little before them to be worth it
        (lines(NOISE, 2000)[:-1], [], None),  # no final newline
        (lines(NOISE, 1000) + "x" * (MAX_LINE_BYTES + 1) + "\n" + lines(NOISE, 1000), [], None),  # a line over the cap
        (lines(NOISE, 1000) + BATCH.format(n=1) + lines(NOISE, 1000), [], None),  # a periodic line
        (lines(NOISE, 2000), [], True),  # one noted by the prefilter
    ],
    ids=["candidate", "few-lines", "short", "no-newline", "long-line", "periodic", "periodic-noted"],
)
def test_a_chunk_is_not_quiet(block: str, spans: list, held: bool | None) -> None:
    data = block.encode()
    presence = Presence((b"#running-req:",))
    assert quiet_start(data, spans, data.count(b"\n"), presence, held) is None


def test_a_periodic_line_noted_absent_is_not_looked_for_again() -> None:
    data = (lines(NOISE, 1000) + BATCH.format(n=1) + lines(NOISE, 1000)).encode()

    class Asked:
        def which(self, block: bytes, lo: int, hi: int) -> int:
            raise AssertionError("asked again")

    assert quiet_start(data, [], data.count(b"\n"), Asked(), held=False) is not None


# -- the scanner -------------------------------------------------------------------------------


def _scanner(data: bytes, reread: bool = True) -> Scanner:
    scanner = Scanner(PACK, source="<test>", advise=False)
    scanner.rereadable((lambda a, b: data[a:b]) if reread else None)
    return scanner


def test_passing_over_gives_what_feeding_gives() -> None:
    quiet = (lines(NOISE, 2500) + LOADED + lines(NOISE, 2500)).encode()  # the failure's step in it
    # (more than a paste before it: a paste's bytes are all kept, see PASTE_BYTES)
    data = lines(THROUGHPUT, 3000).encode() + quiet + lines(NOISE, 300).encode() + OOM.format(n=2).encode()
    start = data.index(quiet)
    near, head, tail = quiet_start(quiet, [], quiet.count(b"\n"), None) or (0, b"", b"")
    fed = _scanner(data)
    passed = _scanner(data)
    for scanner, passing in ((fed, False), (passed, True)):
        scanner.feed(data[:start])
        if passing:
            assert scanner.pass_quiet(near, quiet[:near].count(b"\n"), head, tail)
            scanner.feed(quiet[near:])
        else:
            scanner.feed(quiet)
        scanner.feed(data[start + len(quiet) :])
    report = passed.close()
    assert summary(report) == summary(fed.close())
    assert [(f.rule, f.phase, f.location.line) for f in report.findings] == [
        ("torch.cuda-oom", "weights-load", data.count(b"\n"))]


@pytest.mark.parametrize("why", ["paste", "not-rereadable", "partial-line", "open", "pending"])
def test_the_scanner_does_not_pass_over_what_it_must_read(why: str) -> None:
    before = {
        "paste": LOADED,  # (a paste's bytes are all kept: see PASTE_BYTES)
        "not-rereadable": LOADED + lines(THROUGHPUT, 3000),
        "partial-line": LOADED + lines(THROUGHPUT, 3000) + "INFO half a li",
        "open": LOADED + lines(THROUGHPUT, 3000) + OOM.format(n=2),  # the lines after it may tell its step
        "pending": LOADED + lines(THROUGHPUT, 3000) + "torch.OutOfMemoryError: CUDA out of memory.\n",  # its window
    }[why].encode()
    scanner = _scanner(before, reread=why != "not-rereadable")
    scanner.feed(before)
    quiet = lines(NOISE, 1000).encode()
    assert not scanner.pass_quiet(len(quiet), 1000, quiet[:FAR_MARK], quiet[-FAR_MARK:])
    assert scanner._splitter.line_number == before.count(b"\n")  # nothing done


# -- end to end: worker processes and the main process -----------------------------------------


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
@pytest.mark.parametrize("workers", ["1", "3"])
def test_a_file_read_with_quiet_chunks_passed_over_gives_what_reading_it_all_gives(
    tmp_path: Path, workers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OOMDOCTOR_PREFILTER", "python")
    monkeypatch.setenv("OOMDOCTOR_WORKERS", workers)
    monkeypatch.setattr(prefilter_pool, "CHUNK", 64 << 10)
    monkeypatch.setattr(prefilter_pool, "QUIET_MIN", 4 << 10)
    path = tmp_path / "quiet.log"
    path.write_bytes(_quiet_log().encode())

    whole = Scanner(PACK, source="quiet.log", advise=False)
    whole.rereadable(rereader(str(path)))
    whole.feed(path.read_bytes())

    scanner = Scanner(PACK, source="quiet.log", advise=False)
    pre = Precomputed(scanner.prefilter)
    scanner.use_prefilter(pre)
    passed: list[tuple[bool, int]] = []

    def passer(size: int, newlines: int, head: bytes, tail: bytes) -> bool:
        ok = scanner.pass_quiet(size, newlines, head, tail)
        passed.append((ok, size))
        return ok

    pre.pass_quiet_to(passer, scanner.periodic_presence)
    scanner.rereadable(rereader(str(path)))
    fed = 0
    for block in read_blocks(str(path), ahead=pre):
        fed += len(block)
        scanner.feed(block)
    report = scanner.close()
    assert summary(report) == summary(whole.close())
    assert [(f.rule, f.phase) for f in report.findings] == [
        ("torch.cuda-oom", "weights-load"), ("torch.cuda-oom", "cudagraph-capture"),
        ("torch.cuda-oom", "inference"), ("torch.cuda-oom", "inference")]  # (SGLang's batch line: serving)
    assert report.context.extra == {"sglang_running_requests": 9}  # (the latest batch line, read where it was)
    size = path.stat().st_size
    skipped = sum(n for ok, n in passed if ok)
    assert fed + skipped == size and skipped > size / 3  # much of it was not read
    assert not all(ok for ok, _ in passed)  # a failure still open, say, is read on


def test_the_worker_counts_what_it_passes_over() -> None:
    block = lines(NOISE, 3000).encode()
    total = newlines_before(block, [])[1]
    near = (quiet_start(block, [], total, None) or (0,))[0]
    assert total - BEFORE_LINES == block[:near].count(b"\n")


@pytest.mark.parametrize("held, present", [(False, 0), (True, None), (None, None)])
def test_a_chunk_answered_by_a_worker_holds_no_periodic_needle_where_the_worker_noted_none(
    held: bool | None, present: int | None
) -> None:
    from oomdoctor.prefilter import PurePrefilter

    pre = Precomputed(PurePrefilter(["out of memory"], present=(b"#running-req:",)))
    block = lines(NOISE, 2000).encode()
    pre.expect(block, [], ([], 2000), held)
    assert pre.candidates(block) == []
    assert pre.present_in(block, 0, 100) == present  # (None: the scanner asks the stretch itself)
    assert pre.present_in(block + b"", 0, 100) is None or block + b"" is block


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux only")
def test_a_file_cut_short_after_a_quiet_stretch_is_read_on_from_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the stretch was passed over; the lines after it are gone when read: the main process
    # reads on alone from the end of the stretch, not from the chunk's start again
    monkeypatch.setenv("OOMDOCTOR_PREFILTER", "python")
    monkeypatch.setenv("OOMDOCTOR_WORKERS", "2")
    monkeypatch.setattr(prefilter_pool, "CHUNK", 64 << 10)
    monkeypatch.setattr(prefilter_pool, "QUIET_MIN", 4 << 10)
    path = tmp_path / "cut.log"
    path.write_bytes((lines(NOISE, 20000) + LOADED + OOM.format(n=2)).encode())
    scanner = Scanner(PACK, source="cut.log", advise=False)
    pre = Precomputed(scanner.prefilter)
    scanner.use_prefilter(pre)
    cut: list[int] = []

    def passer(size: int, newlines: int, head: bytes, tail: bytes) -> bool:
        ok = scanner.pass_quiet(size, newlines, head, tail)
        if ok and not cut:
            cut.append(scanner._fed + 100)  # within the lines after the stretch
            os.truncate(path, cut[0])
        return ok

    pre.pass_quiet_to(passer, scanner.periodic_presence)
    scanner.rereadable(rereader(str(path)))
    for block in read_blocks(str(path), ahead=pre):
        scanner.feed(block)
    assert cut and scanner._fed == cut[0]  # every byte once, none twice
    assert scanner._splitter.line_number == path.read_bytes().count(b"\n")


def test_a_worker_takes_the_prefilter_s_note_only_for_the_needles_it_was_asked_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from oomdoctor.prefilter import PurePrefilter

    monkeypatch.setattr(prefilter_pool, "CHUNK", 256 << 10)
    monkeypatch.setattr(prefilter_pool, "QUIET_MIN", 4 << 10)
    path = tmp_path / "w.log"
    path.write_bytes((lines(NOISE, 5000) + "#other-needle: 1\n" + lines(NOISE, 10000)).encode())  # (in chunk 1)
    sent: list[tuple] = []

    class Conn:
        def __init__(self) -> None:
            self.asked: list[int | None] = [1, None]  # chunk 1, then stop

        def recv(self) -> int | None:
            return self.asked.pop(0)

        def send(self, got: tuple) -> None:
            sent.append(got)

        def close(self) -> None:
            pass

    def quiet_of(presence: Presence) -> object:
        sent.clear()
        pre = PurePrefilter(["out of memory"], present=(b"#running-req:",))
        prefilter_pool._work(Conn(), str(path), path.stat().st_size, pre, True, presence)
        (_, _, _, spans, _, held, quiet), = sent
        assert spans == [] and held is False  # (of its own literal: none in the chunk)
        return quiet

    assert quiet_of(Presence((b"#running-req:",))) is not None
    assert quiet_of(Presence((b"#other-needle:",))) is None  # asked, not taken from the note
