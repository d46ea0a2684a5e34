"""The streaming scanner: bytes in, findings and context out.

``Scanner.feed(bytes)`` accepts any chunking; findings never depend on where chunks split.
Each block of complete lines goes through the prefilter; only candidate lines (and a short
look-ahead after each) are decoded, normalised and matched against the full rules; lines that
can only be phase evidence have a prefilter of their own, asked only where a failure needs them.

:class:`Scanner` sets a scan up (the pack's triggers indexed, the prefilters, each source) and
is made of the parts in :mod:`oomdoctor.scan`, one per seam, data flowing one way: line assembly
and windows (:mod:`~oomdoctor.scan.lines`), phase evidence set aside
(:mod:`~oomdoctor.scan.evidence`), rule matching (:mod:`~oomdoctor.scan.matching`),
folding retellings across ranks into one finding (:mod:`~oomdoctor.scan.folding`), and
open-finding lifetime (:mod:`~oomdoctor.scan.lifetime`).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oomdoctor.context import ContextCollector
from oomdoctor.prefilter import Prefilter, make_prefilter, needles
from oomdoctor.prefilter.interface import Haystacks, json_forms
from oomdoctor.reader import LineSplitter
from oomdoctor.report import CutLine, Finding
from oomdoctor.rulepack import RulePack, default_pack
from oomdoctor.rulepack.loader import CompiledContext
from oomdoctor.scan.evidence import EvidenceAside
from oomdoctor.scan.folding import Folding, folds_from_its_line
from oomdoctor.scan.lifetime import Lifetime
from oomdoctor.scan.lines import LineAssembly
from oomdoctor.scan.matching import RuleMatching, RuleTimeout, _Pending
from oomdoctor.scan.recent import RecentLines
from oomdoctor.scan.runs import RepeatRuns
from oomdoctor.scan.state import (
    _BUILTIN_TRIGGERS,
    _GENERIC_ENGINES,
    AFTER_LINES,
    BEFORE_LINES,
    DEFER_BYTES,
    DEFER_KEEP,
    EVIDENCE_PIECE,
    LEAD_LINES,
    MARKER_LEAD,
    MAX_FINDINGS,
    PASTE_BYTES,
    PROGRESS_LAG,
    SAME_FAILURE_LINES,
    SAME_RUN_LINES,
    FarSpans,
    _Open,
)

if TYPE_CHECKING:
    from oomdoctor.prefilter.presence import Presence

__all__ = [
    "AFTER_LINES",
    "BEFORE_LINES",
    "DEFER_BYTES",
    "DEFER_KEEP",
    "EVIDENCE_PIECE",
    "LEAD_LINES",
    "MARKER_LEAD",
    "MAX_FINDINGS",
    "PASTE_BYTES",
    "PROGRESS_LAG",
    "SAME_FAILURE_LINES",
    "SAME_RUN_LINES",
    "_BUILTIN_TRIGGERS",
    "_GENERIC_ENGINES",
    "RuleTimeout",
    "Scanner",
    "scan_triggers",
]


#: what a scanner derives from its rule pack alone, the same for every scan of that pack (its
#: triggers indexed, its prefilters, the periodic lines' needles): built by the first scanner of
#: a pack and taken by the next ones (a run of many small files, each its own run, paid ~15 ms a
#: file for it). Nothing of a run is kept: no context, finding or line (see Scanner._adopt).
_DERIVED_NAMES = (
    "_phase_by_trigger", "_ctx_by_trigger", "_rule_by_trigger", "_phases_always", "_all_triggers",
    "_periodic_triggers", "_vote_triggers", "_triggers_by_mask", "_holding", "_trigger_hay", "_markers",
    "_progress_patterns", "_ev_prefilter", "_prefilter", "_masks_ok", "_needles", "_ev_shift",
    "_phases_of_path", "_lookahead", "_frame_marks", "_vote_only", "_absorbs_by_mask", "_main_mask",
    "_ascii_needles", "_deferrable_by_mask", "_repeat_by_mask", "_folds_from_line", "_progress_by_mask",
    "_periodic_ctx", "_periodic_bits", "_periodic_pf", "_progress_pf", "_periodic_groups", "_presence",
    "_phase_fixed",
)
#: of those, the memos: dicts a scan fills as it asks (each scan takes a copy of its own)
_MEMOS = frozenset(
    {"_triggers_by_mask", "_holding", "_phases_of_path", "_absorbs_by_mask", "_deferrable_by_mask",
     "_repeat_by_mask", "_progress_by_mask"}
)
#: of those, the lists of lists whose order a scan changes (the latest match tried first)
_REORDERED = frozenset({"_markers", "_progress_patterns"})
#: by the pack's id and the prefilter asked for (``OOMDOCTOR_PREFILTER``): the pack (so that its
#: id is not another's) and what was derived from it
_DERIVED: dict[tuple[int, str], tuple[RulePack, dict[str, Any]]] = {}
#: packs remembered at most (the built-in one, and a service's or a test's own)
_DERIVED_PACKS = 4


_DERIVED_LOCK = threading.Lock()  # (the HTTP service starts scanners in several threads)


def _own(name: str, value: Any) -> Any:
    """``value`` of ``name`` as one scan may keep it: a memo or a reordered list copied."""
    if name in _MEMOS:
        return dict(value)
    if name in _REORDERED:
        return [list(each) for each in value]
    return value


def _derived_key(pack: RulePack) -> tuple[int, str]:
    return id(pack), os.environ.get("OOMDOCTOR_PREFILTER", "")


def _remember(pack: RulePack, derived: dict[str, Any]) -> None:
    with _DERIVED_LOCK:
        if len(_DERIVED) >= _DERIVED_PACKS:
            _DERIVED.pop(next(iter(_DERIVED)))
        _DERIVED[_derived_key(pack)] = (pack, derived)


def scan_triggers(pack: RulePack) -> list[str]:
    """Every literal a scan with ``pack`` looks for: the pack's triggers and the scanner's own
    (a prefilter built for these, passed to :class:`Scanner`, finds every candidate line)."""
    return [*pack.all_triggers(), *_BUILTIN_TRIGGERS]


class Scanner(LineAssembly, RepeatRuns, EvidenceAside, RuleMatching, Folding, Lifetime):
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
        derived = _DERIVED.get(_derived_key(self.pack)) if prefilter is None else None
        if derived is not None and derived[0] is self.pack:
            self._adopt(derived[1])
        else:
            self._derive(prefilter)
            if prefilter is None:
                _remember(self.pack, {name: _own(name, getattr(self, name)) for name in _DERIVED_NAMES})
        #: phase-evidence lines not read yet: (line number, bytes, needles mask), in order
        self._deferred: list[tuple[int, bytes, int]] = []
        self._deferred_bytes = 0
        self._tail: list[tuple[bytes, int, int, int, int, int]] = []
        self._unsearched: list[tuple[bytes, int, int, int, int, int]] = []
        self._unsearched_bytes = 0
        self._counted: tuple[bytes, dict[int, int] | None] = (b"", None)
        self.sources: list[str] = []
        self._collector = ContextCollector(self.pack.products)
        self._process_products: dict[str, str] = {}  # prefix -> the product its process names ('' none)
        self._findings: list[Finding] = []
        self._open: list[_Open] = []
        self._ready: list[Finding] = []
        #: per finding (by id): last line it was seen on, and the ranks (None too) that told it
        self._seen: dict[int, tuple[int, set[str | None]]] = {}
        self._done = False
        self._cut_before: list[CutLine] = []
        self._cut_count_before = 0
        #: the rule being matched is read case-insensitively (see :meth:`_search`)
        self._fold = False
        #: length of the anchor line of the match being read (see :meth:`_extract_figures`)
        self._anchor_len = 0
        self._timing = ""  # the context/phase rule whose regex runs (named by RuleTimeout)
        #: user rules dropped during this scan (their regex timed out): id -> why
        self.dropped_rules: dict[str, str] = {}
        #: called before each candidate line is read: a service's deadline raises from it
        self.tick: Callable[[], None] | None = None
        self._start_source(source)

    def _derive(self, prefilter: Prefilter | None) -> None:
        """Index the pack's triggers and build the prefilters (what :data:`_DERIVED` keeps)."""
        triggers = scan_triggers(self.pack)
        self._index_triggers()
        #: the prefilter of the phase-evidence needles (see :meth:`_between`); None: the main
        #: prefilter finds every candidate line, evidence lines among them
        self._ev_prefilter: Prefilter | None = None
        if prefilter is None:
            main, evidence = self._split_needles(triggers)
            # (the main scan notes where periodic lines are: see EvidenceAside._read_periodic)
            periodic = [n for n in evidence if any(n in t.encode("utf-8") for t in self._periodic_triggers)]
            self._prefilter = make_prefilter([n.decode("utf-8") for n in main], present=periodic)
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
        #: the evidence needles a candidate line's bytes hold, as a mask (shifted by ``_ev_shift``)
        self._ev_mask_of = getattr(self._ev_prefilter, "mask", None) or self._ev_mask_by_needle
        self._phases_of_path: dict[str, tuple[str, ...]] = {}
        self._lookahead = min(48, max([r.rule.window for r in self.pack.rules] + [0]) * 4)
        self._index_deferrable()
        #: rules that name their failure's phase (evidence cannot change it: see _phase_for)
        self._phase_fixed = frozenset(i for i, r in enumerate(self.pack.rules) if r.rule.phase)

    def _adopt(self, derived: dict[str, Any]) -> None:
        """Take what an earlier scan of the same pack derived from it (see :data:`_DERIVED`):
        the indexes and prefilters as they are, each memo (a dict filled as a scan asks) and each
        list a scan reorders as a copy of its own."""
        for name, value in derived.items():
            setattr(self, name, _own(name, value))
        self._ev_mask_of = getattr(self._ev_prefilter, "mask", None) or self._ev_mask_by_needle

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
        #: triggers only periodic context rules use (see ContextRule.periodic): their lines are
        #: phase evidence's kin, set aside, and only the latest is read (EvidenceAside._read_periodic)
        self._periodic_triggers = self._triggers_only_of(lambda c: c.rule.periodic and not c.votes_only)
        #: triggers only periodic context rules that do nothing but vote for an engine use (an
        #: engine's name on most lines of its log: ollama's model paths, TGI's router): set aside
        #: like phase evidence, their lines are read, and vote, only near a failure
        self._vote_triggers = self._triggers_only_of(lambda c: c.rule.periodic and c.votes_only)
        self._triggers_by_mask: dict[int, list[str]] = {}
        #: per needle (by bit), the triggers that hold it; built on first use (see :meth:`_triggers_for`)
        self._holding: dict[int, list[int]] = {}
        self._trigger_hay: Haystacks | None = None
        # a phase's markers (and its progress patterns) all mean the same: the one that matched
        # last is tried first (lines of one kind repeat: vLLM's throughput lines)
        self._markers = [list(ph.markers) for ph in self.pack.phases]
        self._progress_patterns = [list(ph.progress) for ph in self.pack.phases]

    def _triggers_only_of(self, kind: Callable[[CompiledContext], bool]) -> frozenset[str]:
        """The triggers of no rule whose context rules are all of ``kind``."""
        return frozenset(
            t
            for t, idx in self._ctx_by_trigger.items()
            if t not in self._rule_by_trigger and all(kind(self.pack.contexts[i]) for i in idx)
        )

    def _split_needles(self, triggers: list[str]) -> tuple[list[bytes], list[bytes]]:
        """The needles of the lines that may start or continue a failure or carry a run fact
        (main), and those of the lines that can only be phase evidence (vLLM's throughput lines,
        progress bars, loss lines): the main prefilter never reports the latter, so printing them
        often costs no Python per line (see :meth:`_between`). An evidence needle that holds a
        main one is left out: its lines are main candidates anyway."""
        only_phase = {
            t
            for t in (*self._phase_by_trigger, *_BUILTIN_TRIGGERS)
            if t not in self._ctx_by_trigger and t not in self._rule_by_trigger
        } | self._periodic_triggers | self._vote_triggers
        main = needles([t for t in triggers if t not in only_phase])
        candidates = needles(sorted(only_phase))
        hay = Haystacks(candidates)
        held = {j for m in main for j in hay.holding(m)}
        evidence = [n for j, n in enumerate(candidates) if j not in held]
        return main, evidence

    def _index_deferrable(self) -> None:
        """What :meth:`_defers` and :meth:`_absorbs` need: how a traceback frame looks, which
        context rules only vote, and whether the prefilter's answers are exact for non-ASCII
        lines too."""
        #: how a traceback frame looks in bytes (CPython's layout), each an evidence needle as it
        #: is (see EvidenceAside._absorbs)
        evidence = set(self._needles[self._ev_shift :])
        marks = tuple(m for m in (b'File "', b'", line ') if m.lower() in evidence)
        self._frame_marks = (*marks, *(form for form, _ in json_forms(marks)))  # (in a JSON record)
        #: triggers of context rules that only vote for an engine (no group to read)
        reading = {t for c in self.pack.contexts if not c.votes_only for t in c.triggers}
        self._vote_only = frozenset(
            t
            for c in self.pack.contexts
            if c.votes_only
            for t in c.triggers
            if t not in reading and t not in self._phase_by_trigger
        )
        self._absorbs_by_mask: dict[int, bool] = {}
        #: the main needles a line's bytes hold, in one call (None: the prefilter cannot say)
        self._main_mask: Callable[[bytes], int] | None = getattr(self._prefilter, "mask", None)
        needles_ = self._needles
        self._ascii_needles = all(n.isascii() for n in needles_)
        self._deferrable_by_mask: dict[int, bool] = {}
        self._repeat_by_mask: dict[int, list[str] | None] = {}
        self._folds_from_line = frozenset(i for i, r in enumerate(self.pack.rules) if folds_from_its_line(r))
        self._progress_by_mask: dict[int, bool] = {}
        self._index_periodic()

    def _index_periodic(self) -> None:
        """What :meth:`_read_periodic` needs: the evidence needles of periodic lines (bits of a
        whole mask), the periodic context rules each stands for, and their groups."""
        from oomdoctor.prefilter.presence import Presence
        from oomdoctor.rulepack.loader import group_names

        self._periodic_ctx: dict[int, tuple[int, ...]] = {}  # bit -> context rules
        lits: list[bytes] = []
        if self._ev_prefilter is not None and self._masks_ok:
            for j in range(len(self._needles) - self._ev_shift):
                bit = 1 << (self._ev_shift + j)
                held = [t for t in self._triggers_for(bit) if t in self._periodic_triggers]
                if held:
                    self._periodic_ctx[bit] = tuple(sorted({i for t in held for i in self._ctx_by_trigger[t]}))
                    lits.append(self._needles[self._ev_shift + j])
        self._periodic_bits = sum(self._periodic_ctx)
        #: the prefilters of the searches backwards through a stretch set aside: each asks only
        #: for the needles of what it looks for, so a stretch full of other evidence costs it nothing
        #: (a progress line among periodic lines; a periodic line among throughput lines)
        self._periodic_pf = make_prefilter([n.decode("utf-8") for n in lits]) if lits else None
        self._progress_pf = self._ev_prefilter
        if self._ev_prefilter is not None:
            ev = self._needles[self._ev_shift :]
            progress = [n for j, n in enumerate(ev) if self._may_progress(1 << (self._ev_shift + j))]
            if progress and len(progress) < len(ev):
                self._progress_pf = make_prefilter([n.decode("utf-8") for n in progress])
        self._periodic_groups = {
            i: frozenset(group_names(self.pack.contexts[i].rule.pattern)) for idx in self._periodic_ctx.values() for i in idx
        }
        #: which periodic needles a stretch holds (bit k: the k-th of ``_periodic_ctx``)
        self._presence = Presence(lits) if lits else None

    def _triggers_for(self, mask: int) -> list[str]:
        """The triggers a candidate line may hold, given the needles ``mask`` says it holds: those
        that contain one of them (every trigger contains a needle, see :func:`needles`)."""
        found = self._triggers_by_mask.get(mask)
        if found is None:
            if len(self._triggers_by_mask) >= 4096:
                self._triggers_by_mask.clear()
            held: set[int] = set()
            rest, i = mask, 0
            while rest:
                if rest & 1:
                    held.update(self._triggers_holding(i))
                rest >>= 1
                i += 1
            found = [self._all_triggers[j] for j in sorted(held)]
            self._triggers_by_mask[mask] = found
        return found

    def _triggers_holding(self, i: int) -> list[int]:
        """The indices of the triggers (in ``_all_triggers``) that hold needle ``i``."""
        got = self._holding.get(i)
        if got is None:
            if self._trigger_hay is None:
                self._trigger_hay = Haystacks([t.encode("utf-8") for t in self._all_triggers])
            got = self._holding[i] = self._trigger_hay.holding(self._needles[i])
        return got

    # -- sources -------------------------------------------------------------------------------

    def _start_source(self, name: str) -> None:
        self.source = name
        self.sources.append(name)
        #: where this source's lines are in the whole input (``_line_base + number`` ascends)
        self._line_base = len(self.sources) << 40
        self._splitter = LineSplitter()
        self._recent = RecentLines(maxlen=256)
        #: the last LEAD_LINES lines of the blocks scanned, raw: (line number, bytes)
        self._last_lines: deque[tuple[int, bytes]] = deque(maxlen=LEAD_LINES)
        self._pending: deque[_Pending] = deque()
        self._need_lookahead = 0
        #: the block, its start, and the offset and number of the candidate line being processed
        self._here: tuple[bytes, int, int, int] = (b"", 0, 0, 0)
        self._claimed_until: dict[str | None, int] = {}
        self._frames: deque[tuple[int, str, str | None]] = deque(maxlen=400)
        #: a frame line a terminal cut before its '", line N, in f' ending: (number, rank, text)
        self._cut_frame: tuple[int, str | None, str] | None = None
        self._frame_rest: tuple[int, str] | None = None
        #: line numbers of "Traceback (most recent call last)" headers, per rank
        self._traceback_at: dict[str | None, deque[int]] = {}
        self._progress: deque[tuple[int, str]] = deque(maxlen=64)
        self._timed_progress: deque[tuple[int, str, tuple[int, ...]]] = deque(maxlen=64)
        self._reread: Callable[[int, int], bytes] | None = None
        self._fed = 0
        self._block_base = -1
        self._far: FarSpans | None = None
        self._recovered_at: deque[tuple[int, str | None]] = deque(maxlen=64)
        self._retried_at: deque[tuple[int, str | None]] = deque(maxlen=64)
        self._last_line = 0
        #: the source's bytes while it is small enough to be a paste (see PASTE_BYTES)
        self._paste: bytearray | None = bytearray()
        #: the latest start-up banner (a line naming the engine's version): a new run begins
        self._run_start = 0
        self._start_runs()

    @property
    def prefilter(self) -> Prefilter:
        return self._prefilter

    def use_prefilter(self, prefilter: Prefilter) -> None:
        """Swap in another prefilter for the same needles (one that knows some answers ahead:
        :class:`oomdoctor.prefilter.pool.Precomputed`)."""
        if prefilter.needles != self._prefilter.needles:
            raise ValueError("a prefilter for other needles")
        self._prefilter = prefilter

    @property
    def periodic_presence(self) -> Presence | None:
        """Which periodic needles a stretch holds (see :meth:`pass_quiet`: a stretch holding one
        is read), or None when there are none."""
        return self._presence

    def rereadable(self, read: Callable[[int, int], bytes] | None) -> None:
        """Say that the current source can be read again: ``read(a, b)`` returns bytes ``a`` to
        ``b`` of what was fed for it (a plain file, a text in memory). Its stretches of evidence
        far behind are then not searched for their latest progress line as they leave memory,
        only if a failure whose step is not known asks for it (see
        :meth:`~oomdoctor.scan.evidence.EvidenceAside._far_progress`). Call it before the
        source's first byte is fed."""
        self._reread = read

    def new_source(self, name: str) -> None:
        """Finish the current source and continue the same run in another (line numbers restart):
        a log rotated or truncated under ``--follow``. Facts read before carry over, so a file of
        another run (another program, another start) needs a :class:`Scanner` of its own (see
        :func:`~oomdoctor.report.combine_reports`)."""
        self._end_of_source()
        self._start_source(name)

    def set_command(self, argv: list[str]) -> None:
        """The exact command that produced the log (``oomdoctor run``): ``Context.command`` and
        the launch arguments parsed from it, as if the log had printed them."""
        import shlex

        from oomdoctor.context import parse_argv

        _, args = parse_argv(shlex.join(argv))
        self._collector.apply_args(args, list(argv))
