"""Bytes in, numbered lines out.

:class:`LineSplitter` cuts a byte stream into physical lines however it is chunked, capping each
line's length so that a 200 MB line without a newline costs bounded memory. :func:`normalise`
turns one physical line into :class:`Line` objects: invalid UTF-8 replaced, ``\\r`` handled,
ANSI colour codes (real and pasted renderings) removed, and the log prefix split off and kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from oomdoctor.newlines import count_newlines

#: Longest physical line searched whole (1 MiB); the rest of a longer line is dropped, and the
#: report says so (``Report.cut_lines``). Passthrough in pipe mode is unaffected, it happens
#: before this. It bounds the memory one line costs: a 200 MB line without a newline is held as
#: its first MiB.
MAX_LINE_BYTES = 1024 * 1024

#: How many cut lines a source remembers by number (the rest are only counted).
CUT_LINES_KEPT = 16


class LineSplitter:
    """Split a byte stream into ``(line_number, bytes)`` pairs, independent of chunk boundaries."""

    def __init__(self, max_line: int = MAX_LINE_BYTES) -> None:
        self._max = max_line
        self._partial = bytearray()
        self._overflow = False
        #: bytes of the line being kept that fell beyond the cap
        self._dropped = 0
        self.line_number = 0
        #: the first :data:`CUT_LINES_KEPT` lines cut to the cap: ``(line number, length in bytes)``
        self.cut_lines: list[tuple[int, int]] = []
        #: how many lines were cut to the cap in all
        self.cut_count = 0

    def feed_block(self, data: bytes, count: bool = True) -> tuple[int, bytes]:
        """Return ``(first_line_number, block)`` where ``block`` holds only complete lines.

        The block ends with ``\\n`` (or is empty). Bytes after the last newline are kept for the
        next call. A line longer than the cap is cut at the cap; the cut part is discarded.
        With ``count=False`` the caller counts the block's lines itself and reports them with
        :meth:`advance` before the next call (saves a pass over the block).
        """
        end = data.rfind(b"\n")
        if end < 0:
            self._keep(data)
            return self.line_number + 1, b""
        if self._partial or self._overflow:
            first_nl = data.find(b"\n")
            self._keep(memoryview(data)[:first_nl])
            head = b"".join((self._partial, b"\n", memoryview(data)[first_nl + 1 : end + 1]))
            self._end_partial()
        else:
            head = data if end == len(data) - 1 else data[: end + 1]
        first = self.line_number + 1
        if len(head) > self._max and has_long_line(head, self._max):
            head = _cap_lines(head, self._max, first, self._note_cut)
        if count:
            self.line_number += count_newlines(head)
        if end + 1 < len(data):
            self._keep(memoryview(data)[end + 1 :])
        return first, head

    def feed_spans(self, data: bytes) -> tuple[bytes, int, int]:
        """Like ``feed_block(data, count=False)`` without copying ``data``.

        Returns ``(head, lo, hi)``: ``head`` is a (small) block of complete lines that comes
        first (the line started by earlier calls, finished now; ``b""`` if none), then
        ``data[lo:hi]`` holds the following complete lines (``lo == hi`` if none). Line numbers
        and :meth:`advance` work as with ``feed_block(..., count=False)``, head first.
        """
        end = data.rfind(b"\n")
        if end < 0:
            self._keep(data)
            return b"", 0, 0
        lo, hi = 0, end + 1
        head = b""
        if self._partial or self._overflow:
            lo = data.find(b"\n") + 1
            head_len = min(len(self._partial) + lo, self._max + 1)
            head_len + hi - lo
            if hi - lo > self._max and has_long_line(data, self._max, lo, hi):
                _, block = self.feed_block(data, count=False)  # rare: lines over the cap
                return block, 0, 0
            self._keep(memoryview(data)[: lo - 1])
            head = bytes(self._partial) + b"\n"
            self._end_partial()
        elif hi > self._max and has_long_line(data, self._max, 0, hi):
            _, block = self.feed_block(data, count=False)
            return block, 0, 0
        if hi < len(data):
            self._keep(memoryview(data)[hi:])
        return head, lo, hi

    def advance(self, lines: int) -> None:
        """Count ``lines`` lines of a block taken with ``feed_block(..., count=False)``."""
        self.line_number += lines

    @property
    def at_line_start(self) -> bool:
        """Whether the bytes fed so far end with a whole line (no part of one is kept)."""
        return not self._partial and not self._overflow

    def _keep(self, tail: bytes | memoryview) -> None:
        if self._overflow:
            self._dropped += len(tail)
            return
        room = self._max - len(self._partial)
        if len(tail) > room:
            self._partial += tail[:room]
            self._dropped += len(tail) - room
            self._overflow = True
        else:
            self._partial += tail

    def _end_partial(self) -> None:
        """The kept line is complete (it is the next line, ``line_number + 1``): forget it, and
        note it if it was cut."""
        if self._overflow:
            self._note_cut(self.line_number + 1, len(self._partial) + self._dropped)
        self._partial.clear()
        self._overflow = False
        self._dropped = 0

    def _note_cut(self, number: int, length: int) -> None:
        self.cut_count += 1
        if len(self.cut_lines) < CUT_LINES_KEPT:
            self.cut_lines.append((number, length))

    def close(self) -> tuple[int, bytes]:
        """Return the last line if the stream did not end with a newline."""
        if not self._partial and not self._overflow:
            return self.line_number + 1, b""
        line = bytes(self._partial) + b"\n"
        self._end_partial()
        self.line_number += 1
        return self.line_number, line


_LONG_LINE: dict[int, re.Pattern[bytes]] = {}


def has_long_line(block: bytes, cap: int, lo: int = 0, hi: int | None = None) -> bool:
    """Whether a line of ``block[lo:hi]`` is longer than ``cap``.

    Exact (findings must not depend on where chunks split), and cheap: a line longer than
    ``cap`` contains a whole newline-free window of ``cap // 2`` bytes, so a few ``find`` calls
    clear an ordinary block; only a suspicious one gets the linear regex check.
    """
    hi = len(block) if hi is None else hi
    first = block.find(b"\n", lo, hi)
    if first < 0:
        return hi - lo > cap
    if first - lo > cap:
        return True
    half = max(cap // 2, 1)
    if all(block.find(b"\n", s, s + half) >= 0 for s in range(first, hi - half + 1, half)):
        return False
    pat = _LONG_LINE.get(cap)
    if pat is None:
        pat = _LONG_LINE[cap] = re.compile(b"\n[^\n]{%d}" % (cap + 1))
    return pat.search(block, first, hi) is not None


def last_lines_start(block: bytes, lo: int, hi: int, lines: int) -> int:
    """Where the last ``lines`` lines of ``block[lo:hi]`` begin: whole lines (``hi`` at a line
    start), more than ``lines`` of them."""
    near = hi - 1
    rfind = block.rfind
    for _ in range(lines):
        near = rfind(b"\n", lo, near)
    return near + 1


def _cap_lines(
    block: bytes, cap: int, first: int = 1, on_cut: Callable[[int, int], None] | None = None
) -> bytes:
    """``block``'s lines each cut to ``cap`` bytes; ``on_cut(number, length)`` for each line cut
    (``first``: the number of the block's first line)."""
    out = []
    for i, line in enumerate(block.split(b"\n")[:-1]):
        if len(line) > cap:
            if on_cut is not None:
                on_cut(first + i, len(line))
            line = line[:cap]
        out.append(line)
    return b"\n".join(out) + b"\n"


def cut_long_lines(block: bytes, lo: int = 0, cap: int = MAX_LINE_BYTES) -> bytes:
    """``block`` (whole lines from ``lo``) with each line from ``lo`` on cut to ``cap`` bytes, as
    :class:`LineSplitter` hands lines on; ``block`` itself when none is longer."""
    if len(block) - lo <= cap or not has_long_line(block, cap, lo):
        return block
    return block[:lo] + _cap_lines(block[lo:], cap)


def iter_block_lines(first: int, block: bytes) -> Iterator[tuple[int, bytes]]:
    """Yield ``(number, line)`` for every line of a block from :meth:`LineSplitter.feed_block`."""
    n = first
    for line in block.split(b"\n")[:-1]:
        yield n, line
        n += 1


# --- normalisation -----------------------------------------------------------------------------

_ANSI = re.compile(
    r"\x1b\[[0-9;?]*[A-Za-z]"  # real CSI sequences
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    r"|\^\[\[[0-9;]*[A-Za-z]"  # pasted as ^[[1;36m
    r"|#033\[[0-9;]*[A-Za-z]"  # journald's rendering
    r"|\\x1b\[[0-9;]*[A-Za-z]"  # a repr()'d escape
    r"|\\033\[[0-9;]*[A-Za-z]"
    r"|\\u001b\[[0-9;]*[A-Za-z]"
    r"|\x1b"
)

# Each prefix pattern is tried at the start of the remaining text, repeatedly, in this order.
# Named group ``rank`` (or ``proc``) becomes the line's rank label.
PREFIX_PATTERNS: tuple[str, ...] = (
    # a quoted paste (Markdown, e-mail, chat): > line, > > line
    r"(?:>[ \t]?)+",
    # AWS CLI v2 `aws logs tail` (its default, detailed format): the event's time as Python's
    # isoformat() in UTC, then the log stream's name (ECS/EKS/Lambda streams hold "/", EC2's is the
    # instance id, SageMaker's the host "algo-1-<epoch>")
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{6})?[+-]\d\d:\d\d (?=[^\s:*]*/|i-[0-9a-f]{8}|algo-\d)[^\s:*]+ ",
    # `aws logs get-log-events --output text`: EVENTS<tab>ingestionTime<tab>message<tab>timestamp, and
    # filter-log-events': EVENTS<tab>eventId<tab>ingestionTime<tab>logStreamName<tab>message<tab>timestamp
    # (the trailing timestamp is cut by normalise); the CloudWatch console's rows copied as
    # epoch-milliseconds<tab>message
    r"EVENTS\t(?:\d{20,}\t\d{13}\t[^\t]+\t|\d{13}\t)",
    r"\d{13}\t",
    # Google Cloud Logging's Logs Explorer rows copied: severity, RFC 3339 time in UTC and the
    # summary fields shown, e.g. "INFO 2025-11-19T20:16:36.096625454Z [resource.labels.containerName: vllm] "
    r"(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY) "
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z (?:\[[\w.]+: [^\]]*\] )*",
    # Kubernetes CRI: 2024-05-01T10:00:00.123456789Z stdout F
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)? (?:stdout|stderr) [FP] ",
    # docker compose v2 / v1:  vllm-1  | ... , vllm_1  | ...
    r"[A-Za-z0-9][\w.\-]*[-_]\d+\s+\| ?",
    # docker service logs:  vllm.1.k5d7rxq4z3n7@worker1    | ...
    r"[\w.\-]+\.\d+\.\w+@[\w.\-]+\s+\| ?",
    # kubectl logs --prefix:  [pod/vllm-7d9f6c-x2x4q/vllm] ...
    r"\[pod/[\w.\-]+/[\w.\-]+\] ",
    # syslog / journald: Mar  4 10:00:00 host proc[123]:
    r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.\-]+ [\w.\-/@]+(?:\[\d+\])?: ",
    # kernel ring buffer [12345.678901]
    r"\[\s*\d+\.\d+\] ",
    # Python logging's default layouts: 2024-05-01 10:00:00,123 INFO msg / ... - name - ERROR - msg
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?\s+(?:-\s+[\w.\-]+\s+-\s+)?"
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::\s*|\s+-\s+|\s+)",
    # ISO-ish timestamps, optionally bracketed, optionally followed by ': ' or ' - '
    r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d| ?UTC)?\]?(?::| -|)\s+",
    # FastChat / fairseq / loguru separators: | ERROR | stderr |   | WARNING | fairseq.trainer |  (loguru: | ERROR | m:f:1 - msg)
    r"\|\s*(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|SUCCESS)\s*\|\s*[\w.:<>\-]+\s*(?:\||\s-\s)\s?",
    # (a logger name field, never the exception's name: "ERROR  | torch.OutOfMemoryError: ...")
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s*\|\s*(?![\w.]*(?:Error|Exception|Warning)\b)[\w.:<>\-]+\s*[|:\-]\s?",
    # a level and a bar alone; RunPod's serverless worker (runpod 1.x rp_logger) pads the level to
    # 7 and may add "job id | "
    r"(?:TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|TIP) *\| (?:[\w\-]+ \| )?",
    # Modal (`modal app logs --show-function-id --show-container-id ...`): its object ids after the time
    r"(?:(?:fu|ta|fc|sb)-[A-Za-z0-9]{8,} )+",
    # vLLM worker/process prefixes: (VllmWorkerProcess pid=1) (Worker_TP1 pid=2) (RayWorkerWrapper pid=3, ip=1.2.3.4)
    r"\((?P<proc>[A-Za-z_][\w.\-]*(?: rank=\d+)?) pid=(?P<pid>\d+)(?:, ip=[\w.:\-]+)?\)\s*",
    r"\((?:raylet|pid=\d+)(?:, ip=[\w.:\-]+)?\)\s*",
    # SkyPilot: (task, pid=2343)  (head, rank=0, pid=2375)  (worker1, rank=1, pid=2357, ip=172.31.18.50)
    r"\((?P<proc>[A-Za-z_][\w.\-]*)(?:, rank=\d+)?, pid=(?P<pid>\d+)(?:, ip=[\w.:\-]+)?\)\s*",
    # Open MPI --tag-output: [1,0]<stderr>:  (job, rank); SageMaker's MPI jobs: [1,mpirank:0,algo-1]<stdout>:
    r"\[\d+,(?:mpirank:)?(?P<rank>\d+)(?:,[\w.\-]+)?\]<(?:stdout|stderr|stddiag)>:\s?",
    # Slurm srun --label:  0: / 12:  (task id)
    r" *(?P<rank>\d+): ",
    # pdsh (DeepSpeed's multi-node launcher): the host, an IPv4 address or a lowercase name ending in a digit
    r"(?:\d{1,3}(?:\.\d{1,3}){3}|[a-z][a-z0-9\-]*\d): ",
    # torch.distributed and torchrun; also with its start cut by the paste ("rank0]:", "nk0]:"),
    # as the first line of a copied excerpt often is
    r"(?:\[rank|rank|ank|nk)(?P<rank>\d+)\]:\s?",
    r"\[default(?P<rank>\d+)\]:\s?",
    r"\[[\w.\-]+:\d+\]:\s?",
    # vLLM's logger: INFO 06-28 23:40:03 llm_engine.py:164]  /  INFO 04-12 08:21:19 [worker.py:267]
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./\-]+:\d+\]\s?",
    # [2024-..] [INFO] [logging.py:96:log_dist] — DeepSpeed; also [INFO|file.py:12] transformers
    r"\[(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?:\|[\w./\-]+:\d+)?\]\s*",
    r"\[[\w.\-]+\.py:\d+(?::\w+)?\]\s*",
    r"\[Rank (?P<rank>\d+)\]\s*",
    # TensorRT-LLM's Python logger (tensorrt_llm/logger.py): [09/17/2025-21:24:19] [TRT-LLM] [RANK 2] [E]
    r"\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[TRT-LLM\] (?:\[RANK (?P<rank>\d+)\] )?(?:\[[VIWEF]\] )?",
    # glog (XLA, TF, C10): E1021 12:00:00.123456 123 file.cc:12]  /  [W1021 12:00:00.000000 1 f.cpp:1]
    r"\[?[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w./\-]+:\d+\]\s?",
    # TF: 2024-01-01 00:00:00.000000: W tensorflow/core/...cc:123]
    r"[IWEF] [\w./\-]+\.(?:cc|h|cpp):\d+\]\s",
    # plain level words at the start of a record
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::|\s+-)\s+",
    # journald pasted with process: time= level=
)


