"""Line normalisation: the one-regex prefix split reads every line as the ordered pattern list does."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.prefilter.interface import json_forms
from oomdoctor.reader import (
    FOLDS_TO_ASCII,
    PREFIX_PATTERNS,
    normalise,
    only_cut_by_normalise,
    only_cut_in,
    split_prefix,
    strip_ansi,
)
from tests.corpus import FIXTURES

_ORDERED = [re.compile(p) for p in PREFIX_PATTERNS]


def _split_by_list(text: str) -> tuple[str, str, str | None]:
    """The reference reading: try each pattern in order at the current position, repeatedly."""
    rank: str | None = None
    pos = 0
    for _ in range(10):
        # indentation before a prefix belongs to it
        at = next((i for i in (pos, len(text) - len(text[pos:].lstrip(" \t"))) if any(p.match(text, i) for p in _ORDERED)), pos)
        for pat in _ORDERED:
            m = pat.match(text, at)
            if m and m.end() > pos:
                gd = m.groupdict()
                if gd.get("rank") is not None:
                    rank = f"rank{gd['rank']}"
                elif gd.get("proc") is not None:
                    rank = f"{gd['proc']} pid={gd['pid']}"
                pos = m.end()
                break
        else:
            break
    return text[:pos].rstrip(), text[pos:], rank


def test_no_prefix_pattern_matches_the_empty_string() -> None:
    # the alternation's first matching branch is the list's first match only if none is empty
    assert not [p for p in _ORDERED if p.match("") or p.match("x", 1)]


def test_prefix_split_equals_the_ordered_list_on_every_fixture_line() -> None:
    seen_ranks = set()
    lines = 0
    for log in sorted(FIXTURES.glob("**/*.log")):
        for raw in log.read_bytes().split(b"\n"):
            text = strip_ansi(raw.decode("utf-8", "replace")).rstrip()
            for piece in text.split("\r"):
                want = _split_by_list(piece.rstrip())
                assert split_prefix(piece.rstrip()) == want, (log.name, piece)
                seen_ranks.add(want[2])
                lines += 1
    assert lines > 900
    # the fixtures exercise the rank-bearing branches
    assert any(r and r.startswith("rank") for r in seen_ranks)
    assert any(r and " pid=" in r for r in seen_ranks)


def test_prefixes_stack_and_name_the_rank() -> None:
    line = "vllm-1  | (VllmWorkerProcess pid=812) INFO 06-28 23:40:03 [worker.py:267] Memory profiling"
    assert split_prefix(line) == (
        "vllm-1  | (VllmWorkerProcess pid=812) INFO 06-28 23:40:03 [worker.py:267]",
        "Memory profiling",
        "VllmWorkerProcess pid=812",
    )
    assert split_prefix("[rank3]: torch.OutOfMemoryError: CUDA out of memory.")[2] == "rank3"
    assert split_prefix("[default1]:RuntimeError: x")[2] == "rank1"


MSG = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


@pytest.mark.parametrize(
    ("line", "prefix", "rank"),
    [
        # AWS CLI v2 `aws logs tail` (detailed format): isoformat() time, then the stream's name
        (f"2024-05-01T10:00:00.123000+00:00 ecs/vllm/1a2b3c4d {MSG}", "2024-05-01T10:00:00.123000+00:00 ecs/vllm/1a2b3c4d", None),
        (f"2024-05-01T10:00:00+00:00 i-0abc12345def67890 {MSG}", "2024-05-01T10:00:00+00:00 i-0abc12345def67890", None),
        (f"2024-05-01T10:00:00.500000+00:00 algo-1-1714557600 {MSG}", "2024-05-01T10:00:00.500000+00:00 algo-1-1714557600", None),
        # CloudWatch console rows copied: epoch milliseconds, a tab
        (f"1714557600123\t{MSG}", "1714557600123", None),
        # SageMaker distributed training (Open MPI tags with the host)
        (f"[1,mpirank:3,algo-2]<stderr>:{MSG}", "[1,mpirank:3,algo-2]<stderr>:", "rank3"),
        # RunPod serverless worker (runpod rp_logger: level.ljust(7) + "| ", optional "job_id | ")
        (f"ERROR  | {MSG}", "ERROR  |", None),
        (f"ERROR  | sync-5e1c2f7a-u1 | {MSG}", "ERROR  | sync-5e1c2f7a-u1 |", None),
        (f"2024-05-01T10:00:00.123456789Z INFO   | {MSG}", "2024-05-01T10:00:00.123456789Z INFO   |", None),
        # Modal `modal app logs --timestamps --show-function-id --show-container-id`
        (f"2024-05-01 12:00:00+02:00 fu-Ab3dE5gH7jK9mN1pQ3 ta-01HX7Y8Z9ABCDEF {MSG}",
         "2024-05-01 12:00:00+02:00 fu-Ab3dE5gH7jK9mN1pQ3 ta-01HX7Y8Z9ABCDEF", None),
        # loguru's default format
        (f"2024-05-01 10:00:00.123 | ERROR    | __main__:main:10 - {MSG}",
         "2024-05-01 10:00:00.123 | ERROR    | __main__:main:10 -", None),
        # Slurm srun --label
        (f" 12: {MSG}", " 12:", "rank12"),
        # TensorRT-LLM's Python logger, with and without the rank
        (f"[09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E] {MSG}", "[09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E]", "rank2"),
        (f"[09/17/2025-21:24:19] [TRT-LLM] [W] {MSG}", "[09/17/2025-21:24:19] [TRT-LLM] [W]", None),
    ],
)
def test_cloud_and_console_prefixes_are_split_off(line: str, prefix: str, rank: str | None) -> None:
    assert split_prefix(line) == (prefix, MSG, rank)


def test_an_exception_name_after_a_level_bar_is_the_message_not_a_logger_name() -> None:
    assert split_prefix("ERROR | torch.OutOfMemoryError: CUDA out of memory.")[1].startswith("torch.OutOfMemoryError")
    assert split_prefix("WARNING | UserWarning: x")[1] == "UserWarning: x"


@pytest.mark.parametrize(
    "raw",
    [
        # aws logs get-log-events --output text: EVENTS, ingestionTime, message, timestamp
        f"EVENTS\t1714557600456\t{MSG}\t1714557600123",
        # aws logs filter-log-events --output text: EVENTS, eventId, ingestionTime, logStreamName, message, timestamp
        f"EVENTS\t{'3' * 56}\t1714557600456\tecs/vllm/1a2b3c4d\t{MSG}\t1714557600123",
    ],
)
def test_aws_cli_text_rows_stand_for_their_message(raw: str) -> None:
    (line,) = normalise(1, raw.encode())
    assert line.text == MSG
    assert line.prefix.startswith("EVENTS\t")


@pytest.mark.parametrize("cut", ["rank0]:", "ank0]:", "nk0]:"])
def test_a_torchrun_prefix_cut_by_the_paste_still_names_the_rank(cut: str) -> None:
    """A copied excerpt often starts mid-prefix; its frame must count for rank 0's failure below."""
    line = f'{cut}   File "/x/deepspeed/runtime/zero/stage_1_and_2.py", line 1885, in step'
    assert split_prefix(line) == (cut, '  File "/x/deepspeed/runtime/zero/stage_1_and_2.py", line 1885, in step', "rank0")


