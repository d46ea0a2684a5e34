"""Folding retellings into one finding: every rank, re-raise and wrapper telling one failure."""

from __future__ import annotations

import re
from typing import Any

from oomdoctor.fallback import is_fallback
from oomdoctor.i18n import current_lang
from oomdoctor.reader import Line, normalise
from oomdoctor.report import Finding, Location
from oomdoctor.rulepack import CompiledRule, RulePack
from oomdoctor.scan.clock import line_time
from oomdoctor.scan.matching import match_order
from oomdoctor.scan.state import (
    _GENERIC_ENGINES,
    AFTER_LINES,
    BEFORE_LINES,
    MARKER_LEAD,
    MAX_FINDINGS,
    SAME_FAILURE_LINES,
    SAME_RUN_LINES,
    ScanState,
    _Open,
)

#: a line that re-prints another process's failure (vLLM's engine core quoting a worker's
#: exception): merged into that failure without counting as another occurrence
_REPRINTS = ("worker failed with error",)


#: what makes a pattern's match on a line depend on the text after it: an end anchor, a lookahead
_READS_PAST_ITS_END = re.compile(r"(?<!\\)\$|\(\?[=!]|\\Z")


def folds_from_its_line(rule: CompiledRule) -> bool:
    """Whether a further occurrence of ``rule``'s message may be folded into the finding it
    repeats from its own line, without the lines after it (see ``Folding._fold_repeat``): a
    warning that names its phase, whose figures all come from its pattern's groups (no roles,
    no ``extract_all``, no ``extract`` of a figure the pattern does not name), and whose pattern
    has no end anchor or lookahead."""
    r = rule.rule
    return (
        r.severity == "warning"
        and bool(r.phase)
        and not r.roles
        and not rule.extract_all
        and set(rule.extract) <= set(rule.pattern.groupindex)
        and not _READS_PAST_ITS_END.search(rule.pattern.pattern)
    )


def message_of(m: Any, text: str) -> str:
    """A finding's message: what the match read, or the whole line it starts on when that is
    longer (at most 2000 characters, blanks collapsed)."""
    message = " ".join(m.group(0).split())
    if len(message) < 400:
        # keep the whole anchor sentence for readers
        line_text = " ".join(text.split("\n", 1)[0].split())
        if len(line_text) > len(message) and len(line_text) <= 2000:
            message = line_text
    return message[:2000]


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


