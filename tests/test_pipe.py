"""Pipe mode guarantees, with real pipes and signals (subprocesses) where it matters."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.cli.pipe import run_pipe
from oomdoctor.report import Report
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import Scanner

ROOT = Path(__file__).resolve().parent.parent
KV_LOG = (ROOT / "fixtures" / "vllm" / "vllm-054.log").read_bytes()  # vllm.v1.kv-cache.max-len-exceeds, line 4
TORCH_LOG = (ROOT / "fixtures" / "vllm" / "vllm-033.log").read_bytes()  # torch.cuda-oom, line 2
ENV = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}


def start(*args: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "oomdoctor", *args],
        stdin=subprocess.PIPE,
        stdout=kw.pop("stdout", subprocess.PIPE),  # type: ignore[arg-type]
        stderr=subprocess.PIPE,
        env=kw.pop("env", ENV),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def hostile_bytes(seed: int = 7) -> bytes:
    rnd = random.Random(seed)
    parts = [
        rnd.randbytes(300_000),
        b"\x00\x00NUL\x00 in the middle\n",
        b"Loading 10%\rLoading 50%\rLoading 100%\r",
        b"\x1b[1;31mERROR\x1b[0m coloured \x1b]0;title\x07\n",
        b"\xff\xfe\xc3\x28 invalid utf-8 \xed\xa0\x80\n",
        KV_LOG,
        rnd.randbytes(100_000),
        b"\r\n\r\n\n\n",
        b"the end without a newline",
    ]
    return b"".join(parts)


def test_passthrough_is_byte_exact_for_hostile_input() -> None:
    data = hostile_bytes()
    proc = start("-f", "json")
    out, err = proc.communicate(data, timeout=60)
    assert out == data
    assert proc.returncode == 1  # the vLLM failure inside is still found
    assert json.loads(err)["findings"][0]["rule"] == "vllm.v1.kv-cache.max-len-exceeds"


@pytest.mark.parametrize("mib", [pytest.param(16, id="16MiB"), pytest.param(200, id="200MiB", marks=pytest.mark.slow)])
def test_passthrough_of_a_long_line_without_newline(mib: int) -> None:
    size = mib * 1024 * 1024
    block = b"x" * (1 << 20)
    proc = start()
    digest = hashlib.sha256()
    got = [0]

    def reader() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read(1 << 20):
            digest.update(chunk)
            got[0] += len(chunk)

    t = threading.Thread(target=reader)
    t.start()
    assert proc.stdin is not None
    for _ in range(size // len(block)):
        proc.stdin.write(block)
    proc.stdin.close()
    t.join(300)  # against a hang only (the speed of the passthrough is bench/'s business)
    assert proc.wait(60) == 0
    assert got[0] == size
    assert digest.hexdigest() == hashlib.sha256(block * (size // len(block))).hexdigest()


def test_downstream_closed_exits_quietly_and_still_reports() -> None:
    proc = start()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(KV_LOG)
    proc.stdin.flush()
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    filler = b"INFO 05-01 10:00:00 [engine.py:1] still running\n" * 1000
    try:
        for _ in range(2000):
            proc.stdin.write(filler)
            proc.stdin.flush()
    except BrokenPipeError:
        pass
    with pytest.raises(BrokenPipeError):  # oomdoctor stopped reading, like tee
        for _ in range(20000):
            proc.stdin.write(filler)
            proc.stdin.flush()
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 1
    assert "Traceback" not in err
    assert "Broken pipe" not in err and "BrokenPipe" not in err
    assert "KV cache cannot hold one request" in err
    assert "oomdoctor: 1 out-of-memory failure, 0 warnings." in err


def test_downstream_closed_in_shell_pipeline_with_head() -> None:
    script = (
        f"yes 'INFO a line' | head -c 20000000 | {sys.executable} -m oomdoctor | head -1; "
        "echo \"status=${PIPESTATUS[2]}\" >&2"
    )
    proc = subprocess.run(["bash", "-c", script], capture_output=True, env=ENV, timeout=60)
    assert proc.stdout == b"INFO a line\n"
    err = proc.stderr.decode()
    assert "Traceback" not in err
    # the rest of the input was never read: no OOM is known, and none can be ruled out (issue 36)
    assert err.strip().splitlines()[-2:] == ["oomdoctor: output closed; analysis incomplete", "status=2"]


def test_upstream_killed_mid_traceback_still_diagnosed() -> None:
    # the writer dies (SIGKILL) right after the OOM line, in the middle of its traceback
    lines = TORCH_LOG.splitlines(keepends=True)
    partial = b"Traceback (most recent call last):\n" + b"".join(lines[:3])
    script = 'cat; kill -9 $$'
    writer = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    reader = subprocess.Popen(
        [sys.executable, "-m", "oomdoctor", "-f", "json"],
        stdin=writer.stdout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert writer.stdout is not None and writer.stdin is not None
    writer.stdout.close()
    writer.stdin.write(partial)
    writer.stdin.close()
    assert writer.wait(10) == -signal.SIGKILL
    out, err = reader.communicate(timeout=30)
    assert out == partial
    assert reader.returncode == 1
    report = json.loads(err)
    finding = report["findings"][0]
    assert finding["rule"] == "torch.cuda-oom"
    assert finding["figures"]["requested_bytes"] == 100663296
    assert finding["location"]["line"] == 3


def _read_stderr_until(proc: subprocess.Popen[bytes], needle: bytes, timeout: float) -> tuple[bytes, float]:
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    os.set_blocking(fd, False)
    buf = b""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.02)
            continue
        if not chunk:
            break
        buf += chunk
        if needle in buf:
            return buf, time.monotonic() - t0
    return buf, time.monotonic() - t0


def wait_ready(proc: subprocess.Popen[bytes]) -> None:
    """Write one harmless line and wait until it comes out: the process is up and reading."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"hello\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == b"hello\n"


