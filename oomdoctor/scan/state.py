"""What the scanner's parts share: its limits, the state of a scan, and an open finding.

The scan is split along its seams (see :mod:`oomdoctor.scanner`); each part is a mixin over
:class:`ScanState`, which declares the attributes :class:`~oomdoctor.scanner.Scanner` sets up and,
for type checking only, the methods the parts call on one another.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oomdoctor.context import ContextCollector
    from oomdoctor.prefilter import Prefilter
    from oomdoctor.reader import Line, LineSplitter
    from oomdoctor.report import CutLine, Finding, Report
    from oomdoctor.rulepack import CompiledRule, RulePack
    from oomdoctor.scan.matching import _Pending
    from oomdoctor.scan.recent import RecentLines
    from oomdoctor.scan.runs import LastFold

#: lines after a finding during which traceback frames and markers still count for its phase
AFTER_LINES = 80

#: lines before a finding during which frames of the same traceback count
BEFORE_LINES = 200

#: lines above a trigger line in which a message wrapped before its trigger may start
LEAD_LINES = 2

#: lines before a traceback header in which a marker line still names the failing step
MARKER_LEAD = 3

#: lines after a failure (after its last line and the last copy of it another rank printed) in
#: which a progress line still names its step, when none came before (another stream's line
#: interleaved after the error: "Loading checkpoint shards: 3%")
PROGRESS_LAG = 3

#: Ray's log deduplicator's summary of lines it held back ("... [repeated 30x across cluster]",
#: ray/_private/ray_logging.py): printed at a later flush, so where it stands says nothing about
#: when its step ran, and it is no progress line (the first copy was printed when it happened)
RAY_REPEAT_SUFFIX = "across cluster]"


def ray_repeat(text: str) -> bool:
    """Whether ``text`` is a Ray deduplicator's late summary of a line printed before."""
    return text.rstrip().endswith(RAY_REPEAT_SUFFIX)


#: a failure repeated by another rank within this many lines is the same failure
SAME_FAILURE_LINES = 400

#: the same failure (same rule, same figures) told again further on than this is the program
#: failing again in a later run (a server restarted after its OOM), not a retelling
SAME_RUN_LINES = 10_000

#: findings kept at most (a log with endless OOMs still costs bounded memory)
MAX_FINDINGS = 500

#: a source up to this size is a paste: when nothing was found in it, triggers cut by a line
#: break (a terminal or an issue tracker wrapped the message) are looked for across each break
PASTE_BYTES = 256 << 10

#: deferred phase-evidence lines held before the older ones are settled (see ``Scanner._defers``),
#: and their bytes (lines may be 64 KiB long: memory stays bounded either way)
DEFER_KEEP = 4096

DEFER_BYTES = 8 << 20

#: bytes of a stretch between candidates searched for phase evidence at a time, going backwards
#: from its end for the latest progress line, or forwards while a failure is pending or open
EVIDENCE_PIECE = 16 << 10

#: spans the tail of set-aside evidence holds before its oldest is read (see
#: ``EvidenceAside._set_aside``): a chunk boundary adds one or two, a span ``BEFORE_LINES``
#: behind leaves, and a long stretch clears them (a pipe's 4 KiB reads: ~10 spans)
TAIL_SPANS = 32

#: spans left behind the tail whose latest progress and periodic lines have not been looked for,
#: at most, and the bytes of the blocks they keep alive (see ``EvidenceAside._leave_unsearched``):
#: a stretch whose later neighbour has a progress line is never searched
UNSEARCHED_SPANS = 8

UNSEARCHED_BYTES = 4 << 20

#: bytes of a source read again at a time, going backwards, when a failure asks the far spans for
#: their latest progress line (see ``EvidenceAside._far_progress``)
FAR_PIECE = 1 << 20

#: bytes at each end of the far spans compared when they are read again (a file rewritten since
#: is not read: its lines would be others)
FAR_MARK = 64