class Folding(ScanState):
    """Turn a match into a new open finding, or fold it into the finding it retells (another
    rank's copy, a re-raise, a more specific message about it)."""

    def _add_finding(
        self, rule: CompiledRule, m: Any, text: str, figures: dict[str, Any], anchor: Line, end_line: int,
        copies: int = 1,
    ) -> None:
        message = message_of(m, text)
        rank = anchor.rank
        if self._same_failure(rule, figures, anchor, message, end_line, copies):
            return
        if len(self._findings) + len(self._open) >= MAX_FINDINGS:
            return
        finding = Finding(
            rule=rule.id,
            kind=rule.rule.kind,
            engine=rule.rule.engine,
            severity=rule.rule.severity,
            phase=rule.rule.phase or "unknown",
            title=rule.rule.title_in(current_lang()),
            message=message,
            location=Location(source=self.source, line=anchor.number, end_line=end_line),
            occurrences=1,
            ranks=[rank] if rank else [],
            figures=figures,
        )
        if rule.rule.engine not in _GENERIC_ENGINES and rule.rule.needs_phase is None:
            # (a stand-in's line, a CUDA error's tail, is no engine's: it may yet be dropped)
            self._collector.vote_engine(rule.rule.engine, anchor.number)
        o = _Open(finding, rank, anchor.number, last_line=anchor.number)
        self._seen[id(finding)] = (anchor.number, {rank})
        o.frames.extend(self._evidence(anchor, rank))
        o.foreign.extend(
            func for number, func, frank in self._frames if frank != rank and 0 < number - anchor.number <= AFTER_LINES
        )
        if self._far is not None and finding.phase == "unknown":
            self._far_progress()  # (the latest progress line may be far behind, unsearched)
        # the latest before it (deferred lines are read late: the latest by number, not by reading)
        before = [(number, ph) for number, ph in self._progress if number <= anchor.number]
        if before:
            o.progress_phase = max(before, key=lambda item: item[0])[1]
        o.time = line_time(anchor)
        self._open.append(o)

    def _repeat_triggers(self, mask: int) -> list[str] | None:
        """The triggers a candidate line whose bytes hold the needles ``mask`` may hold, when
        they are all rule triggers (no phase, context or frame) and one of their rules may fold
        a further occurrence from its own line (:meth:`_fold_repeat`); else None."""
        if mask in self._repeat_by_mask:
            return self._repeat_by_mask[mask]
        if len(self._repeat_by_mask) >= 4096:
            self._repeat_by_mask.clear()
        found = self._triggers_for(mask) if mask > 0 else []
        only_rules = all(
            t in self._rule_by_trigger and t not in self._phase_by_trigger and t not in self._ctx_by_trigger
            for t in found
        )
        folds = any(i in self._folds_from_line for t in found for i in self._rule_by_trigger.get(t, ()))
        got = self._repeat_by_mask[mask] = found if found and only_rules and folds else None
        return got

    def _fold_repeat(self, number: int, raw: bytes, triggers: list[str]) -> bool:
        """Fold line ``number`` into the finding it repeats when it is a further occurrence of a
        warning read on its own line (of the rules its triggers name, among ``triggers``, the
        one matching tries first may: see :func:`folds_from_its_line`), while nothing is pending
        or open; True when it did.

        A server under memory pressure prints its warning every few lines (SGLang's "KV cache
        pool is full. Retract requests."). Matching each occurrence with the lines after it
        (read one by one for the window) cost ~200 us. Read on its own line, with every group of
        the pattern found, it is counted and its figures are the latest, through the same
        :meth:`_same_failure` as a match with its window: the window could give no further
        figure. What reading it alone gives up: a group at the very end of the line that the
        pattern would let run on into a following line of the same rank (a message wrapped in
        the middle of its last figure). Any other line (a message wrapped before a figure, a
        figure missing, a first occurrence, one while a finding is open) is read as every
        line is."""
        if self._open_before(number):
            return False
        lines = normalise(number, raw)
        if len(lines) != 1:
            return False
        line = lines[0]
        low = line.text.lower()
        rules = self._rules_starting(line.text, [t for t in triggers if t in low])
        if not rules or self._claimed_until.get(line.rank, 0) >= number:
            return False
        # the rule matching tries first (see RuleMatching._match): if it matches, it is the one
        pack = self.pack.rules
        index = min(rules, key=lambda i: match_order(pack[i]))
        if index not in self._folds_from_line:
            return False
        rule = pack[index]
        found = self._search(rule, line, [], clauses=False)
        if found is None or None in found[0].groupdict().values():
            return False
        m, text, end_line, figures = found
        if not self._same_failure(rule, figures, line, message_of(m, text), end_line):
            return False  # (nothing changed: a first occurrence is read as every line is)
        self._claimed_until[line.rank] = max(self._claimed_until.get(line.rank, 0), end_line)
        self._note_read(line)
        self._note_fold(line, rule, m, text, figures, end_line, -1)
        return True

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
        self, rule: CompiledRule, figures: dict[str, Any], anchor: Line, message: str, end_line: int,
        copies: int = 1,
    ) -> bool:
        """Merge this match into a finding it repeats; ``True`` when it did.

        The same failure is told several times: by every rank, by the process that logs it and
        again by the traceback that re-raises it, by vLLM's wrappers quoting the worker's error,
        and by a vLLM message that explains a PyTorch one. It is the same failure when it is the
        same rule with the same figures in the same run (:meth:`_same_run`), or, within ``SAME_FAILURE_LINES``, the same rule from
        another rank, or a message whose figures agree with it (same kind, or a shared figure).
        A memory warning repeated any number of times stays one finding with its latest figures.
        ``copies``: the copies of the line this match stands for (see :mod:`oomdoctor.scan.runs`).
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
                f.occurrences += copies
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
                    f.rule, f.kind, f.engine, f.title, f.message = rule.id, r.kind, r.engine, r.title_in(current_lang()), message
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
