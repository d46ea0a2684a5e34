"""Stretches of evidence far behind, in a source that can be read again (a plain file, a text in
memory), are not searched for their latest progress line as they leave memory: only a failure
whose step is not known asks for it, and then they are read again, newest first. The findings
and the context are the ones searching every stretch as it leaves gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import oomdoctor.scan.evidence as evidence
from oomdoctor import diagnose
from oomdoctor.report import Report
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import Scanner

PACK = default_pack()
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOADED = "Loading safetensors checkpoint shards: 100% 4/4\n"
#: a failure whose rule does not name its step: the latest progress line before it does
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.00 GiB is free.\n"
#: a failure whose rule names its step (allocating the KV cache): evidence cannot change it
KV = (
    "ERROR 04-05 01:12:55 [core.py:390] ValueError: To serve at least one request with the models's max seq len "
    "(1048576), (24.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.97 GiB). "
    "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n"
)
#: evidence that is no progress line (the trigger, not the pattern): set aside, searched for one
NOISE = "INFO 08-19 00:00:20 [LOGGERS.PY:123] ENGINE 000: AVG PROMPT THROUGHPUT: {n}.0 TOKENS/S, RUNNING: 3 REQS\n"


def noise(lines: int, start: int = 0) -> str:
    return "".join(NOISE.format(n=i) for i in range(start, start + lines))


def scan(
    data: bytes, *, reread: bool, chunk: int = 64 << 10, count: str | None = None
) -> tuple[Report, list[int], list[int]]:
    """The report, the bytes ``count`` (the scanner's ``_latest_progress``) searched, and the
    bytes read again."""
    scanner = Scanner(PACK, source="<test>", advise=False)
    reads = [0]

    def read(a: int, b: int) -> bytes:
        reads[0] += b - a
        return data[a:b]

    calls = [0]
    if count is not None:
        inner = getattr(scanner, count)

        def counted(block: bytes, a: int, hi: int, number: int) -> object:
            calls[0] += hi - a
            return inner(block, a, hi, number)

        setattr(scanner, count, counted)
    scanner.rereadable(read if reread else None)
    for i in range(0, len(data), chunk):
        scanner.feed(data[i : i + chunk])
    return scanner.close(), calls, reads


def summary(report: Report) -> tuple[list[dict], dict]:
    return [f.model_dump(exclude={"remedies"}) for f in report.findings], report.context.model_dump()


@pytest.fixture
def leaving(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every span behind the tail leaves memory at once: the far spans are as many as can be."""
    monkeypatch.setattr(evidence, "UNSEARCHED_SPANS", 0)


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.log")), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixtures_give_what_searching_every_stretch_gives(path: Path, leaving: None) -> None:
    data = path.read_bytes()
    for chunk in (4096, 1 << 20):
        assert summary(scan(data, reread=True, chunk=chunk)[0]) == summary(scan(data, reread=False, chunk=chunk)[0])


def test_a_failure_that_names_its_step_reads_nothing_again(leaving: None) -> None:
    # no progress line: only the spans still in memory at the end are searched for one (was:
    # every stretch, a second pass over the log; on bench/'s ollama-debug 1.09x grep with
    # hyperscan, 4.9x on the pure path)
    log = (noise(4000) + KV + noise(4000, 4000)).encode()
    report, searched, reads = scan(log, reread=True, count="_latest_progress")
    assert [(f.rule, f.phase) for f in report.findings] == [("vllm.v1.kv-cache.max-len-exceeds", "kv-cache-alloc")]
    assert searched[0] < len(log) / 10
    assert reads[0] == 0
    eager, searched_eagerly, _ = scan(log, reread=False, count="_latest_progress")
    assert summary(report) == summary(eager)
    assert searched_eagerly[0] > len(log) * 0.9


@pytest.mark.parametrize("chunk", [4096, 64 << 10, 1 << 20])
def test_a_failure_whose_step_is_not_known_reads_the_far_spans_again(chunk: int, leaving: None) -> None:
    log = (LOADED + noise(8000) + OOM).encode()
    report, _, reads = scan(log, reread=True, chunk=chunk)
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "weights-load")]
    assert summary(report) == summary(scan(log, reread=False, chunk=chunk)[0])
    assert reads[0] > len(log) * 0.8  # (read again back to the progress line)


def test_a_later_progress_line_leaves_the_far_spans_unread(leaving: None) -> None:
    log = (LOADED + noise(8000) + "Capturing CUDA graph shapes: 100%|##########| 67/67\n" + noise(100) + OOM).encode()
    report, _, reads = scan(log, reread=True)
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "cudagraph-capture")]
    assert summary(report) == summary(scan(log, reread=False)[0])
    assert reads[0] == 0


def test_far_spans_are_read_again_once_for_two_failures(leaving: None) -> None:
    log = (LOADED + noise(4000) + OOM + noise(4000, 4000) + OOM.replace("2.00", "3.00")).encode()
    report, _, reads = scan(log, reread=True)
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "weights-load")] * 2
    assert summary(report) == summary(scan(log, reread=False)[0])
    assert reads[0] < len(log) * 1.1