def test_a_frame_behind_a_cut_prefix_gives_the_phase() -> None:
    import oomdoctor

    log = (
        'nk0]:   File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 1885, in step\n'
        "[rank0]:     int(self.partition_size[i])).to(self.single_partition_of_fp32_groups[i].dtype)\n"
        "[rank0]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 25.10 GiB.\n"
    )
    assert oomdoctor.diagnose(log).findings[0].phase == "training"


def test_quote_markers_and_indentation_before_a_prefix_are_transport() -> None:
    # a log pasted as a quote (Markdown, e-mail, chat) or indented as a block
    assert split_prefix("> > [rank1]: torch.OutOfMemoryError: x") == ("> > [rank1]:", "torch.OutOfMemoryError: x", "rank1")
    assert split_prefix("    [rank1]:   File \"t.py\", line 9, in f") == ("    [rank1]:", "  File \"t.py\", line 9, in f", "rank1")
    # launchers' prefixes name the process
    assert split_prefix("(head, rank=0, pid=2375) torch.OutOfMemoryError: x")[1:] == ("torch.OutOfMemoryError: x", "head pid=2375")
    assert split_prefix("[1,3]<stderr>:RuntimeError: x")[1:] == ("RuntimeError: x", "rank3")
    assert split_prefix("12: RuntimeError: x")[1:] == ("RuntimeError: x", "rank12")
    assert split_prefix("10.0.0.2: [rank5]: RuntimeError: x")[1:] == ("RuntimeError: x", "rank5")
    assert split_prefix("2024-05-01 10:00:00,123 - train - ERROR - RuntimeError: x")[1] == "RuntimeError: x"
    assert split_prefix("[pod/vllm-7d9f6c-x2x4q/vllm] [rank1]: RuntimeError: x")[1:] == ("RuntimeError: x", "rank1")
    assert split_prefix("vllm.1.k5d7rxq4z3n7@worker1    | [rank1]: RuntimeError: x")[1:] == ("RuntimeError: x", "rank1")
    # an exception's name is not a host
    assert split_prefix("RuntimeError: CUDA out of memory.")[1] == "RuntimeError: CUDA out of memory."
    # a traceback's own indentation is the message's
    assert split_prefix('    File "t.py", line 9, in f') == ("", '    File "t.py", line 9, in f', None)