def test_diagnosis_appears_while_the_upstream_is_still_open() -> None:
    proc = start()
    assert proc.stdin is not None
    wait_ready(proc)
    proc.stdin.write(KV_LOG)
    proc.stdin.flush()  # no EOF: the finding must come from the quiet timer
    # found while stdin is still open (no EOF could have ended the look-ahead); the wait is
    # against a hang only: how soon is the quiet timer's business (QUIET_SECONDS), not a test's
    err, _ = _read_stderr_until(proc, b"KV cache cannot hold one request", 60)
    assert b"KV cache cannot hold one request" in err
    assert b"--max-model-len" in err
    proc.stdin.close()
    assert proc.stdout is not None
    assert proc.stdout.read() == KV_LOG
    assert proc.wait(30) == 1


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_prints_what_was_found_and_exits_128_plus_n(signum: int, code: int) -> None:
    # the analyser may still be loading the rule pack when the signal comes (a loaded CI machine
    # took longer than the default 2 s grace): a grace longer than any wait here makes the test
    # about what is printed, not about how fast the analyser is
    proc = start("-f", "json", env={**ENV, "OOMDOCTOR_SIGNAL_GRACE": "600"})
    assert proc.stdin is not None
    wait_ready(proc)
    proc.stdin.write(TORCH_LOG)
    proc.stdin.flush()
    # let it read (the upstream stays open): a read is handed to the analyser after it is copied
    # out and before the next read, so once a line written after the log comes out, the whole
    # log is the analyser's
    assert proc.stdout is not None
    assert proc.stdout.read(len(TORCH_LOG)) == TORCH_LOG
    wait_ready(proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=600)  # against a hang only
    assert proc.returncode == code
    assert out == b""  # all of it was read above
    assert b"Traceback" not in err
    assert json.loads(err)["findings"][0]["rule"] == "torch.cuda-oom"


# --- in-process: the analyser never holds up the passthrough ------------------------------------------