@pytest.mark.parametrize("long", [100 << 10, 3 << 20])
def test_lines_longer_than_the_cap_are_read_again_cut_as_when_they_were_fed(long: int, leaving: None) -> None:
    # a progress line's text past the cap of a long line was never read: read again, it is not
    # taken either; the one before it names the step
    line = "x" * (long - 200) + " " + LOADED
    log = (LOADED + noise(3000) + line + noise(3000, 3000) + OOM).encode()
    report, _, reads = scan(log, reread=True)
    assert summary(report) == summary(scan(log, reread=False)[0])
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "weights-load")]
    assert reads[0] > long


def test_a_progress_line_within_a_long_line_s_cap_still_counts(leaving: None) -> None:
    line = "Capturing CUDA graph shapes: 100%|##########| 67/67 " + "x" * (3 << 20) + "\n"
    log = (LOADED + noise(3000) + line + noise(3000, 3000) + OOM).encode()
    report = scan(log, reread=True)[0]
    assert summary(report) == summary(scan(log, reread=False)[0])
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "cudagraph-capture")]


@pytest.mark.parametrize(
    "changed",
    [lambda data: data.replace(b"4/4", b"5/5", 1), lambda data: data[: len(data) // 2], None],
    ids=["rewritten", "truncated", "unreadable"],
)
def test_a_source_that_changed_since_is_not_read_again(changed: Callable[[bytes], bytes] | None, leaving: None) -> None:
    log = (LOADED + noise(8000) + OOM).encode()
    now = changed(log) if changed is not None else b""
    scanner = Scanner(PACK, source="<test>", advise=False)

    def read(a: int, b: int) -> bytes:
        if changed is None:
            raise OSError("gone")
        return now[a:b]

    scanner.rereadable(read)
    for i in range(0, len(log), 64 << 10):
        scanner.feed(log[i : i + (64 << 10)])
    # no line is taken from other bytes: the step stays unknown rather than wrong
    assert [(f.rule, f.phase) for f in scanner.close().findings] == [("torch.cuda-oom", "unknown")]


def test_the_api_reads_a_text_in_memory_again(leaving: None, monkeypatch: pytest.MonkeyPatch) -> None:
    log = LOADED + noise(8000) + OOM
    reads = []
    rereadable = Scanner.rereadable

    def counted(self: Scanner, read: Callable[[int, int], bytes] | None) -> None:
        assert read is not None
        rereadable(self, lambda a, b: reads.append(b - a) or read(a, b))

    monkeypatch.setattr(Scanner, "rereadable", counted)
    report = diagnose(log)
    assert [(f.rule, f.phase) for f in report.findings] == [("torch.cuda-oom", "weights-load")]
    assert [f.phase for f in diagnose(log.encode()).findings] == ["weights-load"]
    assert sum(reads) > len(log)


@pytest.mark.parametrize(
    "env",
    [pytest.param({}, id="default"),
     pytest.param({"OOMDOCTOR_PREFILTER": "python", "OOMDOCTOR_WORKERS": "2"}, id="pure-workers", marks=pytest.mark.slow)],
)
def test_a_file_gives_what_its_bytes_on_stdin_give(tmp_path: Path, env: dict[str, str]) -> None:
    # a plain file is read again; stdin is not (its spans are searched as they leave memory).
    # With worker processes, the blocks the scanner is fed are the file's, in order, too
    path = tmp_path / "server.log"
    path.write_bytes((LOADED + noise(30000) + OOM + noise(30000, 30000) + KV).encode())  # ~6 MiB

    def run(*args: str, **kw: object) -> dict:
        out = subprocess.run([sys.executable, "-m", "oomdoctor", "-f", "json", *args], capture_output=True,
                             timeout=120, env={**os.environ, **env}, **kw).stdout  # type: ignore[call-overload]
        report = json.loads(out)
        report.pop("sources")
        for f in report["findings"]:
            f["location"].pop("source")
        for c in report["contexts"]:
            c.pop("source")
        return report

    from_file = run(str(path))
    with path.open("rb") as stdin:
        assert from_file == run("-", stdin=stdin)
    assert [(f["rule"], f["phase"]) for f in from_file["findings"]] == [
        ("torch.cuda-oom", "weights-load"), ("vllm.v1.kv-cache.max-len-exceeds", "kv-cache-alloc")]


@pytest.mark.parametrize("anchors", [4096, 3])
@pytest.mark.parametrize("long", [0, 100 << 10, 3 << 20])
def test_the_line_found_far_behind_has_its_own_number(
    anchors: int, long: int, leaving: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # numbered from the next line start whose number is known, however few are kept, with
    # lines cut to the cap between them (their bytes are not what was fed)
    import oomdoctor.scan.state as state

    monkeypatch.setattr(state, "FAR_ANCHORS", anchors)
    later = ("y" * long + "\n") * 3 if long else ""
    log = (noise(2000) + LOADED + later + noise(3000, 2000) + OOM).encode()
    scanner = Scanner(PACK, source="<test>", advise=False)
    scanner.rereadable(lambda a, b: log[a:b])
    for i in range(0, len(log), 64 << 10):
        scanner.feed(log[i : i + (64 << 10)])
    assert [(f.rule, f.phase) for f in scanner.close().findings] == [("torch.cuda-oom", "weights-load")]
    assert (2001, "weights-load") in scanner._progress
