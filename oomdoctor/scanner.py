"""The streaming scanner: bytes in, findings and context out.

``Scanner.feed(bytes)`` accepts any chunking; findings never depend on where chunks split.
Each block of complete lines goes through the prefilter; only candidate lines (and a short
look-ahead after each) are decoded, normalised and matched against the full rules.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import regex

from oomdoctor import __version__
from oomdoctor.context import ContextCollector
from oomdoctor.fallback import is_fallback, kind_for, role_figures
from oomdoctor.figures import groups_to_figures
from oomdoctor.prefilter import Prefilter, make_prefilter, needles
from oomdoctor.prefilter.markers import marker_finder
from oomdoctor.reader import Line, LineSplitter, normalise, only_cut_by_normalise, only_cut_in
from oomdoctor.report import Finding, Location, Report, Summary, Tool
from oomdoctor.rulepack import CompiledRule, RulePack, default_pack
from oomdoctor.rulepack.loader import REGEX_TIMEOUT

_FRAME = regex.compile(
    r'(?:^|(?<=\s))File "(?P<path>[^"]*)", line \d+, in (?P<func>[\w<>.\-]+)'
    # IPython >= 8 / Jupyter: "File ~/x/cache_engine.py:64, in CacheEngine._allocate_kv_cache(self, ...)",
    # rendered as "File [~/x/cache_engine.py:64](http://...), in ..." when pasted from a notebook
    r"|(?:^|(?<=\s))File \[?(?P<path>[^\s\]]+?\.py):\d+(?:\]\([^)]*\))?, in (?:[\w<>]+\.)*(?P<func>[\w<>\-]+)\("
    # IPython <= 7: "~/lib/python3.7/site-packages/torch/nn/modules/module.py in _call_impl(self, *input)"
    r"|(?:^|(?<=\s))(?P<path>\S+\.py) in (?P<func>[\w<>\-]+)\("
    # the second half of a frame line wrapped by a terminal: 'io\queueing.py", line 536, in process_events'
    r'|^\s*(?P<path>[^"\s]*)", line \d+, in (?P<func>[\w<>.\-]+)\s*$'
)
_TRACEBACK = "Traceback (most recent call last)"
#: process names that only vLLM's output prefixer prints (shared/research/upstream-messages.md,
#: "Log-line prefix formats"): the line comes from vLLM whatever it says
_VLLM_PROCESS = regex.compile(
    r"(?:VllmWorkerProcess|VllmWorker rank=\d+|EngineCore(?:_\w+)?|DPEngineCore_\d+|APIServer(?:_\d+)?"
    r"|Worker(?:_(?:DP|PP|TP|EP)\d+)+|RayWorkerWrapper) pid="
)
#: a line that re-prints another process's failure (vLLM's engine core quoting a worker's
#: exception): merged into that failure without counting as another occurrence
_REPRINTS = ("worker failed with error",)
#: literals every scan needs besides the rules' own triggers
_BUILTIN_TRIGGERS = (
    'file "', "traceback (most recent call last)", ".py in ", "file [", "file ~", "file /", '", line ',
)

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


#: rule engines that name a library, not the tool that printed the log: such findings take the
#: detected engine's name, do not vote for one, and yield to a more specific rule's message
_GENERIC_ENGINES = frozenset({"pytorch", "python", "cuda", "ggml", "xla", "host", "nccl", "generic"})


_FOLDED: dict[str, Any] = {}


def scan_triggers(pack: RulePack) -> list[str]:
    """Every literal a scan with ``pack`` looks for: the pack's triggers and the scanner's own
    (a prefilter built for these, passed to :class:`Scanner`, finds every candidate line)."""
    return [*pack.all_triggers(), *_BUILTIN_TRIGGERS]


def _folded(pattern: Any) -> Any:
    """``pattern`` compiled case-insensitively (once per pattern text)."""
    found = _FOLDED.get(pattern.pattern)
    if found is None:
        found = _FOLDED[pattern.pattern] = regex.compile(pattern.pattern, regex.VERSION0 | regex.IGNORECASE)
    return found


def _cuts_a_word(m: Any, text: str) -> bool:
    """Whether a group of ``m`` ends at a line break inside a number ("15185" / "1674624"): a
    reading that joins the pieces with nothing between them may read it whole."""
    for name in m.groupdict():
        end = m.end(name)
        if 0 < end < len(text) - 1 and text[end] == "\n" and text[end - 1].isdigit() and text[end + 1].isdigit():
            return True
    return False


def _agree(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Figures that do not contradict each other (every shared name has the same value)."""
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _specificity(rule: CompiledRule) -> tuple[int, int]:
    return (rule.rule.engine not in _GENERIC_ENGINES, rule.rule.priority)


def _specificity_of(pack: RulePack, rule_id: str) -> tuple[int, int]:
    try:
        return _specificity(pack.rule(rule_id))
    except KeyError:
        return (0, 0)


