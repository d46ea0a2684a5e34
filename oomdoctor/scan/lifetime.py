"""Open-finding lifetime: findings stay open while evidence of their step may follow, then close."""

from __future__ import annotations

from typing import Any

from oomdoctor import __version__
from oomdoctor.context import product_for_engine
from oomdoctor.fallback import is_fallback, kind_for
from oomdoctor.reader import MAX_LINE_BYTES, normalise
from oomdoctor.report import Context, CutLine, Finding, Report, SourceContext, Summary, Tool
from oomdoctor.scan.clock import EARLIER_WITHIN, seconds
from oomdoctor.scan.state import (
    _GENERIC_ENGINES,
    AFTER_LINES,
    PROGRESS_LAG,
    ScanState,
    _Open,
)


class Lifetime(ScanState):
    """Close open findings ``AFTER_LINES`` after their line (deciding their phase), finish a
    source, and hand out findings (``poll``) and the report (``close``)."""

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
        # a frame that tells the phase only in one engine's log ("%phase@engine"), of the log's engine
        engine = self._collector.engine() if any("@" in n for n in names) else None
        if engine:
            for ph in self.pack.phases:
                if f"%{ph.rule.phase}@{engine}" in names:
                    return ph.rule.phase
        for ph in self.pack.phases:
            if ph.rule.phase in markers:
                return ph.rule.phase
        # then what the other ranks' tracebacks and markers show right after it
        foreign = set(o.foreign)
        for ph in self.pack.phases:
            if ph.frames & foreign or "@" + ph.rule.phase in foreign or "%" + ph.rule.phase in foreign:
                return ph.rule.phase
        # a log printed newest first (its lines state times): the progress lines after the failure
        # in the file that state an earlier time happened before it; the latest of them wins
        earlier = self._earlier_progress(o)
        if earlier is not None:
            return earlier
        if o.progress_phase:
            return o.progress_phase
        # none before it: a progress line interleaved right after it (another worker still
        # loading), counted from the failure's last line, so that the other ranks' copies of the
        # failure and its own traceback lines do not use up the lag
        end = max(o.last_line, o.finding.location.end_line)
        after = [ph for number, ph in self._progress if o.line < number <= end + PROGRESS_LAG]
        if after:
            return after[0]
        # last, the process that printed it, where its prefix names one that runs a single stage
        # (Ray's "(NAME pid=N)": an RL trainer's actor)
        return self._process_phase(o.rank) or "unknown"

    def _process_phase(self, rank: str | None) -> str | None:
        """The phase whose ``processes`` name the process of a "(NAME pid=N)" prefix, if one."""
        if not rank or " pid=" not in rank:
            return None
        name = rank.split(" ", 1)[0]
        return next((ph.rule.phase for ph in self.pack.phases if name in ph.processes), None)

    def _earlier_progress(self, o: _Open) -> str | None:
        """The phase of the latest-stated progress line after the failure in the file (within
        ``AFTER_LINES``) whose stated time is before the failure's: a log printed newest first."""
        if o.time is None:
            return None
        cands = [
            (t, ph) for number, ph, t in self._timed_progress
            if o.line < number <= o.line + AFTER_LINES and 0 < seconds(o.time) - seconds(t) < EARLIER_WITHIN
        ]
        return max(cands, key=lambda c: c[0])[1] if cands else None

    def _recovered(self, o: _Open) -> bool:
        """Whether a line after the failure, of its rank, says the program recovered from it (a
        context rule's ``oom_recovered`` group: fairseq's "attempting to recover from OOM"): the
        failure was caught and retried, a warning, not the error that ended the run."""
        ranks = {o.rank} | o.merged_ranks
        end = max(o.last_line, o.finding.location.end_line)
        if any(end < n <= end + AFTER_LINES and rank in ranks for n, rank in self._recovered_at):
            return True
        # a retry another way (a context rule's ``oom_retried`` group: llama.cpp's "compute buffer
        # allocation failed, retrying without pipeline parallelism"): recovered unless the retry
        # failed too, a failure of the same rank after the retry line (while it is open or since)
        retries = [n for n, rank in self._retried_at if end < n <= end + AFTER_LINES and rank in ranks]
        if not retries:
            return False
        after, source = retries[0], o.finding.location.source
        failed_again = any(
            x is not o and x.line > after and x.rank in ranks and x.finding.location.source == source
            for x in self._open
        ) or any(
            f.location.line > after and f.location.source == source
            and (set(f.ranks) & ranks if f.ranks else None in ranks)
            for f in self._findings
        )
        return not failed_again

    def _age_open(self, final: bool, last_line: int | None = None) -> None:
        """Close the open findings ``AFTER_LINES`` behind ``last_line`` (default: the last line
        read), or all of them (``final``)."""
        last = self._last_line if last_line is None else last_line
        still: list[_Open] = []
        for o in self._open:
            if final or last - o.line > AFTER_LINES:
                o.finding.phase = self._phase_for(o)  # type: ignore[assignment]
                self._stand_in_phase(o)
                if not self._stand_in_holds(o.finding):
                    continue
                if o.finding.severity == "error" and self._recovered(o):
                    o.finding.severity = "warning"
                self._findings.append(o.finding)
                self._ready.append(o.finding)
            else:
                still.append(o)
        self._open = still

    def _needs_phase(self, finding: Finding) -> str | None:
        """The phase a stand-in rule's finding needs (``needs_phase``), None for any other rule."""
        try:
            return self.pack.rule(finding.rule).rule.needs_phase
        except KeyError:
            return None

    def _stand_in_phase(self, o: _Open) -> None:
        """A stand-in's failure line is cut, and with it often its own traceback's inner frames
        (a worker's stops at the outer ``initialize_cache``): the phase it needs is taken when
        the latest progress line names it and another rank's frames or a marker line show it too."""
        need = self._needs_phase(o.finding)
        if need is None or o.finding.phase == need or o.progress_phase != need:
            return
        foreign = set(o.foreign)
        for ph in self.pack.phases:
            if ph.rule.phase != need:
                continue
            if ph.frames & foreign or "@" + need in foreign or "%" + need in foreign or need in o.marker_phases:
                o.finding.phase = need
                return

    def _stand_in_holds(self, finding: Finding) -> bool:
        """Whether a stand-in's finding (a rule with ``needs_phase``: a worker's failure whose own
        error line is missing) is kept: only in the phase it names, and only while no other rule's
        finding in its source, before it or still open, names the failure itself."""
        need = self._needs_phase(finding)
        if need is None:
            return True
        if finding.phase != need:
            return False
        source = finding.location.source
        return not any(
            g is not finding and g.location.source == source and self._needs_phase(g) is None
            for g in self._findings + [x.finding for x in self._open]
        )

    def _end_of_source(self) -> None:
        self._resolve_deferred(self._last_line + 1)
        number, last = self._splitter.close()
        if last:
            for line in normalise(number, last[:-1]):
                self._process(line)
            self._last_line = number
        self._cut_before.extend(self._cut_lines_of_source())
        self._cut_count_before += self._splitter.cut_count
        self._evaluate_pending(final=True)
        if self._paste is not None and not any(
            f.location.source == self.source for f in self._findings + [o.finding for o in self._open]
        ):
            self._match_across_breaks(bytes(self._paste))
        self._age_open(final=True)

    def flush(self) -> None:
        """Decide everything seen so far (after a quiet spell in pipe mode); input may continue."""
        self._resolve_deferred(self._last_line + 1)
        self._evaluate_pending(final=True)
        self._age_open(final=True)

    def held_bytes(self) -> int:
        """Bytes of input the scan holds set aside now (phase evidence not read yet, a stretch
        not searched yet, a paste kept whole): what :meth:`flush` lets go of, bar the paste,
        which stops growing at ``PASTE_BYTES``. A caller holding many scans (the fleet's
        streams) bounds each with it."""
        return self._deferred_bytes + self._unsearched_bytes + len(self._paste or b"")

    def undecided(self) -> bool:
        """Whether a failure read so far waits to be decided: a candidate line waiting for its
        look-ahead, or a finding open for the lines after it (:meth:`flush` decides them)."""
        return bool(self._open or self._pending)

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
        if self._unsearched:  # (the latest periodic lines they hold are facts of the run)
            self._search_unsearched()
        ctx = self._collector.finish().model_copy(deep=True)
        for f in self._findings + [o.finding for o in self._open]:
            if f.engine in _GENERIC_ENGINES and ctx.engine and ctx.engine not in ("pytorch",):
                f.engine = ctx.engine
            # the run's product; where no line names one, the one the failing rule's engine names
            f.product = ctx.product or product_for_engine(f.engine, self.pack.products)
            if is_fallback(f.rule):
                # the fallback's finding is named after the log's engine once it is known
                f.kind = kind_for(ctx.engine, self.pack.rule(f.rule).rule.kind)
        return ctx

    def report_so_far(self) -> Report:
        """The report of the findings final so far (each advised when :meth:`poll` returned it),
        input continuing: ``--follow -f json`` writes one each time findings become final."""
        return self._report(self.context(), list(self._findings))

    def _cut_lines_of_source(self) -> list[CutLine]:
        return [
            CutLine(source=self.source, line=n, bytes=length, searched_bytes=MAX_LINE_BYTES)
            for n, length in self._splitter.cut_lines
        ]

    def _report(self, ctx: Context, findings: list[Finding]) -> Report:
        """The report of ``findings`` in the run whose context is ``ctx``: one scan is one run, its
        sources after the first continue it (a rotated log), so ``contexts`` holds one, under the
        first source's name."""
        return Report(
            tool=Tool(version=__version__),
            sources=list(self.sources),
            findings=findings,
            context=ctx,
            contexts=[SourceContext.of(self.sources[0], ctx)],
            summary=Summary(
                errors=sum(f.severity == "error" for f in findings),
                warnings=sum(f.severity == "warning" for f in findings),
                cut_lines=self._cut_count_before + (0 if self._done else self._splitter.cut_count),
            ),
            cut_lines=self._cut_before + ([] if self._done else self._cut_lines_of_source()),
        )

    def close(self) -> Report:
        """End of input: finish every finding, run the advisor, return the report.

        A scan is one run, with one context (``report.contexts`` holds it, under the first
        source's name): another run, another file or request, is diagnosed by a scanner of its
        own, and the reports joined by :func:`~oomdoctor.report.combine_reports`."""
        if not self._done:
            self._end_of_source()
            self._done = True
        ctx = self.context()
        # a stand-in closed before another rule's finding about the same failure opened gives way to it
        findings = [f for f in self._findings if self._stand_in_holds(f)]
        report = self._report(ctx, findings)
        if self._advise and findings:  # (no finding: nothing to advise, and nothing of it to import)
            from oomdoctor.advisor import advise

            advise(report, self.hints, self.pack)
        return report