def test_ansi_precheck_keeps_every_rendering() -> None:
    for text in ("\x1b[1;36mX\x1b[0m", "^[[1;36mX^[[0m", "#033[1;36mX#033[0m", "\\x1b[31mX", "\\033[0mX",
                 "\\u001b[0mX"):
        assert strip_ansi(text) == "X", text
    assert strip_ansi("INFO [worker.py:1] [x] plain") == "INFO [worker.py:1] [x] plain"
    assert [ln.text for ln in normalise(7, b"\x1b[32mINFO\x1b[0m 06-28 23:40:03 [a.py:1] hi\r\n")] == ["hi"]


_PIECES = ["INFO ", "ERROR", " 06-28 23:40:03 ", "[worker.py:267] ", "[rank1]: ", "[default0]:", "(Worker_TP1 pid=9) ",
           "(raylet) ", "vllm-1  | ", "| INFO | stderr | ", "2024-05-01T10:00:00Z stdout F ", "[12.5] ", "E1021 ",
           "12:00:00.123456 1 f.cc:1] ", "[Rank 2] ", "Mar  4 10:00:00 host proc[1]: ", "WARNING: ", "x", " ", "|", "[",
           "CUDA out of memory", "  ", "\t", "> ", ">"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=8))
def test_prefix_split_equals_the_ordered_list_on_generated_lines(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert split_prefix(text) == _split_by_list(text)


_RAW_PIECES = [b"INFO ", b"[rank0]: ", b"CUDA out of memory", b"\x1b[31m", b"^[[0m", b"#033[1m", b"\\x1b[2m",
               b"\x00", b"\r", b"\xc3\xa9", b"\xff", b"K\xe2\x84\xaa", b"\xc4\xb0", b"\xe2\x96\x88", b" x ", b"[a.py:1] ", b'{"log": "', b'"}', b"\\u00e9"]
#: what a JSON record's message may hold, escaped or not
_JSON_PIECES = [b'\\"', b"\\\\", b"\\/", b"\\t", b"\\n", b"\\u003c", b"\\u003C", b"<", b"&", b"\\u0041", b"\\u001b[0m",
                b"\\u0130", b"\\u212a", b"\\u30e1", b"\xe3\x83\xa1", b'{\\"log\\": \\"', b'\\"}', b"File ", b"A", b"-"]


def _in_bytes_or_a_json_form(text: str, raw: bytes, ascii_only: bool) -> None:
    """Every piece of ``text``'s lower case (its ASCII pieces: ``ascii_only``) is in ``raw``'s lower
    case as it is or in one of its JSON forms: what a prefilter finds in the bytes."""
    low, hay = text.lower(), raw.lower()
    for a in range(len(low)):
        for b in range(a + 1, len(low) + 1):
            piece = low[a:b]
            if ascii_only and not piece.isascii():
                break
            lit = piece.encode("utf-8", "surrogatepass")
            assert lit in hay or any(form in hay for form, _ in json_forms([lit])), (piece, raw)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_RAW_PIECES), max_size=8))