class _Copier:
    """Feeds ``data`` into a pipe (in pieces, optionally pausing) and collects the other end."""

    def __init__(self) -> None:
        self.in_r, self.in_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        self.out = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while chunk := os.read(self.out_r, 1 << 20):
            self.out += chunk

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self.in_w, view[: 1 << 16])
            view = view[n:]

    def close_input(self) -> None:
        os.close(self.in_w)

    def finish(self) -> bytes:
        os.close(self.out_w)
        self._reader.join(10)
        os.close(self.in_r)
        os.close(self.out_r)
        return bytes(self.out)


class _BlockedScanner(Scanner):
    """A real scanner whose first feed() waits for ``release``, like a pathologically slow rule."""

    def __init__(self) -> None:
        super().__init__(source="<test>")
        self.release = threading.Event()
        self.entered = threading.Event()

    def feed(self, data: bytes) -> None:
        if not self.release.is_set():
            self.entered.set()
            self.release.wait(30)
        super().feed(data)


#: ~5 MB of healthy lines, 400000 of them
FILLER = b"".join(b"INFO step %d\n" % i for i in range(400_000))


def test_a_stuck_analyser_never_blocks_passthrough_and_line_numbers_stay_exact(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scanner = _BlockedScanner()
    io = _Copier()
    filler = FILLER
    found: list[object] = []
    box: dict[str, object] = {}

    def pipe() -> None:
        box["result"] = run_pipe(scanner, found.extend, in_fd=io.in_r, out_fd=io.out_w, max_chunks=2)

    t = threading.Thread(target=pipe)
    t.start()
    io.write(filler)
    assert scanner.entered.wait(60)
    for _ in range(6):  # 30 MB more while analysis is stuck: passthrough must keep going
        io.write(filler)
    deadline = time.monotonic() + 60  # against a hang only
    while len(io.out) < 7 * len(filler) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(io.out) == 7 * len(filler)  # all passed through while feed() was blocked
    scanner.release.set()
    time.sleep(0.5)  # the analyser drains its queue; the rest was skipped
    io.write(KV_LOG)
    io.close_input()
    t.join(30)
    out = io.finish()
    result = box["result"]
    assert out == filler * 7 + KV_LOG
    # skipped unread, or (sifting: hyperscan) searched and found to hold nothing that starts a failure
    skipped, sifted = result.skipped_bytes, result.sifted_bytes  # type: ignore[attr-defined]
    assert skipped + sifted > 0
    report = result.report  # type: ignore[attr-defined]
    assert [f.rule for f in report.findings] == ["vllm.v1.kv-cache.max-len-exceeds"]
    assert report.findings[0].location.line == 7 * 400_000 + 4
    err = capsys.readouterr().err
    assert err.count("oomdoctor: analysis skipped ") == (1 if skipped else 0)
    assert not skipped or f"analysis skipped {skipped} bytes" in err
    assert not sifted or f"oomdoctor: {sifted} bytes arrived faster than they could be analysed and were only searched" in err


def _pipe_while_analysis_is_stuck(chunks: list[bytes]) -> tuple[bytes, Any]:
    """Pipe mode over FILLER, then ``chunks`` written while analysis is stuck on the first read;
    analysis resumes once everything was copied through. (the bytes copied, the pipe's result)"""
    scanner = _BlockedScanner()
    io = _Copier()
    box: dict[str, object] = {}
    t = threading.Thread(
        target=lambda: box.update(r=run_pipe(scanner, lambda f: None, in_fd=io.in_r, out_fd=io.out_w))
    )
    t.start()
    io.write(FILLER)
    assert scanner.entered.wait(60)
    for chunk in chunks:
        io.write(chunk)
    total = len(FILLER) + sum(map(len, chunks))
    deadline = time.monotonic() + 60  # against a hang only
    while len(io.out) < total and time.monotonic() < deadline:
        time.sleep(0.01)
    io.close_input()
    scanner.release.set()
    t.join(30)
    return io.finish(), box["r"]


def test_behind_analysis_skips_the_oldest_input_so_the_last_failure_is_still_found(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The failure arrives while analysis is stuck far behind and the input ends right after:
    the oldest queued input is what gets skipped, and the failure is found at its exact line."""
    from oomdoctor.cli import pipe

    copied, result = _pipe_while_analysis_is_stuck([FILLER] * 6 + [KV_LOG])  # 30 MB: more than the queue holds
    assert copied == FILLER * 7 + KV_LOG
    # skipped unread, or (sifting: hyperscan) searched and found to hold nothing that starts a failure
    skipped, sifted = result.skipped_bytes, result.sifted_bytes  # type: ignore[attr-defined]
    assert 7 * len(FILLER) - pipe.QUEUE_BYTES - len(FILLER) < skipped + sifted < 7 * len(FILLER)
    report = result.report  # type: ignore[attr-defined]
    assert [f.rule for f in report.findings] == ["vllm.v1.kv-cache.max-len-exceeds"]
    assert report.findings[0].location.line == 7 * 400_000 + 4
    assert capsys.readouterr().err.count("oomdoctor: analysis skipped ") == (1 if skipped else 0)


def test_making_room_merges_skipped_reads_into_one_gap_and_keeps_their_lines() -> None:
    from oomdoctor.cli import pipe

    result = pipe.PipeResult()
    analyser = pipe._Analyser(Scanner(), lambda f: None, result, 8, 0.5)  # not started: nothing taken
    analyser.max_bytes = 100
    for i in range(5):
        analyser.offer(b"%d\n" % i * 10)  # 20 bytes, 10 lines each: all fit
    assert result.skipped_bytes == 0
    analyser.offer(b"big\n" * 10)  # 40 bytes: the two oldest reads become one gap
    items = list(analyser.q.queue)
    assert isinstance(items[0], pipe._Gap) and (items[0].nbytes, items[0].newlines) == (40, 20)
    assert items[1:] == [b"2\n" * 10, b"3\n" * 10, b"4\n" * 10, b"big\n" * 10]
    assert result.skipped_bytes == 40 and analyser._queued == 100


class _BrokenScanner(Scanner):
    def __init__(self) -> None:
        super().__init__(source="<test>")
        self.calls = 0

    def feed(self, data: bytes) -> None:
        self.calls += 1
        if self.calls == 2:
            raise ValueError("boom")
        super().feed(data)

    def close(self) -> Report:
        # sifting (hyperscan) may have turned the rest of the input into one line count fed at
        # once, or into none: the error then comes at the end
        if self.calls < 2:
            raise ValueError("boom")
        return super().close()


def test_an_analysis_error_is_said_once_and_passthrough_continues(capsys: pytest.CaptureFixture[str]) -> None:
    scanner = _BrokenScanner()
    io = _Copier()
    data = hostile_bytes()
    box: dict[str, object] = {}
    t = threading.Thread(
        target=lambda: box.update(r=run_pipe(scanner, lambda f: None, in_fd=io.in_r, out_fd=io.out_w))
    )
    t.start()
    for i in range(0, len(data), 4096):
        io.write(data[i : i + 4096])
        if i == 0:
            time.sleep(0.05)
    io.close_input()
    t.join(30)
    assert io.finish() == data
    result = box["r"]
    assert result.analysis_error == "ValueError: boom"  # type: ignore[attr-defined]
    assert result.report is None  # type: ignore[attr-defined]
    assert capsys.readouterr().err == "oomdoctor: analysis stopped: ValueError: boom\n"


# The exit code 2 of an analysis error through the real CLI: test_hostile.py::
# test_catastrophic_regex_in_pipe_mode_stops_analysis_not_passthrough.


def test_stdin_from_a_regular_file_is_never_skipped(tmp_path: Path) -> None:
    # `oomdoctor < server.log`: there is no upstream to protect, so the analyser is waited for
    path = tmp_path / "server.log"
    filler = FILLER
    path.write_bytes(filler * 3 + KV_LOG)
    scanner = _BlockedScanner()
    out_r, out_w = os.pipe()
    got = bytearray()
    reader = threading.Thread(target=lambda: [got.extend(b) for b in iter(lambda: os.read(out_r, 1 << 20), b"")])
    reader.start()
    threading.Timer(0.5, scanner.release.set).start()
    with path.open("rb") as fh:
        result = run_pipe(scanner, lambda f: None, in_fd=fh.fileno(), out_fd=out_w, max_chunks=2)
    os.close(out_w)
    reader.join(10)
    os.close(out_r)
    assert bytes(got) == path.read_bytes()
    assert result.skipped_bytes == 0
    assert result.report is not None
    assert result.report.findings[0].location.line == 3 * 400_000 + 4


def test_the_analysis_queue_is_bounded_by_bytes_not_by_reads() -> None:
    """A burst of small reads while the analyser warms up is queued, not skipped; more bytes
    than QUEUE_BYTES are skipped (and counted) rather than held in memory."""
    from oomdoctor.cli import pipe

    release = threading.Event()
    result = pipe.PipeResult()
    analyser = pipe._Analyser(Scanner(), lambda f: None, result, pipe.QUEUE_CHUNKS, 0.5, warmup=release.wait)
    analyser.start()
    for _ in range(500):  # 500 reads of 100 bytes: far more reads than the old 64-read limit
        analyser.offer(b"x" * 99 + b"\n")
    assert result.skipped_bytes == 0
    big = b"y" * (1 << 20)
    for _ in range(pipe.QUEUE_BYTES // len(big) + 4):
        analyser.offer(big)
    # skipped unread, or sifted (searched and found to hold nothing that starts a failure) when the
    # analyser thread built its sifting before these reads came: which one is a race, not the point
    assert 0 < result.skipped_bytes + result.sifted_bytes <= 5 * len(big)
    release.set()
    assert analyser.finish(30)


def test_input_passes_through_while_the_scanner_is_still_being_made() -> None:
    """run_pipe takes a function that makes the scanner: the analyser thread calls it (loading
    the rule pack), and the passthrough does not wait for it."""
    io = _Copier()
    release = threading.Event()
    made: list[str] = []

    def make() -> Scanner:
        release.wait(30)
        made.append(threading.current_thread().name)
        return Scanner(source="<test>")

    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.update(r=run_pipe(make, lambda f: None, in_fd=io.in_r, out_fd=io.out_w)))
    t.start()
    io.write(KV_LOG)
    deadline = time.monotonic() + 60  # against a hang only
    while len(io.out) < len(KV_LOG) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bytes(io.out) == KV_LOG and not made  # all through, the scanner not made yet
    release.set()
    io.close_input()
    t.join(30)
    assert io.finish() == KV_LOG
    assert made == ["oomdoctor-analyser"]
    report = box["r"].report  # type: ignore[attr-defined]
    assert [(f.rule, f.location.line) for f in report.findings] == [("vllm.v1.kv-cache.max-len-exceeds", 4)]


def test_pipe_mode_modules_import_no_pydantic() -> None:
    # what lets the passthrough start ~0.07 s after launch: the report models load later
    code = (
        "import sys, oomdoctor, oomdoctor.cli, oomdoctor.cli.diagnose, oomdoctor.cli.pipe;"
        "print(sorted(m for m in ('pydantic', 'oomdoctor.report', 'oomdoctor.scanner') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


class _SlowScanner(Scanner):
    """Each feed takes at least 5 ms."""

    def feed(self, data: bytes) -> None:
        time.sleep(0.005)
        super().feed(data)


def test_under_a_flood_analysis_works_a_tenth_of_the_time_and_full_speed_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While input is being skipped, the analyser sleeps 9× as long as each chunk took it, so
    the passthrough keeps the CPU and the GIL; once skipping stops, it no longer sleeps."""
    from oomdoctor.cli import pipe

    monkeypatch.setattr(pipe, "FLOOD_WINDOW", 60.0)  # a skip within the last minute: flooding
    naps: list[float] = []
    analyser = pipe._Analyser(_SlowScanner(), lambda f: None, pipe.PipeResult(), 8, 0.5)
    analyser.nap = naps.append
    analyser.last_skip = time.monotonic()
    analyser.start()
    analyser.offer(b"INFO one\n")
    deadline = time.monotonic() + 60  # against a hang only
    while not naps and time.monotonic() < deadline:
        time.sleep(0.01)
    analyser.last_skip = float("-inf")  # the flood is over
    analyser.offer(b"INFO two\n")
    assert analyser.finish(30)
    assert len(naps) == 1 and naps[0] >= (1 / pipe.FLOOD_SHARE - 1) * 0.005


def test_under_a_flood_the_rule_pack_loads_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the rule pack holds the GIL for ~0.4 s: the analyser waits for the flood to end
    (input no longer skipped within FLOOD_WINDOW) before it makes the scanner."""
    from oomdoctor.cli import pipe

    # a window and a wait far longer than the test: the flood ends when the test ends it, however
    # long a loaded machine stalls this thread
    monkeypatch.setattr(pipe, "FLOOD_WINDOW", 600.0)
    monkeypatch.setattr(pipe, "FLOOD_BUILD_WAIT", 600.0)
    naps: list[float] = []
    made: list[int] = []

    def make() -> Scanner:
        made.append(len(naps))
        return Scanner(source="<test>")

    analyser = pipe._Analyser(make, lambda f: None, pipe.PipeResult(), 8, 0.5)
    flooded = threading.Event()

    def nap(seconds: float) -> None:  # each wait for the flood to pass
        naps.append(seconds)
        if len(naps) >= 3:
            flooded.set()
        time.sleep(0.001)

    analyser.nap = nap
    analyser.last_skip = time.monotonic()
    analyser.start()
    assert flooded.wait(60)  # it waited three times while the flood went on...
    assert not made
    analyser.last_skip = float("-inf")  # ...the flood ends
    assert analyser.finish(60)
    assert len(made) == 1 and made[0] >= 3


def test_end_of_input_ends_the_wait_for_a_flood_to_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    from oomdoctor.cli import pipe

    monkeypatch.setattr(pipe, "FLOOD_WINDOW", 60.0)
    monkeypatch.setattr(pipe, "FLOOD_BUILD_WAIT", 60.0)
    result = pipe.PipeResult()
    analyser = pipe._Analyser(lambda: Scanner(source="<test>"), lambda f: None, result, 8, 0.5)
    analyser.last_skip = time.monotonic()
    analyser.start()
    analyser.offer(KV_LOG)
    assert analyser.finish(30)  # would wait a minute if the end did not stop the wait
    assert result.report is not None
    assert [(f.rule, f.location.line) for f in result.report.findings] == [("vllm.v1.kv-cache.max-len-exceeds", 4)]


def test_none_found_after_skipping_says_it_covers_only_the_part_analysed() -> None:
    import io

    from oomdoctor.cli.diagnose import LiveFindings

    empty = Scanner(source="<stdin>").close()
    said = []
    for partial in (False, True):
        stream = io.StringIO()
        LiveFindings(True, stream).summary(empty, "text", None, partial=partial)
        said.append(stream.getvalue())
    assert said == [
        "oomdoctor: no out-of-memory failure found.\n",
        "oomdoctor: no out-of-memory failure found in the part analysed.\n",
    ]


def test_a_failure_followed_by_a_flood_is_still_found_when_sifting() -> None:
    """A failure arrives while analysis is stuck, then far more input than the queue holds: the
    chunk holding it may start a failure, so sifting keeps it while the chunks around it are
    skipped, and it is found at its exact line (hyperscan only: without it, floods skip blindly)."""
    pytest.importorskip("hyperscan")
    copied, result = _pipe_while_analysis_is_stuck([KV_LOG] + [FILLER] * 6)  # 30 MB after it: more than the queue holds
    assert copied == FILLER + KV_LOG + FILLER * 6
    assert result.sifted_bytes > 0  # type: ignore[attr-defined]
    report = result.report  # type: ignore[attr-defined]
    assert [f.rule for f in report.findings] == ["vllm.v1.kv-cache.max-len-exceeds"]
    assert report.findings[0].location.line == 400_000 + 4


#: a traceback frame in vLLM's package every 40 lines: on every chunk a flood is cut into
FRAMES = b"".join(
    b"INFO step %d\n" % i
    + (b'  File "/usr/lib/python3/dist-packages/vllm/engine/core.py", line 12, in step\n' if i % 40 == 0 else b"")
    for i in range(400_000)
)


def test_a_failure_in_a_flood_of_frames_naming_an_engine_is_still_found_when_sifting() -> None:
    """A frame in an engine's package only votes for that engine: it does not keep its chunk,
    or such chunks would fill the queue and push out the one with the failure (was: 1 of 4
    failures found behind ``cat`` in bench/'s request-tracebacks)."""
    pytest.importorskip("hyperscan")
    copied, result = _pipe_while_analysis_is_stuck([KV_LOG] + [FRAMES] * 6)
    assert copied == FILLER + KV_LOG + FRAMES * 6
    assert result.sifted_bytes > 0  # type: ignore[attr-defined]
    report = result.report  # type: ignore[attr-defined]
    assert [f.rule for f in report.findings] == ["vllm.v1.kv-cache.max-len-exceeds"]


def test_sifting_keeps_chunks_with_a_rule_or_a_fact_not_a_vote() -> None:
    pytest.importorskip("hyperscan")
    from oomdoctor.prefilter.triage import builtin_triage, triage_for

    for triage in (builtin_triage(), triage_for(default_pack().rules, default_pack().contexts)):
        assert triage is not None
        assert triage.holds(KV_LOG)
        assert triage.holds(b"INFO 08-19 00:00:01 [api_server.py:1395] vLLM API server version 0.9.2\n")  # a fact
        assert not triage.holds(FRAMES[:100_000])  # votes only
        assert not triage.holds(b"time=2024 level=INFO source=server.go:123 msg=ok\n")
        # a periodic line (SGLang's batch line, half of a busy server's log) does not keep a chunk
        assert not triage.holds(b"[2025-06-01 10:00:41 TP0] Decode batch. #running-req: 1, #token: 161, "
                                b"token usage: 0.00, gen throughput (token/s): 95.12, #queue-req: 0\n")
        # a trigger with a quote, inside a JSON record (docker's json-file): escaped
        ollama = b'time=2024 level=INFO source=server.go:376 msg="starting llama server" cmd="/usr/bin/ollama runner --ctx-size 8192"'
        assert triage.holds(ollama)
        assert triage.holds(json.dumps({"log": ollama.decode() + "\n", "stream": "stderr"}).encode())


def test_a_context_rule_votes_only_exactly_when_its_compiled_pattern_has_no_group() -> None:
    """Sifting and the scanner tell a vote from a fact by the pattern's text (compiling every
    pattern costs start-up time): the text must say what the compiled pattern does."""
    contexts = default_pack().contexts
    assert any(c.votes_only for c in contexts) and not all(c.votes_only for c in contexts)
    for c in contexts:
        assert c.votes_only == (not c.pattern.groupindex), c.rule.id


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "3601"])
def test_a_bad_signal_grace_is_refused_before_anything_is_read(value: str) -> None:
    proc = start(env={**ENV, "OOMDOCTOR_SIGNAL_GRACE": value})
    out, err = proc.communicate(TORCH_LOG, timeout=600)
    assert proc.returncode == 2
    assert out == b""
    assert err.decode().strip() == (
        f"oomdoctor: error: OOMDOCTOR_SIGNAL_GRACE={value!r}: expected seconds from 0 to 3600"
    )


def test_signal_grace_reads_seconds_and_defaults_to_two(monkeypatch: pytest.MonkeyPatch) -> None:
    from oomdoctor.cli.pipe import signal_grace

    monkeypatch.delenv("OOMDOCTOR_SIGNAL_GRACE", raising=False)
    assert signal_grace() == 2.0
    monkeypatch.setenv("OOMDOCTOR_SIGNAL_GRACE", " 0.5 ")
    assert signal_grace() == 0.5
    monkeypatch.setenv("OOMDOCTOR_SIGNAL_GRACE", "3600")
    assert signal_grace() == 3600.0
