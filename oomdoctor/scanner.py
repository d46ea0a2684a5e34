"""The streaming scanner: bytes in, findings and context out.

``Scanner.feed(bytes)`` accepts any chunking; findings never depend on where chunks split.
Each block of complete lines goes through the prefilter; only candidate lines (and a short
look-ahead after each) are decoded, normalised and matched against the full rules.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import regex

from oomdoctor import __version__
from oomdoctor.context import ContextCollector
from oomdoctor.figures import groups_to_figures
from oomdoctor.prefilter import Prefilter, make_prefilter
from oomdoctor.reader import Line, LineSplitter, normalise
from oomdoctor.report import Finding, Location, Report, Summary, Tool
from oomdoctor.rulepack import CompiledRule, RulePack, default_pack
from oomdoctor.rulepack.loader import REGEX_TIMEOUT

_FRAME = regex.compile(r'^\s*File "(?P<path>[^"]*)", line \d+, in (?P<func>[\w<>.\-]+)')
_TRACEBACK = "Traceback (most recent call last)"
#: literals every scan needs besides the rules' own triggers
_BUILTIN_TRIGGERS = ('file "', "traceback (most recent call last)")

#: lines after a finding during which traceback frames and markers still count for its phase
AFTER_LINES = 80
#: lines before a finding during which frames of the same traceback count
BEFORE_LINES = 200
#: a failure repeated by another rank within this many lines is the same failure
SAME_FAILURE_LINES = 400
#: findings kept at most (a log with endless OOMs still costs bounded memory)
MAX_FINDINGS = 500


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
        self._prefilter = prefilter or make_prefilter([*self.pack.all_triggers(), *_BUILTIN_TRIGGERS])
        self._lookahead = min(48, max([r.rule.window for r in self.pack.rules] + [0]) * 4)
        self.sources: list[str] = []
        self._collector = ContextCollector()
        self._findings: list[Finding] = []
        self._open: list[_Open] = []
        self._ready: list[Finding] = []
        self._done = False
        self._timing = ""  # the context/phase rule whose regex runs (named by RuleTimeout)
        self._start_source(source)

    # -- sources -------------------------------------------------------------------------------

    def _start_source(self, name: str) -> None:
        self.source = name
        self.sources.append(name)
        self._splitter = LineSplitter()
        self._recent: deque[Line] = deque(maxlen=256)
        self._pending: deque[_Pending] = deque()
        self._need_lookahead = 0
        self._claimed_until: dict[str | None, int] = {}
        self._frames: deque[tuple[int, str, str | None]] = deque(maxlen=400)
        self._traceback_at: dict[str | None, int] = {}
        self._progress: tuple[int, str] | None = None
        self._last_line = 0

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
        first, block = self._splitter.feed_block(data)
        if block:
            try:
                self._scan_block(first, block)
            except TimeoutError:  # a context or phase regex (rule patterns raise RuleTimeout)
                raise RuleTimeout(f"{self._timing}: regex timed out (catastrophic backtracking?)") from None

    def _scan_block(self, first: int, block: bytes) -> None:
        spans = self._prefilter.line_spans(block)
        wanted: list[tuple[int, int, int]] = []  # (line number, start, end)
        n = len(block)
        lookahead = self._lookahead
        cur_pos, cur_line = 0, first
        # look-ahead owed from the previous block
        while self._need_lookahead > 0 and cur_pos < n:
            end = block.find(b"\n", cur_pos)
            wanted.append((cur_line, cur_pos, end))
            cur_pos, cur_line = end + 1, cur_line + 1
            self._need_lookahead -= 1
        for start, end in spans:
            if start < cur_pos:
                continue
            cur_line += block.count(b"\n", cur_pos, start)
            wanted.append((cur_line, start, end))
            p, k = end + 1, 0
            while k < lookahead and p < n:
                e = block.find(b"\n", p)
                k += 1
                wanted.append((cur_line + k, p, e))
                p = e + 1
            self._need_lookahead = lookahead - k
            cur_pos, cur_line = p, cur_line + k + 1
        for number, start, end in wanted:
            for line in normalise(number, block[start:end]):
                self._process(line)
        self._last_line = first + block.count(b"\n") - 1
        self._evaluate_pending(final=False)
        self._age_open(final=False)

    # -- per line ------------------------------------------------------------------------------

    def _process(self, line: Line) -> None:
        self._recent.append(line)
        text = line.text
        low = text.lower()
        # traceback frames
        if _TRACEBACK in text:
            self._traceback_at[line.rank] = line.number
        if 'file "' in low:
            m = _FRAME.match(text)
            if m:
                func = m["func"]
                self._frames.append((line.number, func, line.rank))
                for o in self._open:
                    if o.line < line.number <= o.line + AFTER_LINES and o.rank == line.rank:
                        o.frames.append(func)
        # phase markers and progress lines
        for ph in self.pack.phases:
            if ph.triggers and not any(t in low for t in ph.triggers):
                continue
            self._timing = f'phase "{ph.rule.phase}"'
            for pat in ph.markers:
                if pat.search(text, timeout=REGEX_TIMEOUT):
                    for o in self._open:
                        if o.line <= line.number <= o.line + AFTER_LINES:
                            o.marker_phases.append(ph.rule.phase)
                    self._frames.append((line.number, "@" + ph.rule.phase, line.rank))
                    break
            for pat in ph.progress:
                if pat.search(text, timeout=REGEX_TIMEOUT):
                    self._progress = (line.number, ph.rule.phase)
                    break
        # context lines
        for ctx in self.pack.contexts:
            if not any(t in low for t in ctx.triggers):
                continue
            self._timing = f'{ctx.source}: context "{ctx.rule.id}": pattern'
            m = ctx.pattern.search(text, timeout=REGEX_TIMEOUT)
            if m is None:
                continue
            if ctx.rule.engine:
                self._collector.vote_engine(ctx.rule.engine, line.number)
            groups = {k: v for k, v in m.groupdict().items() if k != "engine"}
            self._collector.apply_groups(groups, ctx.rule.parser, ctx.rule.units)
        # rule candidates
        rules = [r for r in self.pack.rules if any(t in low for t in r.triggers)]
        if rules:
            self._pending.append(_Pending(line, rules, self.source))
        self._evaluate_pending(final=False)

    def _window(self, anchor: Line, size: int) -> list[Line]:
        out: list[Line] = []
        limit = anchor.number + max(size, 1) * 4
        for ln in self._recent:
            if ln is anchor or ln.number < anchor.number:
                continue
            if ln.number > limit:
                break
            if ln.rank == anchor.rank and (ln.number > anchor.number or ln is not anchor):
                if ln.number == anchor.number and ln.text == anchor.text:
                    continue
                out.append(ln)
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
            window = self._window(anchor, rule.rule.window)
            m, text, end_line = self._search(rule, anchor, window)
            if m is None:
                continue
            self._claimed_until[anchor.rank] = end_line
            self._add_finding(rule, m, text, anchor, end_line)
            return

    def _search(
        self, rule: CompiledRule, anchor: Line, window: list[Line]
    ) -> tuple[Any, str, int]:
        for joiner in ("\n", ""):
            text = anchor.text + (joiner + joiner.join(w.text for w in window) if window else "")
            try:
                m = rule.pattern.search(text, timeout=REGEX_TIMEOUT)
            except TimeoutError:
                raise RuleTimeout(
                    f'{rule.source}: rule "{rule.id}": pattern: regex timed out (catastrophic backtracking?)'
                ) from None
            if m is not None and m.start() <= len(anchor.text):
                end_line = anchor.number
                consumed = len(anchor.text)
                for w in window:
                    if m.end() > consumed + len(joiner):
                        end_line = w.number
                    consumed += len(joiner) + len(w.text)
                return m, text, end_line
            if not window:
                break
        return None, "", anchor.number

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
            em = pat.search(region, timeout=REGEX_TIMEOUT)
            if em is None:
                continue
            gd = em.groupdict()
            value_text = gd.get("value") if "value" in gd else (em.group(1) if em.groups() else em.group(0))
            if value_text is None:
                continue
            figures.update(groups_to_figures({name: value_text}, r.types, r.units))
        for name, pat in rule.extract_all.items():
            items = []
            for em in pat.finditer(region, timeout=REGEX_TIMEOUT):
                item = groups_to_figures(em.groupdict(), r.types, r.units)
                if item:
                    items.append(item)
            if items:
                figures[name] = items
        return figures

    def _add_finding(self, rule: CompiledRule, m: Any, text: str, anchor: Line, end_line: int) -> None:
        figures = self._extract(rule, m, text)
        message = " ".join(m.group(0).split())
        if len(message) < 400:
            # keep the whole anchor sentence for readers
            line_text = " ".join(text.split("\n", 1)[0].split())
            if len(line_text) > len(message) and len(line_text) <= 2000:
                message = line_text
        message = message[:2000]
        rank = anchor.rank
        # the same failure again (another rank, or a wrapper re-raising it)?
        for o in self._open:
            if o.finding.rule == rule.id and o.finding.location.source == self.source and (
                o.finding.figures == figures
                or (rank != o.rank and anchor.number - o.last_line <= SAME_FAILURE_LINES)
            ):
                self._merge(o.finding, rank)
                o.last_line = anchor.number
                return
        for f in reversed(self._findings[-20:]):
            if f.rule == rule.id and f.figures == figures and f.location.source == self.source:
                self._merge(f, rank)
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
        o = _Open(finding, rank, anchor.number, last_line=anchor.number)
        # evidence before the failure: frames of the traceback that precedes it
        tb = self._traceback_at.get(rank)
        for number, func, frank in self._frames:
            if frank != rank or number > anchor.number or anchor.number - number > BEFORE_LINES:
                continue
            if tb is not None and number < tb:
                continue
            o.frames.append(func)
        if self._progress is not None:
            o.progress_phase = self._progress[1]
        self._open.append(o)

    @staticmethod
    def _merge(f: Finding, rank: str | None) -> None:
        f.occurrences += 1
        if rank and rank not in f.ranks:
            f.ranks.append(rank)

    # -- finishing findings --------------------------------------------------------------------

    def _phase_for(self, o: _Open) -> str:
        if o.finding.phase != "unknown":
            return o.finding.phase
        names = set()
        for f in o.frames:
            if f.startswith("@"):
                names.add(f)
            else:
                names.add(f)
        markers = set(o.marker_phases) | {f[1:] for f in names if f.startswith("@")}
        for ph in self.pack.phases:
            if ph.frames & names or ph.rule.phase in markers:
                return ph.rule.phase
        if o.progress_phase:
            return o.progress_phase
        return "unknown"

    def _age_open(self, final: bool) -> None:
        still: list[_Open] = []
        for o in self._open:
            if final or self._last_line - o.line > AFTER_LINES:
                o.finding.phase = self._phase_for(o)  # type: ignore[assignment]
                self._findings.append(o.finding)
                self._ready.append(o.finding)
            else:
                still.append(o)
        self._open = still

    def _end_of_source(self) -> None:
        number, last = self._splitter.close()
        if last:
            for line in normalise(number, last[:-1]):
                self._process(line)
            self._last_line = number
        self._evaluate_pending(final=True)
        self._age_open(final=True)

    def flush(self) -> None:
        """Decide everything seen so far (after a quiet spell in pipe mode); input may continue."""
        self._evaluate_pending(final=True)
        self._age_open(final=True)

    def poll(self) -> list[Finding]:
        """Findings finished since the last poll, with their remedies (for live output)."""
        ready, self._ready = self._ready, []
        if ready and self._advise:
            from oomdoctor.advisor import advise_findings

            ctx = self.context()
            advise_findings(ready, ctx, self.hints)
        return ready

    def context(self) -> Any:
        ctx = self._collector.finish().model_copy(deep=True)
        for f in self._findings + [o.finding for o in self._open]:
            if f.engine in ("pytorch", "python") and ctx.engine and ctx.engine not in ("pytorch",):
                f.engine = ctx.engine
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

            advise(report, self.hints)
        return report