def _one_alternation(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """All prefix patterns as one regex: an alternation tries its branches in order, as the
    list is meant (no pattern matches the empty string), with one call instead of one per
    pattern; groups are renamed ``rank_<i>``/``proc_<i>``/``pid_<i>`` (names must be unique)."""
    branches = [
        re.sub(r"\(\?P<(rank|proc|pid)>", lambda m, i=i: f"(?P<{m[1]}_{i}>", p)  # type: ignore[misc]
        for i, p in enumerate(patterns)
    ]
    return re.compile("|".join(f"(?:{b})" for b in branches))


_PREFIX = _one_alternation(PREFIX_PATTERNS)


@dataclass(slots=True)
class Line:
    """One logical line: its number in the source, the message text and the split-off prefix."""

    number: int
    text: str
    prefix: str = ""
    rank: str | None = None
    #: the physical line ended in blanks, trimmed here (a terminal may have wrapped it there)
    blank_end: bool = False


#: where a server echoes what a user sent (vLLM's request logger, SGLang's ``--log-requests``): the
#: text after it is the user's (vllm 0.10.1 entrypoints/logger.py ``Received request %s: prompt:
#: %r, ...``; sglang 0.4.6 managers/tokenizer_manager.py ``Receive: obj=`` and the request dataclass)
_REQUEST_ECHO = re.compile(r"Received request \S+: prompt: |Receive: obj=(?:Generate|Embedding)ReqInput\(")


def is_request_echo(text: str) -> bool:
    """Whether ``text`` (a line's message) echoes a user's request: a prompt that speaks of an
    out-of-memory error is not one of the program's."""
    return _REQUEST_ECHO.search(text) is not None


#: a substring of every sequence _ANSI removes
_ANSI_MARKERS = ("\x1b", "^[[", "033[", "1b[")
_ANSI_MARKER_BYTES = tuple(m.encode("ascii") for m in _ANSI_MARKERS)


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences and their pasted renderings."""
    if not any(m in text for m in _ANSI_MARKERS):
        return text
    return _ANSI.sub("", text)


#: UTF-8 of the only non-ASCII characters whose lower case holds ASCII letters (U+0130 "İ" -> "i̇",
#: U+212A Kelvin sign -> "k"; checked over all of Unicode in tests/test_reader.py)
FOLDS_TO_ASCII = ("\u0130".encode(), "\u212a".encode())


#: an escape in a JSON string that may hide a literal from the record's bytes, even in the forms
#: the prefilters search too (:func:`oomdoctor.prefilter.interface.json_forms`): an escaped
#: backslash (a Windows path; a record nested in the message, its escapes escaped again), an
#: escaped slash, and a \u escape of an ASCII character other than Go's <, > and &, or of one whose
#: lower case is ASCII; with literals beyond ASCII, any \u escape but Go's (a form holds a
#: literal's lower case only). Searched from the first backslash of a run, the pairs are read as
#: the parser reads them.
_HIDING_ESCAPE = re.compile(rb'\\(?:[^"bfnrtu]|u(?!00(?:3c|3e|26))(?:00[0-7]|0130|212a))', re.IGNORECASE)
_HIDING_ESCAPE_BEYOND_ASCII = re.compile(rb'\\(?:[^"bfnrtu]|u(?!00(?:3c|3e|26)))', re.IGNORECASE)
_GO_ESCAPE = re.compile(rb"\\u00(?:3c|3e|26)", re.IGNORECASE)


def only_cut_by_normalise(raw: bytes, ascii_literals: bool = False) -> bool:
    """Whether :func:`normalise` only cuts ``raw`` (no ANSI sequence or NUL to remove, nothing
    non-ASCII to decode or case-fold): any literal its lines hold is then in ``raw`` too.

    ``ascii_literals``: the literals asked about are ASCII only. Non-ASCII text then changes
    nothing either (decoding never makes or swallows an ASCII character), unless it holds a
    character whose lower case is ASCII (:data:`FOLDS_TO_ASCII`): a tqdm bar's blocks keep a line's
    prefilter answer.

    A JSON record's message is unescaped: every literal it holds is in ``raw`` as it is or in a
    JSON form the prefilters search too, unless an escape of another kind could hide one
    (:data:`_HIDING_ESCAPE`)."""
    # (``in`` one literal at a time: a C search each, faster on long lines than one regex)
    if (
        b"\x1b" in raw
        or b"\x00" in raw
        or (b"[" in raw and (b"^[[" in raw or b"033[" in raw or b"1b[" in raw))
    ):
        return False
    if not (raw.isascii() or (ascii_literals and b"\xc4\xb0" not in raw and b"\xe2\x84\xaa" not in raw)):
        return False
    if raw.startswith((b"{", b"\xef\xbb\xbf{")) and not raw.startswith(b"{'") and b"\\" in raw:  # JSON, escaped
        if (_HIDING_ESCAPE if ascii_literals else _HIDING_ESCAPE_BEYOND_ASCII).search(raw):
            return False
        # Go's escapes of <, > and & beside one written as it is: a literal may hold both kinds
        return not ((b"<" in raw or b">" in raw or b"&" in raw) and _GO_ESCAPE.search(raw))
    return True


def only_cut_in(block: bytes, lo: int = 0, hi: int | None = None, ascii_literals: bool = False) -> bool:
    """Whether :func:`only_cut_by_normalise` holds for every line of ``block[lo:hi]`` (``lo`` at a
    line start): one C search per marker over the whole block instead of per line. False for a
    block that holds a JSON record: whether its escapes may hide a literal is asked of each
    record (a search of every block for them would cost ~0.5 s/GiB)."""
    hi = len(block) if hi is None else hi
    # a line that starts with "{" is a JSON record (its message is unescaped), unless "{'" (a
    # Python dict, a trainer's loss line: no JSON)
    if (block.startswith(b"{", lo) and not block.startswith(b"{'", lo)) or block.count(b"\n{", lo, hi) != block.count(
        b"\n{'", lo, hi
    ):
        return False
    # (a byte-order mark: normalise drops it, and a JSON record may follow)
    if any(block.find(m, lo, hi) >= 0 for m in (b"\x1b", b"\x00", b"\xef\xbb\xbf", *_ANSI_MARKER_BYTES)):
        return False
    if ascii_literals:
        return all(block.find(f, lo, hi) < 0 for f in FOLDS_TO_ASCII)
    return (block if lo == 0 and hi == len(block) else block[lo:hi]).isascii()


def split_prefix(text: str) -> tuple[str, str, str | None]:
    """Return ``(prefix, message, rank)`` for one normalised line."""
    rank: str | None = None
    pos = 0
    match = _PREFIX.match
    for _ in range(10):
        m = match(text, pos)
        if m is None:
            # an indented paste: the indentation belongs to the prefix that follows it (a
            # traceback's own indentation, with no prefix after it, stays in the message)
            if text[pos : pos + 1] not in (" ", "\t"):
                break
            m = match(text, len(text) - len(text[pos:].lstrip(" \t")))
            if m is None:
                break
        for name, value in m.groupdict().items():
            if value is not None:
                if name.startswith("rank_"):
                    rank = f"rank{value}"
                elif name.startswith("proc_"):
                    rank = f"{value} pid={m['pid_' + name[5:]]}"
                break
        pos = m.end()
    return text[:pos].rstrip(), text[pos:], rank


#: the message's key in a log collector's JSON record, in order of preference: docker's
#: json-file driver, Kubernetes/fluentd and Azure Container Insights v2 ("log"), JSON loggers,
#: Elastic and Datadog exports ("message", "msg"), Google Cloud Logging ("textPayload"), AWS
#: CloudWatch Logs Insights ("@message"), journald's ``journalctl -o json`` ("MESSAGE"), Azure
#: Monitor's ContainerLog table ("LogEntry") and ContainerLogV2 ("LogMessage", a string unless the
#: line was JSON), Azure Container Apps' ``az containerapp logs show --format json`` ("Log"),
#: Grafana Loki's exports ("line")
ENVELOPE_KEYS = ("log", "message", "msg", "textPayload", "@message", "MESSAGE", "LogEntry", "LogMessage", "Log", "line")
#: keys whose value is an object holding the message under one of :data:`ENVELOPE_KEYS`: Google
#: Cloud Logging's structured entries ("jsonPayload"), Datadog's and Elastic's nested records
ENVELOPE_OBJECTS = ("jsonPayload", "attributes", "_source", "fields")


#: keys of a JSON record holding the formatted traceback beside its message: structlog's
#: format_exc_info ("exception"; cog, the server of Replicate's models, logs this way),
#: python-json-logger ("exc_info"), Elastic's ECS loggers ("stack_trace")
TRACEBACK_KEYS = ("exception", "exc_info", "stack_trace")


def _message_of(record: dict[str, object], depth: int = 0) -> str | None:
    for key in ENVELOPE_KEYS:
        value = record.get(key)
        if isinstance(value, str):
            tracebacks = [tb for k in TRACEBACK_KEYS if isinstance(tb := record.get(k), str) and tb.strip()]
            return "\n".join((value, *tracebacks)) if tracebacks else value
    if depth < 2:
        for key in ENVELOPE_OBJECTS:
            value = record.get(key)
            if isinstance(value, dict) and (found := _message_of(value, depth + 1)) is not None:
                return found
    return None


def unwrap_envelope(text: str) -> str:
    """The message a JSON log record carries, or ``text`` itself when it is not such a record.

    A message that is itself a record (docker's json-file line shipped by a collector as Loki's
    or CloudWatch's message) is unwrapped too, once."""
    for _ in range(2):
        if not text.startswith("{"):
            return text
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            return text
        if not isinstance(record, dict) or (found := _message_of(record)) is None:
            return text
        text = found
    return text


#: the last column of an ``aws logs get-log-events --output text`` row (epoch milliseconds)
_EVENT_TIMESTAMP_COLUMN = re.compile(r"\t\d{13}$")


def normalise(number: int, raw: bytes) -> list[Line]:
    """Decode one physical line and split it into logical :class:`Line` objects.

    A JSON log record (:data:`ENVELOPE_KEYS`) stands for its message. ``\\r`` ends a logical
    line (progress bars, vLLM's ``\\r\\n`` multi-line records), and so does ``\\n`` inside a
    record's message; each non-blank piece keeps the physical line's number.
    """
    text = raw.decode("utf-8", "replace")
    if text.startswith("\ufeff"):  # a UTF-8 byte-order mark (a file's, or one cat put mid-stream)
        text = text[1:]
    if "\x00" in text:
        text = text.replace("\x00", "")
    if text.startswith("{"):
        text = unwrap_envelope(text).replace("\n", "\r")
    text = strip_ansi(text)
    pieces = text.split("\r") if "\r" in text else [text]
    out = []
    for piece in pieces:
        if not piece.strip():
            continue
        trimmed = piece.rstrip()
        prefix, message, rank = split_prefix(trimmed)
        if prefix.startswith("EVENTS\t"):  # the AWS CLI's text output: the event's timestamp ends the row
            message = _EVENT_TIMESTAMP_COLUMN.sub("", message)
        out.append(Line(number, message, prefix, rank, len(trimmed) < len(piece)))
    return out