#: line starts whose numbers the far spans keep (see ``FarSpans.anchors``): about 0.25 MiB apart
#: in a GiB
FAR_ANCHORS = 4096

#: rule engines that name a library, not the tool that printed the log: such findings take the
#: detected engine's name, do not vote for one, and yield to a more specific rule's message
_GENERIC_ENGINES = frozenset({"pytorch", "python", "cuda", "ggml", "xla", "host", "nccl", "generic"})

#: literals every scan needs besides the rules' own triggers
_BUILTIN_TRIGGERS = (
    'file "', "traceback (most recent call last)", ".py in ", "file [", "file ~", "file /", '", line ',
)


@dataclass
class FarSpans:
    """Stretches of a source that can be read again, dropped before their latest progress line
    was looked for, as one range of the source's bytes (what lies between them was read, or
    holds no progress line later than one read)."""

    start: int
    #: the bytes the range began and ends with (a source whose bytes there changed is not read)
    head: bytes
    tail: bytes
    #: (offset, line number) of line starts in it, ascending, the last at its end: the line number
    #: of a line found is counted from the next one, not from the end; thinned to ``FAR_ANCHORS``
    anchors: list[tuple[int, int]]

    @property
    def end(self) -> int:
        return self.anchors[-1][0]

    def add(self, ends: list[tuple[int, int]], tail: bytes) -> None:
        """Join later spans (``ends``: each one's end and its line number there, ascending;
        ``tail``: the newest one's last bytes)."""
        self.anchors.extend(ends)
        if len(self.anchors) > FAR_ANCHORS:  # every other one, the last kept
            self.anchors = self.anchors[(len(self.anchors) + 1) % 2 :: 2]
        self.tail = tail


@dataclass
class _Open:
    finding: Finding
    rank: str | None
    line: int
    frames: list[str] = field(default_factory=list)
    marker_phases: list[str] = field(default_factory=list)
    before_phase: str | None = None
    progress_phase: str | None = None
    #: the time the failure's line states (clock.line_time)
    time: tuple[int, ...] | None = None
    last_line: int = 0
    #: ranks of merged occurrences: their frames count as evidence too
    merged_ranks: set[str | None] = field(default_factory=set)
    #: frames and "@phase" markers of other ranks after the failure: the ranks run the same code,
    #: so they say where it was when nothing of its own rank does
    foreign: list[str] = field(default_factory=list)


