"""Long lines are searched whole up to ``reader.MAX_LINE_BYTES`` (1 MiB), in file and pipe mode;
a line beyond that bound is cut, and the report says which (``cut_lines``, a note in text)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.cli import main
from oomdoctor.reader import CUT_LINES_KEPT, MAX_LINE_BYTES, LineSplitter
from oomdoctor.report import CutLine, Report
from oomdoctor.scanner import Scanner

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}

MSG = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.23 GiB is free."
)
FIGURES = {"requested_bytes": 2 << 30, "gpu_index": 0, "total_bytes": 84986665370, "free_bytes": 1320702444}
# what a long line is made of in practice: a request or a tensor dumped as JSON, words and numbers
UNIT = '{"step": 12, "loss": 0.53, "text": "tokens of the prompt, 12.5 MiB of it, nothing failed", "ok": true}, '


def long_line(size: int, where: str) -> str:
    pad = (UNIT * (size // len(UNIT) + 1))[: size - len(MSG) - 2]
    half = len(pad) // 2
    return {
        "start": f"{MSG} {pad} ",
        "middle": f"{pad[:half]} {MSG} {pad[half:]}",
        "end": f" {pad} {MSG}",
    }[where]


def log_with(line: str) -> bytes:
    return f"INFO starting\n{line}\nINFO exiting\n".encode()


def report_of_file(path: Path, capsys: pytest.CaptureFixture[str]) -> Report:
    capsys.readouterr()
    main([str(path), "-f", "json"])
    return Report.model_validate_json(capsys.readouterr().out)


def pipe(data: bytes, *args: str) -> tuple[bytes, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", *args], input=data, capture_output=True, env=ENV, timeout=120
    )
    return proc.stdout, proc.stderr.decode()


@pytest.mark.parametrize("size", [200_000, 1_000_000])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_message_anywhere_in_a_long_line_is_found_in_a_file(
    size: int, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = long_line(size, where)
    assert len(line) == size
    path = tmp_path / "long.log"
    path.write_bytes(log_with(line))
    report = report_of_file(path, capsys)
    assert [(f.rule, f.location.line, f.figures) for f in report.findings] == [("torch.cuda-oom", 2, FIGURES)]
    assert report.cut_lines == [] and report.summary.cut_lines == 0


@pytest.mark.parametrize("size", [200_000, 1_000_000])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_message_anywhere_in_a_long_line_is_found_in_a_pipe_which_passes_every_byte(size: int, where: str) -> None:
    data = log_with(long_line(size, where))
    out, err = pipe(data, "-f", "json")
    assert out == data
    report = Report.model_validate_json(err)
    assert [(f.rule, f.location.line, f.figures) for f in report.findings] == [("torch.cuda-oom", 2, FIGURES)]
    assert report.summary.cut_lines == 0


def test_a_line_of_exactly_the_bound_is_searched_whole_and_one_byte_more_is_cut() -> None:
    for size, cut in ((MAX_LINE_BYTES, []), (MAX_LINE_BYTES + 1, [(2, MAX_LINE_BYTES + 1)])):
        splitter = LineSplitter()
        first, block = splitter.feed_block(b"a\n" + b"x" * size + b"\nb\n")
        assert (first, block) == (1, b"a\n" + b"x" * MAX_LINE_BYTES + b"\nb\n")
        assert (splitter.cut_lines, splitter.cut_count) == (cut, len(cut))


def beyond(where: str) -> bytes:
    """A 3 MiB line (line 2) whose message lies past the bound, or (``start``) within it."""
    return log_with(long_line(3 << 20, where))


def test_a_line_beyond_the_bound_is_cut_and_the_report_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "long.log"
    path.write_bytes(beyond("end"))
    report = report_of_file(path, capsys)
    assert report.findings == []  # (past the bound: not seen, but not silently)
    assert report.summary.cut_lines == 1
    assert report.cut_lines == [CutLine(source=str(path), line=2, bytes=3 << 20, searched_bytes=MAX_LINE_BYTES)]
    main([str(path)])
    assert capsys.readouterr().out == (
        f"Note: 1 line(s) longer than 1.00 MiB searched only in their first 1.00 MiB: {path}:2 (3.00 MiB).\n"
        "oomdoctor: no out-of-memory failure found.\n"
    )


def test_a_message_within_the_bound_of_a_cut_line_is_found_and_the_cut_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "long.log"
    path.write_bytes(beyond("start"))
    report = report_of_file(path, capsys)
    assert [(f.rule, f.location.line, f.figures) for f in report.findings] == [("torch.cuda-oom", 2, FIGURES)]
    assert report.cut_lines == [CutLine(source=str(path), line=2, bytes=3 << 20, searched_bytes=MAX_LINE_BYTES)]


def test_a_pipe_passes_a_line_beyond_the_bound_unchanged_and_names_the_cut() -> None:
    data = beyond("middle")
    out, err = pipe(data)
    assert out == data
    assert err == (
        "Note: 1 line(s) longer than 1.00 MiB searched only in their first 1.00 MiB: <stdin>:2 (3.00 MiB).\n"
        "oomdoctor: no out-of-memory failure found.\n"
    )
    out, err = pipe(data, "-f", "jsonl")
    assert out == data
    summary = json.loads(err.splitlines()[-1])
    assert summary["summary"]["cut_lines"] == 1
    assert summary["cut_lines"] == [{"source": "<stdin>", "line": 2, "bytes": 3 << 20, "searched_bytes": MAX_LINE_BYTES}]


@pytest.mark.parametrize("chunk", [4093, 1 << 16, 1 << 20, 0])
def test_cuts_are_the_same_however_the_input_is_chunked(chunk: int) -> None:
    # lines 2 and 4 are over the bound (line 4 without a final newline), line 3 holds the message
    data = (
        b"a\n" + b"x" * (MAX_LINE_BYTES + 10) + b"\n"
        + long_line(900_000, "middle").encode() + b"\n"
        + b"y" * (2 * MAX_LINE_BYTES + 7)
    )
    scanner = Scanner()
    step = chunk or len(data)
    for i in range(0, len(data), step):
        scanner.feed(data[i : i + step])
        assert len(scanner._splitter._partial) <= MAX_LINE_BYTES  # (bounded memory)
    report = scanner.close()
    assert [(f.rule, f.location.line, f.figures) for f in report.findings] == [("torch.cuda-oom", 3, FIGURES)]
    assert [(c.line, c.bytes) for c in report.cut_lines] == [(2, MAX_LINE_BYTES + 10), (4, 2 * MAX_LINE_BYTES + 7)]
    assert report.summary.cut_lines == 2


def test_a_source_remembers_its_first_cut_lines_and_counts_the_rest() -> None:
    splitter = LineSplitter(max_line=8)
    splitter.feed_block(b"".join(b"%09d\n" % i for i in range(CUT_LINES_KEPT + 5)))
    assert splitter.cut_lines == [(i + 1, 9) for i in range(CUT_LINES_KEPT)]
    assert splitter.cut_count == CUT_LINES_KEPT + 5


def test_many_cut_lines_are_named_by_the_first_three_and_counted() -> None:
    from oomdoctor.render.common import cut_lines_text

    data = b"".join(b"x" * (MAX_LINE_BYTES + i + 1) + b"\n" for i in range(CUT_LINES_KEPT + 2))
    scanner = Scanner()
    scanner.feed(data)
    report = scanner.close()
    assert report.summary.cut_lines == CUT_LINES_KEPT + 2
    assert [c.line for c in report.cut_lines] == list(range(1, CUT_LINES_KEPT + 1))
    assert cut_lines_text(report) == (
        f"Note: {CUT_LINES_KEPT + 2} line(s) longer than 1.00 MiB searched only in their first 1.00 MiB: "
        "<stdin>:1 (1.00 MiB), <stdin>:2 (1.00 MiB), <stdin>:3 (1.00 MiB)"
        f" and {CUT_LINES_KEPT - 1} more."
    )


def test_reports_of_several_files_add_up_their_cut_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"x" * (MAX_LINE_BYTES + 1) + b"\n")
    b.write_bytes(b"ok\n" + b"y" * (MAX_LINE_BYTES + 2) + b"\n")
    capsys.readouterr()
    main([str(a), str(b), "-f", "json"])
    report = Report.model_validate_json(capsys.readouterr().out)
    assert report.summary.cut_lines == 2
    assert [(c.source, c.line, c.bytes) for c in report.cut_lines] == [
        (str(a), 1, MAX_LINE_BYTES + 1),
        (str(b), 2, MAX_LINE_BYTES + 2),
    ]
