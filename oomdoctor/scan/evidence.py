"""Phase evidence set aside: lines that can only tell a phase or a periodic fact, read lazily.

vLLM's throughput lines, a trainer's loss dicts, SGLang's batch lines, a line that only names its
engine: printed all the time, needed only as the latest before a failure, or as a marker near
one. While no failure is pending or open they are not read where they stand: a stretch of them is
set aside (its last ``BEFORE_LINES`` lines as a raw span, and before that only its latest progress
line and its latest periodic lines, looked for later and newest stretch first), and read when a
line that may start a failure needs them (:meth:`EvidenceAside._resolve_deferred`). Where the
source can be read again (a plain file), a stretch leaving memory is not searched for its progress
line at all unless a failure whose step is not known asks (:meth:`EvidenceAside._far_progress`).
What reading them later leaves is what reading every line as it came leaves
(``tests/test_latest_wins.py``, ``tests/test_far_progress.py``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from oomdoctor.newlines import count_newlines
from oomdoctor.reader import (
    MAX_LINE_BYTES,
    Line,
    cut_long_lines,
    last_lines_start,
    normalise,
    only_cut_by_normalise,
)
from oomdoctor.rulepack.loader import REGEX_TIMEOUT
from oomdoctor.scan.state import (
    BEFORE_LINES,
    DEFER_BYTES,
    DEFER_KEEP,
    EVIDENCE_PIECE,
    FAR_MARK,
    FAR_PIECE,
    TAIL_SPANS,
    UNSEARCHED_BYTES,
    UNSEARCHED_SPANS,
    FarSpans,
    ScanState,
    ray_repeat,
)


def search_any(patterns: list[Any], text: str) -> bool:
    """Whether one of ``patterns`` is found in ``text``; a pattern that matches moves to the front
    (all of a phase's markers mean the same, so their order does not change the answer)."""
    for i, pat in enumerate(patterns):
        if pat.search(text, timeout=REGEX_TIMEOUT):
            if i:
                patterns.insert(0, patterns.pop(i))
            return True
    return False


class EvidenceAside(ScanState):
    """Set phase evidence and periodic context lines aside, and read what of them a failure (or
    the end) needs: the latest progress line, the latest periodic lines, and the lines near a
    line that may start a failure."""

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
            # (a frame's own triggers are not among them: a frame alone names none)
            ok = all(
                (t in self._phase_by_trigger and t not in self._ctx_by_trigger and t not in self._rule_by_trigger)
                or t in self._periodic_triggers
                or t in self._vote_triggers
                for t in self._triggers_for(mask)
            )
            self._deferrable_by_mask[mask] = ok
        if not ok:
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
        Otherwise they are set aside (:meth:`_set_aside`): of those more than ``BEFORE_LINES``
        before the next line read, only the latest progress line can ever be read
        (:meth:`_resolve_deferred`), so only that one is looked for, searching backwards, and
        the last ``BEFORE_LINES`` lines are kept as a raw span, read only if a line after them
        needs them. A line that normalising changes (a JSON record, ANSI escapes) is asked
        about its normalised text when it is read: the prefilter's answer for its bytes is
        not used for it. Returns where reading stopped, its line number and the look-ahead
        owed (non-zero when a line read held a rule trigger)."""
        while a < b:
            if self._pending or self._open_before(number):
                a, number, owe = self._read_evidence(block, lo, a, b, number, until_calm=True)
                if owe:
                    return a, number, owe
                continue
            if not self._ascii_needles and not block[a:b].isascii():
                # a needle that is not ASCII: the prefilter's answers need each line's own check
                return self._read_evidence(block, lo, a, b, number, until_calm=False)
            return b, self._set_aside(block, a, b, number), 0
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
        pos = a
        while pos < b:
            piece = b if b - pos <= EVIDENCE_PIECE else block.find(b"\n", pos + EVIDENCE_PIECE, b) + 1 or b
            for s, e, m in self._ev_prefilter.candidates(block, pos, piece):
                number += count_newlines(block, pos, s)
                pos = s
                if until_calm and not (self._pending or self._open_before(number)):
                    return s, number, 0
                raw = block[s:e]
                mask = self._read_mask(raw, m)
                self._here = (block, lo, s, number)
                has_rule = False
                for ln in normalise(number, raw):
                    has_rule = self._process(ln, mask) or has_rule
                pos, number = min(e + 1, b), number + 1
                if has_rule:
                    return pos, number, self._lookahead
            number += count_newlines(block, pos, piece)
            pos = piece
        return b, number, 0

    def _set_aside(self, block: bytes, a: int, b: int, number: int) -> int:
        """Set aside the evidence of ``block[a:b]`` (no failure pending or open), line
        ``number`` at ``a``; returns the line number at ``b``.

        Of the lines more than ``BEFORE_LINES`` before the next line read, only the latest
        progress line is ever read (:meth:`_resolve_deferred`). So a long stretch (most end where
        a block ends) leaves its last ``BEFORE_LINES`` lines as a raw span of the *tail*,
        searched for evidence only when something reads the deferred lines, and the lines
        before them as an *unsearched* span: its latest progress line is looked for only if no
        later span has one (:meth:`_search_unsearched`). A short stretch (the line a chunk
        boundary cut; a pipe's small reads) joins the tail as a span of its own, and a span
        that falls ``BEFORE_LINES`` behind becomes an unsearched one. The latest periodic lines
        of the unsearched spans are read with their latest progress line."""
        lines = self._newlines(block, a, b)
        end = number + lines
        if lines > BEFORE_LINES:
            near = last_lines_start(block, a, b, BEFORE_LINES)
            while self._tail:
                self._retire_oldest()
            self._leave_unsearched(block, a, near, end - BEFORE_LINES, self._block_base)
            self._tail.append((block, near, b, end - BEFORE_LINES, end, self._block_base))
            return end
        if a < b:
            self._tail.append((block, a, b, number, end, self._block_base))
        while len(self._tail) > 1 and end - self._tail[0][4] >= BEFORE_LINES:
            self._retire_oldest()
        if len(self._tail) > TAIL_SPANS:
            self._expand_tail(1)
        return end

    def _latest_progress(self, block: bytes, a: int, hi: int, number: int) -> tuple[int, bytes, int] | None:
        """The latest progress line of the evidence in ``block[a:hi]`` (line ``number`` at
        ``hi``), searched backwards in pieces, as ``(line number, bytes, mask)``; or None."""
        found = self._latest_progress_at(block, a, hi)
        if found is None:
            return None
        s, raw, mask = found
        # counted back from ``hi`` now: a stretch is counted once, not twice
        return number - count_newlines(block, s, hi), raw, mask

    def _latest_progress_at(self, block: bytes, a: int, hi: int) -> tuple[int, bytes, int] | None:
        """:meth:`_latest_progress`, the line given by where it starts in ``block``."""
        assert self._progress_pf is not None
        shift = self._ev_shift
        ev_mask_of = self._ev_mask_of if self._progress_pf is not self._ev_prefilter else None
        width = EVIDENCE_PIECE // 8  # (the latest is most often among the last lines)
        while hi > a:
            cut = (block.rfind(b"\n", a, hi - width) + 1 or a) if hi - width > a else a
            for s, e, m in reversed(self._progress_pf.candidates(block, cut, hi)):
                raw = block[s:e]
                if ev_mask_of is not None:  # (a prefilter of the progress needles alone)
                    m = ev_mask_of(raw)
                mask = self._raw_mask(raw, m << shift)
                if self._may_progress(mask) and any(self._is_progress(ln, mask) for ln in normalise(0, raw)):
                    return s, raw, self._read_mask(raw, m)
            hi, width = cut, width * 64  # (then the rest: a stretch without one is searched in two calls)
        return None

    def _far_progress(self) -> None:
        """For a failure whose step is not known yet: the latest progress line before it may be
        in the far spans (dropped unsearched, see :meth:`_search_unsearched`). Unless a later
        one is known, read them again, newest first, until one is found, and note its phases as
        reading it in place would have. Either way they are done with: nothing in them can be
        later than what was found. A source that changed since (other bytes at either end, or
        fewer) is not read: no line from it is taken."""
        far, self._far = self._far, None
        read = self._reread
        if far is None or read is None or any(n >= far.anchors[-1][1] for n, _ in self._progress):
            return
        try:
            found = self._far_search(read, far)
            if found is None:
                return
            end, lines, raw, mask = found
            # numbered from the next line start whose number is known (not counted from the end)
            nxt, number = far.anchors[bisect.bisect_left(far.anchors, (end, -1))]
            between = read(end, nxt)
        except OSError:
            return
        if len(between) != nxt - end:
            return
        number -= count_newlines(between) + lines
        for ln in normalise(number, raw):
            if not ray_repeat(ln.text):
                self._progress.extend((ln.number, phase) for phase in self._progress_phases(ln, mask))

    def _far_search(self, read: Callable[[int, int], bytes], far: FarSpans) -> tuple[int, int, bytes, int] | None:
        """The latest progress line of the far spans, read again backwards in pieces of
        ``FAR_PIECE``, lines cut as they were when fed, as ``(the end of the piece it was found
        in, the lines from it to there, bytes, mask)``; or None."""
        lo, hi = far.start, far.end
        end = hi
        while end > lo:
            start = max(lo, end - FAR_PIECE)
            data = read(start, end)
            k = min(len(data), len(far.tail), len(far.head))  # (a short piece holds less of them)
            if len(data) != end - start or (end == hi and data[len(data) - k :] != far.tail[len(far.tail) - k :]) or (
                start == lo and data[:k] != far.head[:k]
            ):
                return None
            cut = 0 if start == lo else data.find(b"\n") + 1
            if start > lo and cut == len(data):  # (its one newline ends it) a line longer than a piece
                begin = self._line_start(read, lo, start)
                if begin is None:
                    return None
                # (as when it was fed: its first ``MAX_LINE_BYTES`` bytes)
                line = read(begin, min(end, begin + MAX_LINE_BYTES)).partition(b"\n")[0] + b"\n"
                found = self._latest_progress_at(line, 0, len(line))
                if found is not None:
                    return end, 1, found[1], found[2]
                end = begin
                continue
            data = cut_long_lines(data, cut)
            found = self._latest_progress_at(data, cut, len(data))
            if found is not None:
                return end, count_newlines(data, found[0], len(data)), found[1], found[2]
            end = start + cut
        return None

    @staticmethod
    def _line_start(read: Callable[[int, int], bytes], lo: int, pos: int) -> int | None:
        """Where the line holding the source's byte ``pos - 1`` begins (not before ``lo``),
        searching backwards in pieces; None if the source is shorter than it was."""
        while pos > lo:
            start = max(lo, pos - FAR_PIECE)
            data = read(start, pos)
            if len(data) != pos - start:
                return None
            nl = data.rfind(b"\n")
            if nl >= 0:
                return start + nl + 1
            pos = start
        return lo

    def _periodic_wanted(self, block: bytes, a: int, hi: int) -> int:
        """The periodic needles (bits of a whole mask) ``block[a:hi]`` may hold: from the main
        scan's note of where each first is in the block it scanned last (hyperscan), else from
        a pass of its own over the stretch."""
        if self._presence is None or hi <= a:
            return 0
        known = getattr(self._prefilter, "present_in", None)
        present: int | None = None
        if known is not None and getattr(self._prefilter, "present_literals", None) == self._presence.literals:
            present = known(block, a, hi)
        if present is None:
            present = self._presence.which(block, a, hi)
        if not present:
            return 0
        order = list(self._periodic_ctx)
        return sum(order[k] for k in range(len(order)) if present >> k & 1)

    def _read_periodic(self, block: bytes, a: int, hi: int, number: int, want: int, seen: dict[int, set[str]]) -> int:
        """Read the latest periodic lines of ``block[a:hi]`` (line ``number`` at ``hi``) for the
        needles ``want``: for each periodic context rule of those, the lines searching backwards
        until every group it reads has been read once (``seen``: the groups each has read, in
        later lines too). Returns the needles still wanted. Values go to the collector with their
        lines' positions, so reading them out of order leaves what reading in order leaves (see
        ContextCollector.apply_groups)."""
        assert self._periodic_pf is not None
        top, width = hi, EVIDENCE_PIECE // 8
        while hi > a and want:
            cut = (block.rfind(b"\n", a, hi - width) + 1 or a) if hi - width > a else a
            for s, e, _ in reversed(self._periodic_pf.candidates(block, cut, hi)):
                raw = block[s:e]
                mask = self._read_mask(raw, self._ev_mask_of(raw))
                if mask and not mask & want:
                    continue
                want = self._read_periodic_line(number - count_newlines(block, s, top), raw, mask, want, seen)
                if not want:
                    return 0
            hi, width = cut, width * 64
        return want

    def _read_periodic_lines(self, lines: list[tuple[int, bytes, int]]) -> None:
        """:meth:`_read_periodic` for deferred lines about to be dropped, ``(number, bytes, mask)``
        in order (mask 0: its text is asked)."""
        if not self._periodic_bits:
            return
        want = 0
        for _, _, mask in lines:
            want |= mask & self._periodic_bits if mask else self._periodic_bits
        seen: dict[int, set[str]] = {}
        for number, raw, mask in reversed(lines):
            if not want:
                return
            if mask and not mask & want:
                continue
            want = self._read_periodic_line(number, raw, mask, want, seen)

    def _read_periodic_line(self, number: int, raw: bytes, mask: int, want: int, seen: dict[int, set[str]]) -> int:
        """Read the periodic contexts of one line (``mask``: its needles; 0: ask its text) that
        still want a value; return the needles still wanted (``seen``: each context rule's groups
        read so far)."""
        for ln in normalise(number, raw):
            low = ln.text.lower()
            line_mask = mask or self._text_mask(low)
            found = line_mask & want if line_mask > 0 else want
            for bit in self._periodic_ctx:
                if not found & bit:
                    continue
                for i in self._periodic_ctx[bit]:
                    ctx = self.pack.contexts[i]
                    got = seen.setdefault(i, set())
                    if got >= self._periodic_groups[i] or not any(t in low for t in ctx.triggers):
                        continue
                    self._timing = f'{ctx.source}: context "{ctx.rule.id}": pattern'
                    m = ctx.pattern.search(ln.text, timeout=REGEX_TIMEOUT)
                    if m is None:
                        continue
                    if ctx.rule.engine:
                        self._collector.vote_engine(ctx.rule.engine, number)
                    if ctx.rule.product:
                        self._collector.vote_product(ctx.rule.product, number)
                    groups = m.groupdict()
                    self._collector.apply_groups(groups, ctx.rule.parser, ctx.rule.units, ctx.rule.engine,
                                                 self._line_base + number)
                    got.update(name for name, value in groups.items() if value is not None)
        for bit, idx in self._periodic_ctx.items():
            if want & bit and all(seen.get(i, set()) >= self._periodic_groups[i] for i in idx):
                want &= ~bit
        return want

    def _supersede(self, latest: tuple[int, bytes, int]) -> None:
        """Defer ``latest``, a progress line more than ``BEFORE_LINES`` before any line still to
        be read, in place of every line deferred before it (none of those can be read now, but
        the latest periodic lines among them)."""
        self._read_periodic_lines(self._deferred)
        self._deferred[:] = [latest]
        self._deferred_bytes = len(latest[1])

    def _retire_oldest(self) -> None:
        """Move the tail's oldest span, ``BEFORE_LINES`` behind, to the unsearched spans: only
        its latest progress line and its latest periodic lines can still be read."""
        block, a, b, _, end, base = self._tail.pop(0)
        self._leave_unsearched(block, a, b, end, base)

    def _leave_unsearched(self, block: bytes, a: int, hi: int, number: int, base: int) -> None:
        """Add ``block[a:hi]`` (line ``number`` at ``hi``; the block at ``base`` in the source, or
        -1) to the unsearched spans, with the periodic needles it may hold; search them when
        they are more than ``UNSEARCHED_SPANS`` or keep more than ``UNSEARCHED_BYTES`` of blocks
        alive."""
        if hi <= a:
            return
        spans = self._unsearched
        if not spans or spans[-1][0] is not block:
            self._unsearched_bytes += len(block)
        spans.append((block, a, hi, number, self._periodic_wanted(block, a, hi), base))
        if len(spans) > UNSEARCHED_SPANS or self._unsearched_bytes > UNSEARCHED_BYTES:
            self._search_unsearched(leaving=True)

    def _search_unsearched(self, leaving: bool = False) -> None:
        """Read what the unsearched spans can still give (all of them later than every line
        deferred, earlier than the tail), newest span first, then drop them: the latest
        progress line, which supersedes the deferred lines, and the latest periodic lines.
        Searching each span as it came would leave the same: each progress line found
        supersedes the one before, and the collector keeps the latest periodic values.

        ``leaving``: they are dropped only to bound memory, nothing needs them yet. Where the
        source can be read again, the spans are then not searched for progress but join the far
        spans, read again only if a failure asks (:meth:`_far_progress`): in a log without
        progress lines, searching every stretch for one is a second pass over all of it."""
        spans, self._unsearched, self._unsearched_bytes = self._unsearched, [], 0
        want = 0
        for span in spans:
            want |= span[4]
        seen: dict[int, set[str]] = {}
        progress = True  # (still looked for)
        far = leaving and self._reread is not None
        ends: list[tuple[int, int]] = []  # of the spans joining the far ones, newest first
        tail = b""
        oldest: tuple[bytes, int, int] = (b"", 0, 0)  # (block, start, base) of the oldest of them
        for block, a, hi, number, holds, base in reversed(spans):
            if progress:
                if far and base >= 0:
                    if not ends:
                        tail = block[max(a, hi - FAR_MARK) : hi]
                    ends.append((base + hi, number))
                    oldest = (block, a, base)
                else:
                    latest = self._latest_progress(block, a, hi, number)
                    if latest is not None:
                        self._supersede(latest)
                        progress = False
                        self._far = None  # (all before it)
            wanted = want & holds
            if wanted:
                want = want & ~wanted | self._read_periodic(block, a, hi, number, wanted, seen)
            if not (progress or want):
                break
        if ends:
            block, a, base = oldest
            self._join_far(base + a, block[a : a + FAR_MARK], ends[::-1], tail)

    def _join_far(self, start: int, head: bytes, ends: list[tuple[int, int]], tail: bytes) -> None:
        """Join spans from the source's byte ``start`` on (``head``: their first bytes; ``ends``
        and ``tail``: see :meth:`FarSpans.add`) to the far spans, as one range with those before
        them: what lies between was read, or its progress lines are older than one read
        (searching it again finds nothing later)."""
        if self._far is None:
            self._far = FarSpans(start, head, tail, [])
        self._far.add(ends, tail)

    def _pass_far(self, base: int, size: int, number: int, head: bytes, tail: bytes) -> None:
        """Add the source's bytes ``base:base + size`` (line ``number`` at the end; ``head`` and
        ``tail``: their first and last ``FAR_MARK`` bytes), passed over unread (see
        :meth:`~oomdoctor.scan.lines.LineAssembly.pass_quiet`), to the far spans, as setting
        them aside would in the end: what is before them leaves memory first (the tail's spans
        and the unsearched ones, in that order)."""
        while self._tail:
            self._retire_oldest()
        if self._unsearched:
            self._search_unsearched(leaving=True)
        self._join_far(base, head, [(base + size, number)], tail)

    def _expand_tail(self, spans: int | None = None) -> None:
        """Defer the evidence lines of the tail's spans (see :meth:`_set_aside`), in order: all
        of them, or the oldest ``spans``. The unsearched spans before them are searched first."""
        if self._unsearched:
            self._search_unsearched()
        if not self._tail:
            return
        assert self._ev_prefilter is not None
        cut = len(self._tail) if spans is None else spans
        todo, rest = self._tail[:cut], self._tail[cut:]
        self._tail = []  # (deferring reads the tail first: it is empty while these are deferred)
        for block, pos, b, number, _, _ in todo:
            for s, e, m in self._ev_prefilter.candidates(block, pos, b):
                number += count_newlines(block, pos, s)
                pos = s
                raw = block[s:e]
                self._defer(number, raw, self._read_mask(raw, m))
        self._tail = rest + self._tail

    def _ev_mask_by_needle(self, raw: bytes) -> int:
        """The evidence needles ``raw`` holds (ASCII case folded), for an evidence prefilter
        that cannot say in one call (see ``Prefilter.mask``)."""
        low = raw.lower()
        return sum(1 << i for i, needle in enumerate(self._needles[self._ev_shift :]) if needle in low)

    def _absorbs(self, mask: int) -> bool:
        """Whether a candidate whose bytes hold the main needles ``mask`` is, when it is also a
        traceback frame, evidence like the frames around it: its triggers name no rule and only
        contexts that do nothing but vote for an engine (a frame in ``.../vllm/...``). Such a
        frame (one with ``_frame_marks``: the evidence prefilter finds it) is left in its stretch: read, and its vote counted, only if a failure comes within
        ``BEFORE_LINES`` (a frame far from any failure tells nothing about it)."""
        ok = self._absorbs_by_mask.get(mask)
        if ok is None:
            if len(self._absorbs_by_mask) >= 4096:
                self._absorbs_by_mask.clear()
            found = self._triggers_for(mask)
            ok = bool(found) and all(
                t not in self._rule_by_trigger and (t not in self._ctx_by_trigger or t in self._vote_only) for t in found
            )
            self._absorbs_by_mask[mask] = ok
        return ok

    def _read_mask(self, raw: bytes, ev: int) -> int:
        """The mask of a line read from a stretch of evidence, given the evidence needles ``ev``
        its bytes hold: with its main needles too (a frame :meth:`_absorbs` left there may hold
        some), or 0 (ask the text) when normalising may change what the line holds."""
        mask = self._raw_mask(raw, ev << self._ev_shift)
        if mask and self._main_mask is not None:
            mask |= self._main_mask(raw)
        return mask

    def _raw_mask(self, raw: bytes, mask: int) -> int:
        """``mask``, the needles the prefilter found in a line's bytes, or 0 (ask the text) when
        normalising may change what the line holds."""
        return mask if only_cut_by_normalise(raw, self._ascii_needles) else 0

    def _defer(self, number: int, raw: bytes, mask: int) -> None:
        """Add a line to the deferred ones, settling the older ones when too many are held."""
        if self._tail or self._unsearched:
            self._expand_tail()
        self._deferred.append((number, raw, mask))
        self._deferred_bytes += len(raw)
        if len(self._deferred) >= 2 * DEFER_KEEP or self._deferred_bytes >= DEFER_BYTES:
            self._resolve_deferred(number + 1, keep=DEFER_KEEP)

    def _resolve_deferred(self, upto: int, keep: int = 0) -> None:
        """Read the deferred lines a line at ``upto`` or after may need: those within
        ``BEFORE_LINES`` before it (markers of a failure's step) and, of the older ones, only the
        latest progress line (the step the run had reached). Nothing else in the older ones can
        reach a finding. ``keep``: leave up to that many of the newest ones deferred."""
        self._expand_tail()
        deferred, self._deferred = self._deferred, []
        near = len(deferred)
        while near and deferred[near - 1][0] >= upto - BEFORE_LINES:
            near -= 1
        held = deferred[max(near, len(deferred) - keep) :] if keep else []
        self._read_periodic_lines(deferred[:near])
        for number, raw, mask in reversed(deferred[:near]):
            if not self._may_progress(mask):
                continue
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

    def _may_progress(self, mask: int) -> bool:
        """Whether a line whose bytes hold the needles ``mask`` may be a progress line (0: not
        known): it holds a trigger of a phase that has progress patterns (a traceback frame, say,
        does not), or there are phases that need none."""
        ok = self._progress_by_mask.get(mask)
        if ok is None:
            if len(self._progress_by_mask) >= 4096:
                self._progress_by_mask.clear()
            ok = (
                mask <= 0
                or any(self._progress_patterns[i] for i in self._phases_always)
                or any(
                    self._progress_patterns[i] for t in self._triggers_for(mask) for i in self._phase_by_trigger.get(t, ())
                )
            )
            self._progress_by_mask[mask] = ok
        return ok

    def _is_progress(self, line: Line, mask: int) -> bool:
        """Whether ``line`` matches a progress pattern of a phase whose trigger it holds
        (``mask``: the needles its bytes hold; 0: unknown, asked of its text)."""
        return bool(self._progress_phases(line, mask, first=True))

    def _progress_phases(self, line: Line, mask: int, first: bool = False) -> list[str]:
        """The phases whose progress patterns ``line`` matches, of those whose trigger it holds
        (``mask`` as for :meth:`_is_progress`), in the order reading it notes them; ``first``:
        only the first."""
        low = line.text.lower()
        phases = set(self._phases_always)
        if not mask:
            mask = self._text_mask(low)
        for t in self._triggers_for(mask) if mask > 0 else () if mask == 0 else self._all_triggers:
            if t in low:
                phases.update(self._phase_by_trigger.get(t, ()))
        found: list[str] = []
        for i in sorted(phases):
            if search_any(self._progress_patterns[i], line.text):
                found.append(self.pack.phases[i].rule.phase)
                if first:
                    break
        return found