class ScanState:
    """The attributes of a scan (set up by :class:`~oomdoctor.scanner.Scanner`)."""

    pack: RulePack
    hints: dict[str, str]
    dropped_rules: dict[str, str]
    source: str
    sources: list[str]
    _advise: bool
    # prefilters and what their masks mean
    _prefilter: Prefilter
    _ev_prefilter: Prefilter | None
    _masks_ok: bool
    _needles: list[bytes]
    _ev_shift: int
    _ev_mask_of: Callable[[bytes], int]
    _phases_of_path: dict[str, tuple[str, ...]]
    _process_products: dict[str, str]
    _progress_by_mask: dict[int, bool]
    _frame_marks: tuple[bytes, ...]
    _vote_only: frozenset[str]
    _absorbs_by_mask: dict[int, bool]
    _main_mask: Callable[[bytes], int] | None
    _ascii_needles: bool
    _lookahead: int
    # the pack's triggers, indexed
    _phase_by_trigger: dict[str, list[int]]
    _ctx_by_trigger: dict[str, list[int]]
    _rule_by_trigger: dict[str, list[int]]
    _phases_always: list[int]
    _all_triggers: list[str]
    _triggers_by_mask: dict[int, list[str]]
    _markers: list[list[Any]]
    _progress_patterns: list[list[Any]]
    _deferrable_by_mask: dict[int, bool]
    #: per mask, the triggers of a line that may repeat a warning (None: it cannot; see
    #: Folding._repeat_triggers), and the rules whose further occurrences may be folded from
    #: their own line (see folding.folds_from_its_line)
    _repeat_by_mask: dict[int, list[str] | None]
    _folds_from_line: frozenset[int]
    # periodic context lines (see EvidenceAside._read_periodic)
    _periodic_triggers: frozenset[str]
    _vote_triggers: frozenset[str]
    _phase_fixed: frozenset[int]
    _periodic_ctx: dict[int, tuple[int, ...]]
    _periodic_bits: int
    _periodic_groups: dict[int, frozenset[str]]
    _presence: Any
    _periodic_pf: Prefilter | None
    _progress_pf: Prefilter | None
    _line_base: int
    # line assembly (per source)
    _splitter: LineSplitter
    _recent: RecentLines
    _last_lines: deque[tuple[int, bytes]]
    _pending: deque[_Pending]
    _need_lookahead: int
    _here: tuple[bytes, int, int, int]
    _last_line: int
    _paste: bytearray | None
    _deferred: list[tuple[int, bytes, int]]
    _deferred_bytes: int
    #: evidence not searched yet, the last lines of the latest stretches, oldest first:
    #: (block, start, end, line number at start, line number at end, where the block is in the
    #: source or -1) each
    _tail: list[tuple[bytes, int, int, int, int, int]]
    #: spans behind the tail not yet searched for their latest progress and periodic lines,
    #: oldest first: (block, start, end, line number at end, periodic needles it may hold, where
    #: the block is in the source or -1) each; and the bytes of the blocks they keep alive
    _unsearched: list[tuple[bytes, int, int, int, int, int]]
    _unsearched_bytes: int
    #: how to read the source's bytes again (``read(a, b)``: bytes ``a:b`` of what was fed), or
    #: None; bytes fed so far; where the block being scanned is in the source (-1: not known)
    _reread: Callable[[int, int], bytes] | None
    _fed: int
    _block_base: int
    #: the spans dropped unsearched for progress because the source can be read again (see
    #: ``EvidenceAside._far_progress``), as one range; None when there are none
    _far: FarSpans | None
    #: the block being scanned, and the newlines before the line starts a worker counted in it
    _counted: tuple[bytes, dict[int, int] | None]
    # evidence near failures (per source)
    _frames: deque[tuple[int, str, str | None]]
    _cut_frame: tuple[int, str | None, str] | None
    #: the latest unprefixed line that held a frame's rest ("...py", line N, in f), by number
    _frame_rest: tuple[int, str] | None
    _traceback_at: dict[str | None, deque[int]]
    _progress: deque[tuple[int, str]]
    #: the latest progress lines that state a time (line, phase, clock.line_time), for newest-first logs
    _timed_progress: deque[tuple[int, str, tuple[int, ...]]]
    #: lines saying the program recovered from an out-of-memory error just before (line, rank)
    _recovered_at: deque[tuple[int, str | None]]
    #: lines saying the program retries the failed allocation another way (line, rank): the failure
    #: just before is recovered from unless a failure of the same rank follows the line
    _retried_at: deque[tuple[int, str | None]]
    _run_start: int
    #: called before each candidate line is read (a service's deadline: see server.limits.analyse)
    tick: Callable[[], None] | None
    # runs of one line repeated (see oomdoctor.scan.runs): the raw bytes of the candidate line
    # read last, the number the next copy would have, how many copies in a row so far, the first
    # copy's number, the line read for the copies (None: not one logical line read: not passed
    # over), and what reading a candidate line last did
    _run_raw: bytes
    _run_next: int
    _run_count: int
    _run_first: int
    _run_line: Line | None
    _last_fold: LastFold | None
    # matching
    _claimed_until: dict[str | None, int]
    _fold: bool
    _anchor_len: int
    _timing: str
    # findings
    _collector: ContextCollector
    _findings: list[Finding]
    _open: list[_Open]
    _ready: list[Finding]
    _seen: dict[int, tuple[int, set[str | None]]]
    _done: bool
    #: lines cut to the cap in the sources finished (the first of each), and how many in all
    _cut_before: list[CutLine]
    _cut_count_before: int

    if TYPE_CHECKING:  # the methods the parts call on one another
        def _triggers_for(self, mask: int) -> list[str]: ...
        def _start_source(self, name: str) -> None: ...
        def feed(self, data: bytes) -> None: ...
        def _scan_block(self, first: int, block: bytes, lo: int = 0, hi: int | None = None) -> None: ...
        def _process(self, line: Line, mask: int = 0) -> bool: ...
        def _rules_starting(self, text: str, present: list[str]) -> set[int]: ...
        def _note_read(self, line: Line) -> None: ...
        def _repeat_triggers(self, mask: int) -> list[str] | None: ...
        def _fold_repeat(self, number: int, raw: bytes, triggers: list[str]) -> bool: ...
        def _newlines(self, block: bytes, a: int, b: int) -> int: ...
        def _text_mask(self, low: str) -> int: ...
        def _absorbs(self, mask: int) -> bool: ...
        def _defers(self, number: int, raw: bytes, mask: int) -> bool: ...
        def _between(self, block: bytes, lo: int, a: int, b: int, number: int) -> tuple[int, int, int]: ...
        def _open_before(self, number: int) -> bool: ...
        def _read_evidence(
            self, block: bytes, lo: int, a: int, b: int, number: int, *, until_calm: bool
        ) -> tuple[int, int, int]: ...
        def _set_aside(self, block: bytes, a: int, b: int, number: int) -> int: ...
        def _search_unsearched(self) -> None: ...
        def _pass_far(self, base: int, size: int, number: int, head: bytes, tail: bytes) -> None: ...
        def _defer(self, number: int, raw: bytes, mask: int) -> None: ...
        def _resolve_deferred(self, upto: int, keep: int = 0) -> None: ...
        def _is_progress(self, line: Line, mask: int) -> bool: ...
        def _far_progress(self) -> None: ...
        def _lead_from_block(self, line: Line) -> None: ...
        def _window(self, anchor: Line, size: int) -> list[Line]: ...
        def _lead_lines(self, anchor: Line) -> list[Line]: ...
        def _evaluate_pending(self, final: bool) -> None: ...
        def _match(self, p: _Pending) -> None: ...
        def _search(
            self, rule: CompiledRule, anchor: Line, window: list[Line], clauses: bool = True
        ) -> tuple[Any, str, int, dict[str, Any]] | None: ...
        def _search_clauses(
            self,
            rule: CompiledRule,
            anchor: Line,
            window: list[Line],
            readings: list[tuple[list[str], list[str]]],
        ) -> tuple[Any, str, int, dict[str, Any]] | None: ...
        def _extract(self, rule: CompiledRule, m: Any, text: str) -> dict[str, Any]: ...
        def _extract_figures(self, rule: CompiledRule, m: Any, text: str) -> dict[str, Any]: ...
        def _match_across_breaks(self, data: bytes) -> None: ...
        def _add_finding(
            self, rule: CompiledRule, m: Any, text: str, figures: dict[str, Any], anchor: Line, end_line: int,
            copies: int = 1,
        ) -> None: ...
        def _evidence(self, anchor: Line, rank: str | None) -> list[str]: ...
        def _same_failure(
            self, rule: CompiledRule, figures: dict[str, Any], anchor: Line, message: str, end_line: int,
            copies: int = 1,
        ) -> bool: ...
        def _copies_to_pass(self, block: bytes, start: int, n: int, number: int, raw: bytes) -> int: ...
        def _note_fold(
            self, anchor: Line, rule: CompiledRule, m: Any, text: str, figures: dict[str, Any], end: int, lag: int
        ) -> None: ...
        def _same_run(self, last: int, line: int) -> bool: ...
        def _phase_for(self, o: _Open) -> str: ...
        def _age_open(self, final: bool, last_line: int | None = None) -> None: ...
        def _end_of_source(self) -> None: ...
        def flush(self) -> None: ...
        def findings_so_far(self) -> int: ...
        def poll(self) -> list[Finding]: ...
        def context(self) -> Any: ...
        def close(self) -> Report: ...