def _shared_prefix(a: str, b: str) -> str:
    """The prefix two lines share up to a delimiter (blank, '|', ']', '>', ':') after its eighth
    character, or "" (the prefix of a log the reader does not know, repeated on each line)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    cut = max((i + 1 for i in range(n) if a[i] in " |]>:"), default=0)
    return a[:cut] if cut >= 8 else ""


def _search_any(patterns: list[Any], text: str) -> bool:
    """Whether one of ``patterns`` is found in ``text``; a pattern that matches moves to the front
    (all of a phase's markers mean the same, so their order does not change the answer)."""
    for i, pat in enumerate(patterns):
        if pat.search(text, timeout=REGEX_TIMEOUT):
            if i:
                patterns.insert(0, patterns.pop(i))
            return True
    return False


class _ClauseMatch:
    """Stands for a regex match when a ``by_clause`` rule matched by its triggers: the whole
    joined text is the message, it has no groups, and the clauses that found a figure record
    where it ended (:attr:`ends`)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.ends: list[int] = []

    def start(self) -> int:
        return 0

    def end(self) -> int:
        return max(self.ends, default=len(self.text.split("\n", 1)[0]))

    def group(self, _n: int = 0) -> str:
        return self.text

    def groupdict(self) -> dict[str, str | None]:
        return {}


class RuleTimeout(Exception):
    """A rule's regex ran past its time limit; the message names the rule."""


@dataclass
class _Pending:
    line: Line
    rules: list[CompiledRule]
    source: str


@dataclass
class _Open:
    finding: Finding
    rank: str | None
    line: int
    frames: list[str] = field(default_factory=list)
    marker_phases: list[str] = field(default_factory=list)
    before_phase: str | None = None
    progress_phase: str | None = None
    last_line: int = 0
    #: ranks of merged occurrences: their frames count as evidence too
    merged_ranks: set[str | None] = field(default_factory=set)
    #: frames and "@phase" markers of other ranks after the failure: the ranks run the same code,
    #: so they say where it was when nothing of its own rank does
    foreign: list[str] = field(default_factory=list)


class Scanner:
    """Streaming API: ``feed(bytes)`` as data arrives, ``poll()`` for finished findings,
    ``close() -> Report`` at the end."""

    def __init__(
        self,
        pack: RulePack | None = None,
        source: str = "<stdin>",
        *,
        prefilter: Prefilter | None = None,
        hints: dict[str, str] | None = None,
        advise: bool = True,
    ) -> None:
        self.pack = pack or default_pack()
        self.hints = dict(hints or {})
        self._advise = advise
        triggers = scan_triggers(self.pack)
        self._index_triggers()
        #: the prefilter of the phase-evidence needles (see :meth:`_between`); None: the main
        #: prefilter finds every candidate line, evidence lines among them
        self._ev_prefilter: Prefilter | None = None
        if prefilter is None:
            main, evidence = self._split_needles(triggers)
            self._prefilter = make_prefilter([n.decode("utf-8") for n in main])
            if evidence:
                self._ev_prefilter = make_prefilter([n.decode("utf-8") for n in evidence])
        else:
            self._prefilter = prefilter
        #: candidate masks name needles of these triggers (a prefilter built for other triggers
        #: cannot say which of ours a line holds: every trigger is then tried)
        self._masks_ok = prefilter is None or getattr(prefilter, "needles", None) == needles(triggers)
        #: every needle a mask may name: the main prefilter's bits first, then the evidence ones
        self._needles = list(self._prefilter.needles) + list(self._ev_prefilter.needles if self._ev_prefilter else [])
        self._ev_shift = len(self._prefilter.needles)
        self._ev_bits_of = [(1 << (self._ev_shift + i), n) for i, n in enumerate(self._needles[self._ev_shift :])]
        self._lookahead = min(48, max([r.rule.window for r in self.pack.rules] + [0]) * 4)
        self._index_deferrable()
        self.sources: list[str] = []
        self._collector = ContextCollector()
        self._findings: list[Finding] = []
        self._open: list[_Open] = []
        self._ready: list[Finding] = []
        #: per finding (by id): last line it was seen on, and the ranks (None too) that told it
        self._seen: dict[int, tuple[int, set[str | None]]] = {}
        self._done = False
        #: the rule being matched is read case-insensitively (see :meth:`_search`)
        self._fold = False
        #: length of the anchor line of the match being read (see :meth:`_extract_figures`)
        self._anchor_len = 0
        self._timing = ""  # the context/phase rule whose regex runs (named by RuleTimeout)
        self._start_source(source)

    def _index_triggers(self) -> None:
        """Map each trigger literal to the phases, context rules and rules that name it."""
        self._phase_by_trigger: dict[str, list[int]] = {}
        self._ctx_by_trigger: dict[str, list[int]] = {}
        self._rule_by_trigger: dict[str, list[int]] = {}
        #: phases without triggers whose markers or progress patterns are tried on every candidate
        self._phases_always = [
            i for i, ph in enumerate(self.pack.phases) if not ph.triggers and (ph.markers or ph.progress)
        ]
        groups: list[tuple[dict[str, list[int]], list[tuple[str, ...]]]] = [
            (self._phase_by_trigger, [p.triggers for p in self.pack.phases]),
            (self._ctx_by_trigger, [c.triggers for c in self.pack.contexts]),
            (self._rule_by_trigger, [r.triggers for r in self.pack.rules]),
        ]
        for index, trigger_lists in groups:
            for i, triggers in enumerate(trigger_lists):
                for t in triggers:
                    index.setdefault(t, []).append(i)
        self._all_triggers = list(
            dict.fromkeys([*self._phase_by_trigger, *self._ctx_by_trigger, *self._rule_by_trigger])
        )
        self._triggers_by_mask: dict[int, list[str]] = {}
        # a phase's markers (and its progress patterns) all mean the same: the one that matched
        # last is tried first (lines of one kind repeat: vLLM's throughput lines)
        self._markers = [list(ph.markers) for ph in self.pack.phases]
        self._progress_patterns = [list(ph.progress) for ph in self.pack.phases]

    def _split_needles(self, triggers: list[str]) -> tuple[list[bytes], list[bytes]]:
        """The needles of the lines that may start or continue a failure or carry a run fact
        (main), and those of the lines that can only be phase evidence (vLLM's throughput lines,
        progress bars, loss lines): the main prefilter never reports the latter, so printing them
        often costs no Python per line (see :meth:`_between`). An evidence needle that holds a
        main one is left out: its lines are main candidates anyway."""
        only_phase = {
            t for t in self._phase_by_trigger if t not in self._ctx_by_trigger and t not in self._rule_by_trigger
        }
        main = needles([t for t in triggers if t not in only_phase])
        evidence = [n for n in needles(sorted(only_phase)) if not any(m in n for m in main)]
        return main, evidence

    def _index_deferrable(self) -> None:
        """What :meth:`_defers` needs: the needles of the scanner's own triggers (tracebacks,
        frames), and whether the prefilter's answers are exact for non-ASCII lines too."""
        own = [t.lower().encode("utf-8") for t in _BUILTIN_TRIGGERS]
        needles_ = self._needles
        self._own_bits = sum(1 << i for i, n in enumerate(needles_) if any(n in t for t in own))
        self._ascii_needles = all(n.isascii() for n in needles_)
        #: finds the lines :meth:`_defers` would not set aside (see :meth:`_odd_evidence`)
        self._odd_finder = marker_finder(type(self._ev_prefilter).__name__ == "HyperscanPrefilter")
        self._deferrable_by_mask: dict[int, bool] = {}
        #: phase-evidence lines not read yet: (line number, bytes, needles mask), in order
        self._deferred: list[tuple[int, bytes, int]] = []
        self._deferred_bytes = 0

    def _triggers_for(self, mask: int) -> list[str]:
        """The triggers a candidate line may hold, given the needles ``mask`` says it holds: those
        that contain one of them (every trigger contains a needle, see :func:`needles`)."""
        found = self._triggers_by_mask.get(mask)
        if found is None:
            if len(self._triggers_by_mask) >= 4096:
                self._triggers_by_mask.clear()
            lits = [lit for i, lit in enumerate(self._needles) if mask >> i & 1]
            found = [t for t in self._all_triggers if any(lit in t.encode("utf-8") for lit in lits)]
            self._triggers_by_mask[mask] = found
        return found

    # -- sources -------------------------------------------------------------------------------

    def _start_source(self, name: str) -> None:
        self.source = name
        self.sources.append(name)
        self._splitter = LineSplitter()
        self._recent: deque[Line] = deque(maxlen=256)
        self._pending: deque[_Pending] = deque()
        self._need_lookahead = 0
        #: the block, its start, and the offset and number of the candidate line being processed
        self._here: tuple[bytes, int, int, int] = (b"", 0, 0, 0)
        self._claimed_until: dict[str | None, int] = {}
        self._frames: deque[tuple[int, str, str | None]] = deque(maxlen=400)
        #: line numbers of "Traceback (most recent call last)" headers, per rank
        self._traceback_at: dict[str | None, deque[int]] = {}
        self._progress: deque[tuple[int, str]] = deque(maxlen=64)
        self._last_line = 0
        #: the source's bytes while it is small enough to be a paste (see PASTE_BYTES)
        self._paste: bytearray | None = bytearray()
        #: the latest start-up banner (a line naming the engine's version): a new run begins
        self._run_start = 0

    @property
    def prefilter(self) -> Prefilter:
        return self._prefilter

    def use_prefilter(self, prefilter: Prefilter) -> None:
        """Swap in another prefilter for the same needles (one that knows some answers ahead:
        :class:`oomdoctor.prefilter.pool.Precomputed`)."""
        if prefilter.needles != self._prefilter.needles:
            raise ValueError("a prefilter for other needles")
        self._prefilter = prefilter

    def new_source(self, name: str) -> None:
        """Finish the current source and continue with another (line numbers restart)."""
        self._end_of_source()
        self._start_source(name)

    def set_command(self, argv: list[str]) -> None:
        """The exact command that produced the log (``oomdoctor run``): ``Context.command`` and
        the launch arguments parsed from it, as if the log had printed them."""
        import shlex

        from oomdoctor.context import parse_argv

        _, args = parse_argv(shlex.join(argv))
        self._collector.apply_args(args, list(argv))

    # -- feeding -------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Consume a chunk of bytes (any size, any split)."""
        if self._paste is not None:
            if len(self._paste) + len(data) > PASTE_BYTES:
                self._paste = None
            else:
                self._paste += data
        head, lo, hi = self._splitter.feed_spans(data)  # no copy of ``data``
        try:
            if head:
                self._scan_block(self._splitter.line_number + 1, head)
            if hi > lo:
                self._scan_block(self._splitter.line_number + 1, data, lo, hi)
        except TimeoutError:  # a context or phase regex (rule patterns raise RuleTimeout)
            raise RuleTimeout(f"{self._timing}: regex timed out (catastrophic backtracking?)") from None

    def _scan_block(self, first: int, block: bytes, lo: int = 0, hi: int | None = None) -> None:
        # Only candidate lines (a trigger on them) are decoded and matched. A line holding a
        # rule's trigger also brings the next ``lookahead`` lines (its window); other candidates
        # (context, phase, traceback frames) stand alone. Line numbers come from counting
        # newlines between candidates (C speed); the splitter is told the block's total.
        n = len(block) if hi is None else hi
        spans = self._prefilter.candidates(block, lo, n)
        count = block.count
        find = block.find
        lookahead = self._lookahead
        owe = self._need_lookahead
        process = self._process
        masks_ok = self._masks_ok
        ascii_needles = self._ascii_needles
        # where candidates are dense, one check of the whole block (~10 ms/MiB) instead of one per
        # line (~5 µs each): then no line needs its own
        clean = masks_ok and len(spans) * 640 > n - lo and only_cut_in(block, lo, n, ascii_needles)

        def ahead(pos: int, line: int, owe: int, stop: int) -> tuple[int, int, int]:
            """Process the look-ahead lines still owed, up to offset ``stop``."""
            while owe > 0 and pos < stop:
                e = find(b"\n", pos)
                for ln in normalise(line, block[pos:e]):
                    process(ln)
                pos, line, owe = e + 1, line + 1, owe - 1
            return pos, line, owe

        between = self._between if self._ev_prefilter is not None else None
        pos, line = lo, first  # the next line not yet processed or skipped
        for start, end, mask in spans:
            if owe > 0:
                pos, line, owe = ahead(pos, line, owe, start)
            while between is not None and pos < start:  # phase evidence between candidates
                pos, line, owe = between(block, lo, pos, start, line)
                if owe > 0:
                    pos, line, owe = ahead(pos, line, owe, start)
            if pos < start:
                line += count(b"\n", pos, start)
            has_rule = False
            raw = block[start:end]
            if between is not None:
                low = raw.lower()
                for bit, needle in self._ev_bits_of:
                    if needle in low:
                        mask |= bit
            if not (clean or (masks_ok and only_cut_by_normalise(raw, ascii_needles))):
                mask = 0  # normalising may change what the line holds: look for every trigger
            elif not owe and not self._pending and self._defers(line, raw, mask):
                pos, line = end + 1, line + 1
                continue
            self._here = (block, lo, start, line)  # where _lead_from_block finds the lines above
            for ln in normalise(line, raw):
                has_rule = process(ln, mask) or has_rule
            pos, line = end + 1, line + 1
            if owe > 0:
                owe -= 1
            if has_rule:
                owe = lookahead
        pos, line, owe = ahead(pos, line, owe, n)
        while between is not None and pos < n:
            pos, line, owe = between(block, lo, pos, n, line)
            if owe > 0:
                pos, line, owe = ahead(pos, line, owe, n)
        if pos < n:
            line += count(b"\n", pos, n)
        self._need_lookahead = owe
        self._splitter.advance(line - first)
        self._last_line = line - 1
        self._evaluate_pending(final=False)
        self._age_open(final=False)

    # -- per line ------------------------------------------------------------------------------

    def _process(self, line: Line, mask: int = 0) -> bool:
        """Match one logical line; True when it holds a rule trigger (it then needs look-ahead).

        ``mask``: the prefilter's needles found on the line (0: unknown, try every trigger)."""
        if self._deferred:
            self._resolve_deferred(line.number)
        if self._open:  # findings the lines before this one closed, however the input was cut
            self._age_open(final=False, last_line=line.number - 1)
        self._recent.append(line)
        if line.rank is not None and _VLLM_PROCESS.match(line.rank):
            self._collector.vote_engine("vllm", line.number)
        text = line.text
        low = text.lower()
        # traceback frames
        if _TRACEBACK in text:
            self._traceback_at.setdefault(line.rank, deque(maxlen=64)).append(line.number)
        if "file " in low or ".py in " in low or '", line ' in low:
            m = _FRAME.search(text)
            if m:
                path = (m["path"] or "").replace("\\", "/")
                # a frame counts by its function's name, and by its file's package ("%phase")
                for func in (m["func"], *("%" + ph.rule.phase for ph in self.pack.phases
                                           if any(p in path for p in ph.paths))):
                    self._frames.append((line.number, func, line.rank))
                    for o in self._open:
                        if o.line < line.number <= o.line + AFTER_LINES:
                            if o.rank == line.rank or line.rank in o.merged_ranks:
                                o.frames.append(func)
                            else:
                                o.foreign.append(func)
        # which triggers does the line hold? (one pass over the pack's literals, then an index)
        present = [t for t in (self._triggers_for(mask) if mask else self._all_triggers) if t in low]
        phases = self._phases_always
        contexts: list[Any] = []
        rules: list[CompiledRule] = []
        if present:
            ph_idx: set[int] = set()
            ctx_idx: set[int] = set()
            rule_idx: set[int] = set()
            for t in present:
                ph_idx.update(self._phase_by_trigger.get(t, ()))
                ctx_idx.update(self._ctx_by_trigger.get(t, ()))
                rule_idx.update(self._rule_by_trigger.get(t, ()))
            if ph_idx:
                phases = sorted(set(phases) | ph_idx)
            contexts = [self.pack.contexts[i] for i in sorted(ctx_idx)]
            rules = [self.pack.rules[i] for i in sorted(rule_idx)]
        # phase markers and progress lines
        for i in phases:
            ph = self.pack.phases[i]
            self._timing = f'phase "{ph.rule.phase}"'
            if _search_any(self._markers[i], text):
                for o in self._open:
                    if o.line <= line.number <= o.line + AFTER_LINES:
                        o.marker_phases.append(ph.rule.phase)
                self._frames.append((line.number, "@" + ph.rule.phase, line.rank))
            if _search_any(self._progress_patterns[i], text):
                self._progress.append((line.number, ph.rule.phase))
        # context lines
        for ctx in contexts:
            self._timing = f'{ctx.source}: context "{ctx.rule.id}": pattern'
            m = ctx.pattern.search(text, timeout=REGEX_TIMEOUT)
            if m is None:
                continue
            if ctx.rule.engine:
                self._collector.vote_engine(ctx.rule.engine, line.number)
            groups = {k: v for k, v in m.groupdict().items() if k != "engine"}
            if groups.get("engine_version"):
                self._run_start = line.number
            self._collector.apply_groups(groups, ctx.rule.parser, ctx.rule.units)
        # rule candidates
        if rules:
            self._lead_from_block(line)
            self._pending.append(_Pending(line, rules, self.source))
        self._evaluate_pending(final=False)
        return bool(rules)

    # -- phase evidence, latest wins ------------------------------------------------------------

    def _defers(self, number: int, raw: bytes, mask: int) -> bool:
        """Set aside a candidate line that can only be phase evidence (vLLM's throughput lines,
        a trainer's loss dicts: printed all the time, needed only as the latest before a failure
        or as a marker near one), while no failure is pending or open; True when it did.

        It is read later, if at all, by :meth:`_resolve_deferred`. Such a line casts no engine
        vote of its own unless it is read."""
        ok = self._deferrable_by_mask.get(mask)
        if ok is None:
            if len(self._deferrable_by_mask) >= 4096:
                self._deferrable_by_mask.clear()
            ok = not mask & self._own_bits and all(
                t in self._phase_by_trigger and t not in self._ctx_by_trigger and t not in self._rule_by_trigger
                for t in self._triggers_for(mask)
            )
            self._deferrable_by_mask[mask] = ok
        if not ok:
            return False
        if b"File " in raw or b".py in " in raw or b'", line ' in raw:  # what _FRAME needs
            return False
        if self._open:
            self._age_open(final=False, last_line=number - 1)
            if self._open:
                return False
        self._defer(number, raw, mask)
        return True

    def _between(self, block: bytes, lo: int, a: int, b: int, number: int) -> tuple[int, int, int]:
        """Read the phase evidence in ``block[a:b]``, lines the main prefilter skipped (``a`` at a
        line start, line ``number``), as reading each evidence line through :meth:`_defers`
        would, at a cost that does not grow with how many there are.

        While a failure is pending or open, evidence lines are read one by one as they come.
        Otherwise they would all be set aside, and of those more than ``BEFORE_LINES`` before
        the stretch's end only the latest progress line can ever be read
        (:meth:`_resolve_deferred`): so only that one is looked for, searching backwards in
        pieces, and the evidence lines of the last ``BEFORE_LINES`` lines are set aside. A line
        :meth:`_defers` would not set aside (one that normalising changes, or one with a
        frame's "File ") is read where it is. Returns where reading stopped, its line number
        and the look-ahead owed (non-zero when a line read held a rule trigger: normalising a
        record may show one)."""
        while a < b:
            if self._pending or self._open_before(number):
                a, number, owe = self._read_evidence(block, lo, a, b, number, until_calm=True)
                if owe:
                    return a, number, owe
                continue
            odd = self._odd_evidence(block, a, b)
            c = b if odd is None else odd[0]
            if c > a:
                number = self._set_aside(block, a, c, number)
            if odd is None:
                break
            a, number, owe = self._read_evidence(block, lo, odd[0], odd[1], number, until_calm=False)
            if owe:
                return a, number, owe
        return b, number, 0

    def _open_before(self, number: int) -> bool:
        """Whether a finding is still open at line ``number`` (closing those behind it)."""
        if self._open:
            self._age_open(final=False, last_line=number - 1)
        return bool(self._open)

    def _read_evidence(
        self, block: bytes, lo: int, a: int, b: int, number: int, *, until_calm: bool
    ) -> tuple[int, int, int]:
        """Read the evidence lines of ``block[a:b]`` one by one (``until_calm``: until no
        failure is pending or open); see :meth:`_between` for what is returned."""
        assert self._ev_prefilter is not None
        count = block.count
        shift = self._ev_shift
        pos = a
        while pos < b:
            piece = b if b - pos <= EVIDENCE_PIECE else block.find(b"\n", pos + EVIDENCE_PIECE, b) + 1 or b
            for s, e, m in self._ev_prefilter.candidates(block, pos, piece):
                number += count(b"\n", pos, s)
                pos = s
                if until_calm and not (self._pending or self._open_before(number)):
                    return s, number, 0
                raw = block[s:e]
                mask = m << shift
                if not only_cut_by_normalise(raw, self._ascii_needles):
                    mask = 0
                self._here = (block, lo, s, number)
                has_rule = False
                for ln in normalise(number, raw):
                    has_rule = self._process(ln, mask) or has_rule
                pos, number = min(e + 1, b), number + 1
                if has_rule:
                    return pos, number, self._lookahead
            number += count(b"\n", pos, piece)
            pos = piece
        return b, number, 0

    def _odd_evidence(self, block: bytes, a: int, b: int) -> tuple[int, int] | None:
        """The first evidence line of ``block[a:b]`` that :meth:`_defers` would not set aside:
        one that normalising may change (a JSON record, ANSI or NUL bytes, a character folding
        to ASCII, or anything non-ASCII when a needle is not ASCII) or that holds "File ", as
        ``(start, end + 1)``, or None.

        Two sorted streams are walked side by side, each jumping to the other's position: the
        lines with such a marker (C searches) and the evidence lines (the evidence prefilter, a
        piece at a time). The steps are about as many as the rarer of the two kinds of line."""
        assert self._ev_prefilter is not None
        if not self._ascii_needles and not block[a:b].isascii():
            return a, b  # every line, one by one
        find = block.find
        pieces: list[tuple[int, int, list[tuple[int, int, int]]]] = []  # (lo, hi, candidates)

        def next_odd(pos: int) -> int:
            """Start of the first line at or after ``pos`` (a line start) with a marker, or -1."""
            at = self._odd_finder.first(block, pos, b)
            return at if at < 0 else (block.rfind(b"\n", pos, at) + 1) or pos

        def next_evidence(pos: int) -> tuple[int, int] | None:
            """The first evidence line at or after ``pos`` (a line start), as (start, end)."""
            while pos < b:
                if not pieces or not pieces[-1][0] <= pos < pieces[-1][1]:
                    hi = b if b - pos <= EVIDENCE_PIECE else (find(b"\n", pos + EVIDENCE_PIECE, b) + 1 or b)
                    pieces[:] = [(pos, hi, self._ev_prefilter.candidates(block, pos, hi))]  # type: ignore[union-attr]
                _, hi, cands = pieces[-1]
                i = bisect.bisect_left(cands, (pos, -1, -1))
                if i < len(cands):
                    return cands[i][0], cands[i][1]
                pos = hi
            return None

        pos = a
        while pos < b:
            odd = next_odd(pos)
            if odd < 0:
                return None
            ev = next_evidence(odd)
            if ev is None:
                return None
            if ev[0] == odd:
                return odd, min(ev[1] + 1, b)
            pos = ev[0]
        return None

    def _set_aside(self, block: bytes, a: int, b: int, number: int) -> int:
        """Set aside the evidence of ``block[a:b]`` (no failure pending or open, no odd line):
        the latest progress line before its last ``BEFORE_LINES`` lines, and the evidence lines
        of those. Returns the line number at ``b``."""
        assert self._ev_prefilter is not None
        count = block.count
        shift = self._ev_shift
        lines = count(b"\n", a, b)
        near = a
        if lines > BEFORE_LINES:
            near = b - 1
            rfind = block.rfind
            for _ in range(BEFORE_LINES):
                near = rfind(b"\n", a, near)
            near += 1
            hi, width = near, EVIDENCE_PIECE
            while hi > a:
                cut = (block.rfind(b"\n", a, hi - width) + 1 or a) if hi - width > a else a
                latest = None
                for s, e, m in reversed(self._ev_prefilter.candidates(block, cut, hi)):
                    raw = block[s:e]
                    if any(self._is_progress(ln, m << shift) for ln in normalise(0, raw)):
                        latest = (number + count(b"\n", a, s), raw, m << shift)
                        break
                if latest is not None:
                    self._defer(*latest)
                    break
                hi, width = cut, width * 4
        number_near = number + (lines - BEFORE_LINES if lines > BEFORE_LINES else 0)
        pos = near
        for s, e, m in self._ev_prefilter.candidates(block, near, b):
            number_near += count(b"\n", pos, s)
            pos = s
            self._defer(number_near, block[s:e], m << shift)
        return number + lines

    def _defer(self, number: int, raw: bytes, mask: int) -> None:
        """Add a line to the deferred ones, settling the older ones when too many are held."""
        self._deferred.append((number, raw, mask))
        self._deferred_bytes += len(raw)
        if len(self._deferred) >= 2 * DEFER_KEEP or self._deferred_bytes >= DEFER_BYTES:
            self._resolve_deferred(number + 1, keep=DEFER_KEEP)

    def _resolve_deferred(self, upto: int, keep: int = 0) -> None:
        """Read the deferred lines a line at ``upto`` or after may need: those within
        ``BEFORE_LINES`` before it (markers of a failure's step) and, of the older ones, only the
        latest progress line (the step the run had reached). Nothing else in the older ones can
        reach a finding. ``keep``: leave up to that many of the newest ones deferred."""
        deferred, self._deferred = self._deferred, []
        near = len(deferred)
        while near and deferred[near - 1][0] >= upto - BEFORE_LINES:
            near -= 1
        held = deferred[max(near, len(deferred) - keep) :] if keep else []
        for number, raw, mask in reversed(deferred[:near]):
            lines = normalise(number, raw)
            if any(self._is_progress(ln, mask) for ln in lines):
                for ln in lines:
                    self._process(ln, mask)
                break
        for number, raw, mask in deferred[near : len(deferred) - len(held)]:
            for ln in normalise(number, raw):
                self._process(ln, mask)
        self._deferred = held
        self._deferred_bytes = sum(len(raw) for _, raw, _ in held)

    def _is_progress(self, line: Line, mask: int) -> bool:
        """Whether ``line`` matches a progress pattern of a phase whose trigger it holds."""
        low = line.text.lower()
        phases = set(self._phases_always)
        for t in self._triggers_for(mask):
            if t in low:
                phases.update(self._phase_by_trigger.get(t, ()))
        return any(_search_any(self._progress_patterns[i], line.text) for i in sorted(phases))

    def _lead_from_block(self, line: Line) -> None:
        """Put the ``LEAD_LINES`` lines above a rule's trigger line into the recent lines when the
        prefilter skipped them (they hold no trigger): a message wrapped before its trigger
        starts there (see :meth:`_lead_lines`)."""
        block, lo, start, number = self._here
        if number != line.number or not self._recent or self._recent[-1] is not line:
            return
        known = {ln.number for ln in self._recent}
        lead: list[Line] = []
        end = start - 1
        for n in range(number - 1, number - LEAD_LINES - 1, -1):
            if end < lo or n in known:
                break
            begin = block.rfind(b"\n", lo, end) + 1 or lo
            lead[:0] = normalise(n, block[max(begin, lo) : end])
            end = begin - 1
        if lead:
            self._recent.pop()
            self._recent.extend(lead)
            self._recent.append(line)

    def _window(self, anchor: Line, size: int) -> list[Line]:
        """The lines after ``anchor`` that may continue its message: the same rank's, and the
        bare lines right after it or after one of those (a terminal wraps a prefixed line into
        pieces without the prefix)."""
        out: list[Line] = []
        limit = anchor.number + max(size, 1) * 4
        last = anchor.number
        for ln in self._recent:
            if ln is anchor or ln.number < anchor.number:
                continue
            if ln.number > limit:
                break
            same = ln.rank == anchor.rank
            wrapped = anchor.rank is not None and ln.rank is None and not ln.prefix and ln.number <= last + 1
            if same or wrapped:
                if ln.number == anchor.number and ln.text == anchor.text:
                    continue
                out.append(ln)
                last = ln.number
                if len(out) >= size:
                    break
        return out

    def _evaluate_pending(self, final: bool) -> None:
        while self._pending:
            p = self._pending[0]
            size = max(r.rule.window for r in p.rules)
            latest = self._recent[-1].number if self._recent else 0
            if not final and latest < p.line.number + size * 4 and len(self._window(p.line, size)) < size:
                return
            self._pending.popleft()
            self._match(p)

    def _match(self, p: _Pending) -> None:
        anchor = p.line
        if self._claimed_until.get(anchor.rank, 0) >= anchor.number:
            return
        ordered = sorted(p.rules, key=lambda r: (-r.rule.priority, r.order))
        for rule in ordered:
            start = anchor
            window = self._window(anchor, rule.rule.window)
            found = self._search(rule, anchor, window, clauses=False)
            if found is None:
                # a message wrapped before its trigger ("Free memory on device (31.44/47.38 GiB) "
                # / "on startup is less than ..."): it starts a line or two above the trigger line
                for start in self._lead_lines(anchor):
                    back = anchor.number - start.number
                    found = self._search(rule, start, self._window(start, rule.rule.window + back), clauses=False)
                    if found is not None and found[2] >= anchor.number:
                        break
                    found = None
            if found is None and rule.rule.by_clause:
                start = anchor
                found = self._search(rule, anchor, window)
            if found is None:
                continue
            m, text, end_line, figures = found
            self._claimed_until[start.rank] = max(self._claimed_until.get(start.rank, 0), end_line)
            self._claimed_until[anchor.rank] = max(self._claimed_until.get(anchor.rank, 0), end_line)
            self._add_finding(rule, m, text, figures, start, end_line)
            return

    def _lead_lines(self, anchor: Line) -> list[Line]:
        """The lines right above ``anchor`` whose text a wrap may have continued on it (nearest
        first): up to ``LEAD_LINES``, each one continued by the next (same rank, or a bare piece
        after a prefixed line), none claimed by a finding already."""
        recent = {ln.number: ln for ln in self._recent if anchor.number - LEAD_LINES <= ln.number < anchor.number}
        out: list[Line] = []
        below = anchor
        for number in range(anchor.number - 1, anchor.number - LEAD_LINES - 1, -1):
            ln = recent.get(number)
            if ln is None or self._claimed_until.get(ln.rank, 0) >= ln.number:
                break
            if not (ln.rank == below.rank or (below.rank is None and not below.prefix)):
                break
            out.append(ln)
            below = ln
        return out

    def _search(
        self, rule: CompiledRule, anchor: Line, window: list[Line], clauses: bool = True
    ) -> tuple[Any, str, int, dict[str, Any]] | None:
        """The rule's match on ``anchor`` and its window, as (match, text read, last line read,
        figures), or None when it does not match (``clauses``: try a ``by_clause`` rule's
        triggers and clauses when its pattern misses)."""
        # Try the window joined with "\n" (lines broken at a word boundary) and joined as a
        # terminal wrapped it (with nothing between the pieces, "20.00 M" / "iB", or the blank
        # the reader trimmed off a piece's end), and, when the whole paste is indented, the
        # latter after taking the anchor's indentation off the wrapped pieces; keep the reading
        # that yields more figures (the pattern's groups and the rule's extracts), the earlier
        # one on a tie.
        best: tuple[Any, str, int, dict[str, Any]] | None = None
        texts = [w.text for w in window]
        unwrapped = [" " if prev.blank_end else "" for prev in [anchor, *window[:-1]]]
        readings: list[tuple[list[str], list[str]]] = [(["\n"] * len(window), texts), (unwrapped, texts)]
        margin = anchor.text[: len(anchor.text) - len(anchor.text.lstrip(" \t"))]
        if margin and window:
            readings.append((unwrapped, [t[len(margin) :] if t.startswith(margin) else t for t in texts]))
        shared = _shared_prefix(anchor.text, texts[0]) if window else ""
        if shared:
            # every line of the message behind the same prefix no reader knows ("pod-7 | stderr F ")
            readings.append((["\n"] * len(window), [t[len(shared) :] if t.startswith(shared) else t for t in texts]))
        if window and any(not sep for sep in unwrapped):
            # a line broken at a blank that the paste dropped ("Out" / "of memory")
            readings.append(([" "] * len(window), texts))
        # a message whose case was changed ("CUDA OUT OF MEMORY", a lower-cased paste) is read
        # again case-insensitively when the rule's own spelling does not match it
        mangled = anchor.text.isupper() or anchor.text.islower()
        self._anchor_len = len(anchor.text)
        for fold in (False, True) if mangled else (False,):
            self._fold = fold
            pattern = _folded(rule.pattern) if fold else rule.pattern
            best_cut = False
            for seps, pieces in readings:
                text = anchor.text + "".join(sep + piece for sep, piece in zip(seps, pieces, strict=True))
                try:
                    m = pattern.search(text, timeout=REGEX_TIMEOUT)
                except TimeoutError:
                    raise RuleTimeout(
                        f'{rule.source}: rule "{rule.id}": pattern: regex timed out (catastrophic backtracking?)'
                    ) from None
                if m is not None and m.start() <= len(anchor.text):
                    figures = self._extract(rule, m, text)
                    cut = _cuts_a_word(m, text)
                    # on a tie, a reading that reads a figure cut by a line break loses
                    if best is None or len(figures) > len(best[3]) or (
                        len(figures) == len(best[3]) and best_cut and not cut
                    ):
                        end_line = anchor.number
                        consumed = len(anchor.text)
                        for w, sep, piece in zip(window, seps, pieces, strict=True):
                            if m.end() > consumed + len(sep):
                                end_line = w.number
                            consumed += len(sep) + len(piece)
                        best, best_cut = (m, text, end_line, figures), cut
                if not window:
                    break
            if best is None and clauses and rule.rule.by_clause:
                best = self._search_clauses(rule, anchor, window, readings)
            if best is not None:
                break
        self._fold = False
        return best

    def _search_clauses(
        self,
        rule: CompiledRule,
        anchor: Line,
        window: list[Line],
        readings: list[tuple[list[str], list[str]]],
    ) -> tuple[Any, str, int, dict[str, Any]] | None:
        """A ``by_clause`` rule whose pattern did not match: one of its triggers, found in the
        anchor line and its window joined (blanks and case ignored, so a wrap cannot hide it)
        and starting on the anchor line, identifies the message; each figure comes from its own
        ``extract`` clause over the whole joined text. The reading with the most figures wins."""
        head = "".join(anchor.text.split()).lower()
        best: tuple[Any, str, int, dict[str, Any]] | None = None
        for seps, pieces in readings:
            text = anchor.text + "".join(sep + piece for sep, piece in zip(seps, pieces, strict=True))
            squeezed = "".join(text.split()).lower()
            at = min((i for t in rule.triggers if (i := squeezed.find("".join(t.split()))) >= 0), default=-1)
            if at < 0 or at >= len(head):
                continue
            found = _ClauseMatch(text)
            figures = self._extract(rule, found, text)
            if best is None or len(figures) > len(best[3]):
                # the message runs to the last line that gave a figure or holds a trigger
                end_line = anchor.number
                consumed = len(anchor.text)
                last = max(found.ends, default=0)
                for w, sep, piece in zip(window, seps, pieces, strict=True):
                    low = piece.lower()
                    if consumed + len(sep) < last or any(t in low for t in rule.triggers):
                        end_line = w.number
                    consumed += len(sep) + len(piece)
                best = (found, text, end_line, figures)
            if not window:
                break
        return best

    def _extract(self, rule: CompiledRule, m: Any, text: str) -> dict[str, Any]:
        try:
            return self._extract_figures(rule, m, text)
        except TimeoutError:
            raise RuleTimeout(
                f'{rule.source}: rule "{rule.id}": extract: regex timed out (catastrophic backtracking?)'
            ) from None

    def _extract_figures(self, rule: CompiledRule, m: Any, text: str) -> dict[str, Any]:
        r = rule.rule
        groups = {k: v for k, v in m.groupdict().items()}
        figures = groups_to_figures(groups, r.types, r.units)
        region = text[m.start() :]
        for name, pat in rule.extract.items():
            if name in figures:
                continue
            em = (_folded(pat) if self._fold else pat).search(region, timeout=REGEX_TIMEOUT)
            if em is None:
                continue
            gd = em.groupdict()
            value_text = gd.get("value") if "value" in gd else (em.group(1) if em.groups() else em.group(0))
            if value_text is None:
                continue
            got = groups_to_figures({name: value_text}, r.types, r.units)
            figures.update(got)
            if got and isinstance(m, _ClauseMatch):
                m.ends.append(m.start() + em.end())
        if r.roles:
            # the anchor line's words, and the next line's only when the match's named group (the
            # vocabulary) runs into it: a message wrapped there, not a line that merely follows
            end = m.end()
            vocab = [k for k, v in m.groupdict().items() if v is not None]
            if not vocab or max(m.end(k) for k in vocab) <= self._anchor_len:
                end = min(end, self._anchor_len)
            for name, value in role_figures(" ".join(text[m.start() : end].split())).items():
                figures.setdefault(name, value)
        for name, pat in rule.extract_all.items():
            items = []
            for em in (_folded(pat) if self._fold else pat).finditer(region, timeout=REGEX_TIMEOUT):
                item = groups_to_figures(em.groupdict(), r.types, r.units)
                if item:
                    items.append(item)
            if items:
                figures[name] = items
        return figures

    def _add_finding(
        self, rule: CompiledRule, m: Any, text: str, figures: dict[str, Any], anchor: Line, end_line: int
    ) -> None:
        message = " ".join(m.group(0).split())
        if len(message) < 400:
            # keep the whole anchor sentence for readers
            line_text = " ".join(text.split("\n", 1)[0].split())
            if len(line_text) > len(message) and len(line_text) <= 2000:
                message = line_text
        message = message[:2000]
        rank = anchor.rank
        if self._same_failure(rule, figures, anchor, message, end_line):
            return
        if len(self._findings) + len(self._open) >= MAX_FINDINGS:
            return
        finding = Finding(
            rule=rule.id,
            kind=rule.rule.kind,
            engine=rule.rule.engine,
            severity=rule.rule.severity,
            phase=rule.rule.phase or "unknown",
            title=rule.rule.title,
            message=message,
            location=Location(source=self.source, line=anchor.number, end_line=end_line),
            occurrences=1,
            ranks=[rank] if rank else [],
            figures=figures,
        )
        if rule.rule.engine not in _GENERIC_ENGINES:
            self._collector.vote_engine(rule.rule.engine, anchor.number)
        o = _Open(finding, rank, anchor.number, last_line=anchor.number)
        self._seen[id(finding)] = (anchor.number, {rank})
        o.frames.extend(self._evidence(anchor, rank))
        o.foreign.extend(
            func for number, func, frank in self._frames if frank != rank and 0 < number - anchor.number <= AFTER_LINES
        )
        before = [ph for number, ph in self._progress if number <= anchor.number]
        if before:
            o.progress_phase = before[-1]
        self._open.append(o)

    def _evidence(self, anchor: Line, rank: str | None) -> list[str]:
        """Frames (and "@phase" markers) of ``rank`` already seen for a failure at ``anchor``:
        the traceback that precedes it, and what came while its look-ahead window filled."""
        out: list[str] = []
        # the traceback this failure ends (headers read in its look-ahead belong to later ones)
        tb = max((n for n in self._traceback_at.get(rank, ()) if n <= anchor.number), default=None)
        for number, func, frank in self._frames:
            if frank != rank:
                continue
            if number > anchor.number:
                if number - anchor.number <= AFTER_LINES:
                    out.append(func)
                continue
            if anchor.number - number > BEFORE_LINES:
                continue
            # before its traceback only the line that announced it ("Exception in worker X
            # while processing method M.", "Error executing method M") still counts
            if tb is not None and number < tb and not (func.startswith("@") and tb - number <= MARKER_LEAD):
                continue
            out.append(func)
        return out

    def _same_failure(
        self, rule: CompiledRule, figures: dict[str, Any], anchor: Line, message: str, end_line: int
    ) -> bool:
        """Merge this match into a finding it repeats; ``True`` when it did.

        The same failure is told several times: by every rank, by the process that logs it and
        again by the traceback that re-raises it, by vLLM's wrappers quoting the worker's error,
        and by a vLLM message that explains a PyTorch one. It is the same failure when it is the
        same rule with the same figures in the same run (:meth:`_same_run`), or, within ``SAME_FAILURE_LINES``, the same rule from
        another rank, or a message whose figures agree with it (same kind, or a shared figure).
        A memory warning repeated any number of times stays one finding with its latest figures.
        """
        rank = anchor.rank
        r = rule.rule
        opened = {id(o.finding): o for o in self._open}
        candidates = [o.finding for o in self._open] + list(reversed(self._findings[-20:]))
        for f in candidates:
            if f.location.source != self.source or f.severity != r.severity:
                continue
            last, seen = self._seen.get(id(f), (f.location.end_line, set(f.ranks)))
            near = anchor.number - last <= SAME_FAILURE_LINES
            if is_fallback(rule.id) or is_fallback(f.rule):
                # the fallback's reading of a line near a failure a specific rule names is that
                # failure, and so is the fallback's reading of the lines that retell it
                same = near
            elif f.rule == rule.id:
                same = (
                    (f.figures == figures and self._same_run(last, anchor.number))
                    or r.severity == "warning"
                    or (near and (rank not in seen or _agree(f.figures, figures)))
                    # the next line telling it again with other sizes: an allocator retrying smaller
                    or 0 < anchor.number - last <= 1
                )
            else:
                shared = set(f.figures) & set(figures)
                same = near and _agree(f.figures, figures) and (f.kind == r.kind or bool(shared))
            if not same:
                continue
            if is_fallback(rule.id) and not is_fallback(f.rule):
                return True  # a line of (or about) a failure a specific rule has read: nothing to add
            retold = any(t in anchor.text.lower() for t in _REPRINTS)
            # another rank's copy of the same message keeps the first rank's figures (its own GPU);
            # a retelling by the same process, or another message about it, adds what it knows
            adds = f.rule != rule.id or rank in seen
            again = f.rule == rule.id and (r.severity == "warning" or (f.figures == figures and not near))
            if not retold and (rank not in seen or again):
                f.occurrences += 1
                if rank and rank not in f.ranks:
                    f.ranks.append(rank)
            seen.add(rank)
            self._seen[id(f)] = (max(last, anchor.number), seen)
            o = opened.get(id(f))
            if o is not None:
                o.last_line = max(o.last_line, anchor.number)
                if rank != o.rank and rank not in o.merged_ranks:
                    o.merged_ranks.add(rank)
                    o.frames.extend(self._evidence(anchor, rank))
                if f.rule != rule.id and _specificity(rule) > _specificity_of(self.pack, f.rule):
                    # the more specific message names the failure (a vLLM wrapper over PyTorch's OOM)
                    if is_fallback(f.rule):
                        # the fallback's figures are guesses from nearby words: the rule's are read
                        f.figures = dict(figures)
                        f.location.line = anchor.number
                    f.rule, f.kind, f.engine, f.title, f.message = rule.id, r.kind, r.engine, r.title, message
                    if r.phase:
                        f.phase = r.phase
                f.location.end_line = max(f.location.end_line, end_line)
            if r.severity == "warning" and f.rule == rule.id:
                f.figures.update(figures)
            elif adds:
                for k, v in figures.items():
                    f.figures.setdefault(k, v)
            return True
        return False

    def _same_run(self, last: int, line: int) -> bool:
        """Whether line ``line`` is in the same run of the program as line ``last`` before it: no
        start-up banner between them, and at most ``SAME_RUN_LINES`` apart."""
        return line - last <= SAME_RUN_LINES and not last < self._run_start <= line

    # -- finishing findings --------------------------------------------------------------------

    def _phase_for(self, o: _Open) -> str:
        if o.finding.phase != "unknown":
            return o.finding.phase
        names = {f for f in o.frames if not f.startswith("@")}
        markers = set(o.marker_phases) | {f[1:] for f in o.frames if f.startswith("@")}
        # traceback frames name the failing code exactly; a marker line ("while processing
        # method initialize_cache") names only the outer step, so frames are asked first
        # (a frame's file counts as "%phase" when its package belongs to the phase)
        for ph in self.pack.phases:
            if ph.frames & names or "%" + ph.rule.phase in names:
                return ph.rule.phase
        for ph in self.pack.phases:
            if ph.rule.phase in markers:
                return ph.rule.phase
        # then what the other ranks' tracebacks and markers show right after it
        foreign = set(o.foreign)
        for ph in self.pack.phases:
            if ph.frames & foreign or "@" + ph.rule.phase in foreign or "%" + ph.rule.phase in foreign:
                return ph.rule.phase
        if o.progress_phase:
            return o.progress_phase
        # none before it: a progress line interleaved right after it (another worker still
        # loading), counted from the failure's last line, so that the other ranks' copies of the
        # failure and its own traceback lines do not use up the lag
        end = max(o.last_line, o.finding.location.end_line)
        after = [ph for number, ph in self._progress if o.line < number <= end + PROGRESS_LAG]
        return after[0] if after else "unknown"

    def _age_open(self, final: bool, last_line: int | None = None) -> None:
        """Close the open findings ``AFTER_LINES`` behind ``last_line`` (default: the last line
        read), or all of them (``final``)."""
        last = self._last_line if last_line is None else last_line
        still: list[_Open] = []
        for o in self._open:
            if final or last - o.line > AFTER_LINES:
                o.finding.phase = self._phase_for(o)  # type: ignore[assignment]
                self._findings.append(o.finding)
                self._ready.append(o.finding)
            else:
                still.append(o)
        self._open = still

    def _end_of_source(self) -> None:
        self._resolve_deferred(self._last_line + 1)
        number, last = self._splitter.close()
        if last:
            for line in normalise(number, last[:-1]):
                self._process(line)
            self._last_line = number
        self._evaluate_pending(final=True)
        if self._paste is not None and not any(
            f.location.source == self.source for f in self._findings + [o.finding for o in self._open]
        ):
            self._match_across_breaks(bytes(self._paste))
        self._age_open(final=True)

    def _match_across_breaks(self, data: bytes) -> None:
        """Rules whose trigger a line break cut ("... leave no GPU memory for the KV ca" /
        "che under ..."): the prefilter reads lines one by one and saw neither piece. For a
        paste in which nothing was found, each break is read across (blanks ignored) and the
        line where a cut trigger starts is matched against its rules."""
        lines: list[Line] = []
        for n, raw in enumerate(data.split(b"\n"), 1):
            lines.extend(normalise(n, raw))
        if len(lines) < 2:
            return
        squeezed = [(t, "".join(t.split())) for t in self._rule_by_trigger]
        self._recent = deque(lines, maxlen=len(lines))
        for a, b in pairwise(lines):
            la, lb = a.text.lower(), b.text.lower()
            tail = "".join(la[-100:].split())
            joined = tail + "".join(lb[:100].split())
            rules: list[CompiledRule] = []
            for t, sq in squeezed:
                at = joined.find(sq)
                if at < 0 or not at < len(tail) < at + len(sq) or t in la or t in lb:
                    continue
                rules.extend(self.pack.rules[i] for i in self._rule_by_trigger[t])
            if rules:
                self._match(_Pending(a, list({id(r): r for r in rules}.values()), self.source))

    def flush(self) -> None:
        """Decide everything seen so far (after a quiet spell in pipe mode); input may continue."""
        self._resolve_deferred(self._last_line + 1)
        self._evaluate_pending(final=True)
        self._age_open(final=True)

    def findings_so_far(self) -> int:
        """How many findings the scan has made so far (for progress displays)."""
        return len(self._findings) + len(self._open)

    def poll(self) -> list[Finding]:
        """Findings finished since the last poll, with their remedies (for live output)."""
        ready, self._ready = self._ready, []
        if ready and self._advise:
            from oomdoctor.advisor import advise_findings

            ctx = self.context()
            advise_findings(ready, ctx, self.hints, self.pack)
        return ready

    def context(self) -> Any:
        ctx = self._collector.finish().model_copy(deep=True)
        for f in self._findings + [o.finding for o in self._open]:
            if f.engine in _GENERIC_ENGINES and ctx.engine and ctx.engine not in ("pytorch",):
                f.engine = ctx.engine
            if is_fallback(f.rule):
                # the fallback's finding is named after the log's engine once it is known
                f.kind = kind_for(ctx.engine, self.pack.rule(f.rule).rule.kind)
        return ctx

    def close(self) -> Report:
        """End of input: finish every finding, run the advisor, return the report."""
        if not self._done:
            self._end_of_source()
            self._done = True
        ctx = self.context()
        findings = list(self._findings)
        report = Report(
            tool=Tool(version=__version__),
            sources=list(self.sources),
            findings=findings,
            context=ctx,
            summary=Summary(
                errors=sum(f.severity == "error" for f in findings),
                warnings=sum(f.severity == "warning" for f in findings),
            ),
        )
        if self._advise:
            from oomdoctor.advisor import advise

            advise(report, self.hints, self.pack)
        return report