def test_a_line_normalise_only_cuts_keeps_its_text_in_its_bytes(pieces: list[bytes]) -> None:
    # the scanner then looks only for the triggers whose needles the prefilter found in the bytes
    raw = b"".join(pieces)
    cut = only_cut_by_normalise(raw)
    if not raw.startswith(b"{"):
        assert cut == (raw.isascii() and not any(p in raw for p in (b"\x1b", b"\x00", b"^[[", b"033[", b"1b[")))
    if cut:
        for ln in normalise(1, raw):
            _in_bytes_or_a_json_form(ln.text, raw, ascii_only=False)
    # with ASCII literals only, non-ASCII text is fine too: every ASCII run of a line's lower case
    # is in the bytes' lower case, so the prefilter's answer for the bytes holds for the line
    if only_cut_by_normalise(raw, ascii_literals=True):
        assert cut or not raw.isascii() or raw.startswith(b"{")  # (a \\u escape beyond ASCII)
        for ln in normalise(1, raw):
            _in_bytes_or_a_json_form(ln.text, raw, ascii_only=True)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_JSON_PIECES), max_size=10), st.sampled_from([b'{"log":"', b'{"message": "', b"\xef\xbb\xbf{\"msg\":\""]))
def test_a_json_record_it_calls_only_cut_holds_its_messages_needles_in_its_bytes(
    pieces: list[bytes], head: bytes
) -> None:
    # a record whose escapes are all of kinds the needles' JSON forms cover: every piece of its
    # message is in its bytes, as it is or escaped as one of those forms would be
    raw = head + b"".join(pieces) + b'\\n","stream":"stderr"}'
    for ascii_only in (False, True):
        if only_cut_by_normalise(raw, ascii_literals=ascii_only):
            for ln in normalise(1, raw):
                _in_bytes_or_a_json_form(ln.text, raw, ascii_only)


def test_json_records_with_only_quotes_and_line_ends_escaped_only_cut() -> None:
    # docker's json-file records of a traceback: escaped quotes and the message's line end
    frame = b'{"log":"  File \\"/usr/lib/python3/starlette/routing.py\\", line 715, in __call__\\n","stream":"stderr"}'
    go = b'{"log":"\\u003cstdin\\u003e \\u0026 done\\n","stream":"stdout"}'
    assert only_cut_by_normalise(frame) and only_cut_by_normalise(go)
    # what the forms do not cover: an escaped backslash (a nested record, a Windows path), an
    # escaped slash, an ASCII letter or an ANSI escape written as \u00XX
    for hidden in (b'{"log":"{\\"log\\":\\"x\\\\\\"y\\"}"}', b'{"log":"C:\\\\vllm\\\\x"}', b'{"log":"a\\/vllm\\/b"}',
                   b'{"log":"\\u0046ile"}', b'{"log":"\\u001b[31mx"}'):
        assert not only_cut_by_normalise(hidden, ascii_literals=True), hidden
    # a character beyond ASCII written as \u: fine for ASCII literals, not for others, nor for
    # one whose lower case is ASCII (the Kelvin sign: "k")
    assert only_cut_by_normalise(b'{"log":"\\u30e1 x"}', ascii_literals=True)
    assert not only_cut_by_normalise(b'{"log":"\\u30e1 x"}')
    assert not only_cut_by_normalise(b'{"log":"\\u212a x"}', ascii_literals=True)


def test_the_characters_whose_lower_case_is_ascii_are_all_listed() -> None:
    folds = {chr(c).encode() for c in range(0x80, 0x110000) if c < 0xD800 or c > 0xDFFF
             if any(ord(x) < 0x80 for x in chr(c).lower())}
    assert folds == set(FOLDS_TO_ASCII)


def test_a_json_log_record_stands_for_its_message() -> None:
    docker = b'{"log":"[rank0]: torch.OutOfMemoryError: CUDA out of memory. \\u00e9\\n","stream":"stderr","time":"t"}'
    assert [(ln.text, ln.rank) for ln in normalise(3, docker)] == [("torch.OutOfMemoryError: CUDA out of memory. \u00e9", "rank0")]
    # a JSON logger's record holding a whole traceback: one logical line per line, one number
    record = {"level": "error", "message": 'Traceback (most recent call last):\n  File "t.py", line 9, in f\nRuntimeError: x'}
    assert [(ln.number, ln.text) for ln in normalise(7, json.dumps(record).encode())] == [
        (7, "Traceback (most recent call last):"),
        (7, '  File "t.py", line 9, in f'),
        (7, "RuntimeError: x"),
    ]
    assert [ln.text for ln in normalise(1, b'{"textPayload": "Killed"}')] == ["Killed"]
    # not a record, or a record without a message: the line as it is
    for raw in (b'{"step": 12, "loss": 0.5}', b"{not json", b'{"log": 12}'):
        assert [ln.text for ln in normalise(1, raw)] == [raw.decode()]


