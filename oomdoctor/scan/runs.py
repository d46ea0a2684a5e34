"""Runs of one candidate line repeated: read a few copies, count the rest.

A log (or a client of the service) may repeat one candidate line thousands of times in a row:
``CUDA out of memory`` printed by a retry loop, or 4 MiB of it sent on purpose. Each copy read
costs the full rule work (its window, its lead lines, every reading of every rule it names:
~0.3-0.5 ms), so such a run cost ~13 µs of CPU per byte, where an ordinary log costs well under
one. No real log repeats a candidate line more than a few times in a row (the corpus: 4).

So the first :data:`RUN_HEAD` copies of a run are read as every line is, and so are its last
:data:`RUN_TAIL` copies in each block (their windows reach the lines after the run: a message
whose first line repeats, and whose figures follow). The copies between are not read: those the
windows of the copies before them and the lead lines of the copies after them reach are kept
among the recent lines, and what the last copy read did (the finding it folded into, its
figures, the lines its match claimed) is done again for the copies passed over: for each while
a finding is open, then once for about :data:`STRIDE` of them, counting each copy as an
occurrence where reading it would have (a warning repeated: every copy is one). The report is
the one reading every copy gives (tests/test_runs.py checks it on the fixtures); a line costs
~2 µs, not ~0.5 ms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oomdoctor.reader import Line
from oomdoctor.rulepack import CompiledRule
from oomdoctor.scan.state import AFTER_LINES, LEAD_LINES, ScanState

#: copies of a candidate line read in a row before the rest of the run is passed over: enough
#: for a finding the run opened or continued to be closed (``AFTER_LINES`` behind, its
#: look-ahead read), so that passing over the copies after it changes no finding's lines
RUN_HEAD = AFTER_LINES + 64

#: copies read at the end of a run (or of the run's part in a block): more than a rule's window
#: (12 lines at most in the built-in pack) and its lead lines, so that the copies whose window
#: reaches past the run, and the lines after the run, are read as without the fold
RUN_TAIL = 16

#: copies passed over that one copy done again stands for, while no finding is open (fewer than
#: ``SAME_FAILURE_LINES``: each is near the one before)
STRIDE = 256


@dataclass
class LastFold:
    """What reading a candidate line last did: the rule its copy matched, the match, the figures
    read, and how many lines past the anchor the match ran."""

    number: int
    text: str
    rule: CompiledRule
    match: Any
    read: str
    figures: dict[str, Any]
    past: int
    #: lines read after the anchor before it was matched, less one (its window filling): the
    #: open findings were aged to this many lines past it
    lag: int


class RepeatRuns(ScanState):
    """Notice a candidate line repeated (byte for byte, on consecutive lines) and pass over the
    middle of a long run (see the module's text)."""

    def _start_runs(self) -> None:
        self._run_raw, self._run_next, self._run_count, self._run_first = b"", -1, 0, 0
        self._run_line = None
        self._last_fold = None

    def _copies_to_pass(self, block: bytes, start: int, n: int, number: int, raw: bytes) -> int:
        """How many lines from offset ``start`` (line ``number``, holding ``raw``) to pass over as
        copies of the run's line (0: read this one as every line is)."""
        if raw != self._run_raw or number != self._run_next:
            self._run_raw, self._run_count, self._run_first, self._run_line = raw, 1, number, None
            self._run_next = number + 1
            return 0
        self._run_count += 1
        self._run_next = number + 1
        if self._run_count <= RUN_HEAD or self._run_line is None:
            return 0
        unit = raw + b"\n"
        size = len(unit)
        p, copies = start, 0
        while p + size <= n and block.startswith(unit, p):
            p += size
            copies += 1
        skip = copies - RUN_TAIL
        if skip <= 0:
            return 0
        self._pass_copies(number, skip)
        self._run_count += skip - 1
        self._run_next = number + skip
        return skip

    def _pass_copies(self, number: int, skip: int) -> None:
        """Pass over ``skip`` copies of the run's line from line ``number`` on."""
        like = self._run_line
        assert like is not None
        recent = self._recent

        def copy(at: int) -> Line:
            return Line(at, like.text, like.prefix, like.rank, like.blank_end)

        # the copies the pending ones' windows reach: they are matched as without the fold
        head = min(skip, max(self._lookahead, 1))
        for i in range(head):
            recent.append(copy(number + i))
        self._evaluate_pending(final=False)
        done = self._last_fold
        if done is not None and done.text == like.text and done.number >= self._run_first:
            # what the last copy read did, done again: for each copy matched while a finding is
            # open (its last line and its ageing follow each), then for one copy in about STRIDE
            # standing for the ones matched before it (each near the one before, as when read).
            # A match that read into the copies after it claimed them: every (past + 1)th copy is
            # matched, from the first one not claimed.
            period = done.past + 1
            i = 0
            while i < skip:
                claimed = self._claimed_until.get(like.rank, 0)
                if claimed >= number + i:
                    i = claimed + 1 - number
                    continue
                k = 0 if self._open else min(STRIDE // period, (skip - 1 - i) // period)
                at = number + i + k * period
                self._age_open(final=False, last_line=at + done.lag)
                end_line = at + done.past
                self._claimed_until[like.rank] = max(claimed, end_line)
                self._add_finding(done.rule, done.match, done.read, dict(done.figures), copy(at), end_line, k + 1)
                i += k * period + 1
        # the lines above the next copy read (its lead lines)
        for i in range(max(head, skip - LEAD_LINES), skip):
            recent.append(copy(number + i))

    def _note_fold(
        self, anchor: Line, rule: CompiledRule, m: Any, text: str, figures: dict[str, Any], end: int, lag: int
    ) -> None:
        """Remember what reading ``anchor`` did (see :meth:`_pass_copies`)."""
        self._last_fold = LastFold(anchor.number, anchor.text, rule, m, text, dict(figures), end - anchor.number, lag)