def test_each_collectors_record_layout_stands_for_its_message() -> None:
    msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    records = [
        {"textPayload": msg, "severity": "ERROR"},  # GCP Cloud Logging, text entry
        {"jsonPayload": {"message": msg, "logger": "vllm"}, "severity": "ERROR"},  # GCP, structured
        {"@timestamp": "2024-05-01 10:00:00.123", "@logStream": "ecs/x", "@message": msg},  # CloudWatch
        {"TimeGenerated": "2024-05-01T10:00:00Z", "LogEntry": msg},  # Azure ContainerLog
        {"TimeGenerated": "2024-05-01T10:00:00Z", "LogMessage": msg, "LogSource": "stderr"},  # ContainerLogV2
        {"TimeStamp": "2024-05-01T10:00:00.1234567+00:00", "Log": msg},  # az containerapp logs show
        {"labels": {"app": "vllm"}, "line": msg},  # Loki
        {"attributes": {"message": msg, "service": "vllm"}},  # Datadog
        {"_source": {"message": msg}},  # an Elasticsearch hit
        {"MESSAGE": msg, "_PID": "12", "PRIORITY": "3"},  # journalctl -o json
        {"line": json.dumps({"log": msg + "\n", "stream": "stderr"})},  # docker json-file in Loki
    ]
    for record in records:
        assert [ln.text for ln in normalise(1, json.dumps(record).encode())] == [msg], record
    # an object without a message stays the line it is
    for raw in ('{"jsonPayload": {"step": 3}}', '{"attributes": "x"}', '{"line": 12}'):
        assert [ln.text for ln in normalise(1, raw.encode())] == [raw]


def test_a_records_traceback_field_is_read_after_its_message() -> None:
    # cog (Replicate's model server) logs through structlog's format_exc_info: the traceback is
    # the record's "exception", beside its "message"
    record = {
        "logger": "cog.server.worker", "timestamp": "2024-05-01T10:00:00.000000Z", "severity": "ERROR",
        "message": "caught exception while running setup",
        "exception": 'Traceback (most recent call last):\n  File "/src/predict.py", line 12, in setup\n'
                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    }
    texts = [ln.text for ln in normalise(1, json.dumps(record).encode())]
    assert texts[0] == "caught exception while running setup"
    assert texts[-1] == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    import oomdoctor

    (finding,) = oomdoctor.diagnose(json.dumps(record).encode()).findings
    assert finding.figures["requested_bytes"] == 2 << 30


def test_a_record_nested_deeper_than_the_parser_goes_is_read_as_text() -> None:
    # the server's fuzzer found it: a pasted JSON body with deep "hints" reached json.loads in a
    # worker thread and came back as a 500; the reader must treat it as plain text, like any
    # other line that is not a record it understands
    import sys

    from oomdoctor.reader import unwrap_envelope

    depth = sys.getrecursionlimit() + 10
    line = '{"log": "x", "hints": ' + "[" * depth + "]" * depth + "}"
    assert unwrap_envelope(line) == line


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_RAW_PIECES), max_size=4), max_size=6), st.booleans())
def test_a_block_is_only_cut_when_each_of_its_lines_is(lines: list[list[bytes]], ascii_literals: bool) -> None:
    raws = [b"".join(pieces).replace(b"\n", b"") for pieces in lines]
    block = b"".join(raw + b"\n" for raw in raws)
    each = all(only_cut_by_normalise(raw, ascii_literals) for raw in raws)
    # (a JSON record is asked about on its own)
    record = any(raw.startswith(b"{") and not raw.startswith(b"{'") for raw in raws)
    assert only_cut_in(block, ascii_literals=ascii_literals) == (each and not record)
    assert only_cut_in(b"xx\n" + block + b"yy", 3, 3 + len(block), ascii_literals) == (each and not record)
