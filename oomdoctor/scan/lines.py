"""Line assembly and windows: bytes in, candidate lines read, phase evidence set aside."""

from __future__ import annotations

from collections import deque
from typing import Any

from oomdoctor import regex_cache
from oomdoctor.newlines import count_newlines
from oomdoctor.reader import Line, normalise, only_cut_by_normalise, only_cut_in
from oomdoctor.rulepack import CompiledRule
from oomdoctor.rulepack.loader import REGEX_TIMEOUT
from oomdoctor.scan.matching import RuleTimeout, _Pending
from oomdoctor.scan.state import (
    AFTER_LINES,
    BEFORE_LINES,
    DEFER_BYTES,
    DEFER_KEEP,
    EVIDENCE_PIECE,
    LEAD_LINES,
    PASTE_BYTES,
    TAIL_SPANS,
    ScanState,
)

_FRAME = regex_cache.compile(
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
_VLLM_PROCESS = regex_cache.compile(
    r"(?:VllmWorkerProcess|VllmWorker rank=\d+|EngineCore(?:_\w+)?|DPEngineCore_\d+|APIServer(?:_\d+)?"
    r"|Worker(?:_(?:DP|PP|TP|EP)\d+)+|RayWorkerWrapper) pid="
)


def _search_any(patterns: list[Any], text: str) -> bool:
    """Whether one of ``patterns`` is found in ``text``; a pattern that matches moves to the front
    (all of a phase's markers mean the same, so their order does not change the answer)."""
    for i, pat in enumerate(patterns):
        if pat.search(text, timeout=REGEX_TIMEOUT):
            if i:
                patterns.insert(0, patterns.pop(i))
            return True
    return False


def _lines_before(block: bytes, lo: int, stop: int, number: int, most: int) -> list[tuple[int, bytes]]:
    """Up to ``most`` lines of ``block[lo:stop]`` (``stop`` at a line start) that end right before
    ``stop``, the nearest first, as ``(line number, bytes)``: the one ending there is ``number``."""
    out: list[tuple[int, bytes]] = []
    end = stop - 1
    while end >= lo and len(out) < most:
        begin = block.rfind(b"\n", lo, end) + 1 or lo
        out.append((number, block[begin:end]))
        end, number = begin - 1, number - 1
    return out


class LineAssembly(ScanState):
    """Feed blocks of bytes; read the candidate lines the prefilters find (and the look-ahead
    after a trigger); keep the recent lines, frames, markers and progress lines; set phase
    evidence aside and read it lazily; queue rule candidates for :class:`~oomdoctor.scan.matching.RuleMatching`."""

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
        starts = getattr(self._prefilter, "line_starts", None)  # counted by a worker (pool.py)
        self._counted = (block, starts(block) if starts is not None else None)
        count = self._newlines
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
        absorbing = between is not None and self._main_mask is not None
        frame_marks = self._frame_marks
        pos, line = lo, first  # the next line not yet processed or skipped
        for start, end, mask in spans:
            if absorbing and not owe and not self._pending and not self._open and self._absorbs(mask):
                raw = block[start:end]
                if any(m in raw for m in frame_marks) and (clean or only_cut_by_normalise(raw, ascii_needles)):
                    continue  # left in the stretch of evidence around it (see _absorbs)
            if owe > 0:
                pos, line, owe = ahead(pos, line, owe, start)
            while between is not None and pos < start:  # phase evidence between candidates
                pos, line, owe = between(block, lo, pos, start, line)
                if owe > 0:
                    pos, line, owe = ahead(pos, line, owe, start)
            if pos < start:
                line += count(block, pos, start)
            has_rule = False
            raw = block[start:end]
            if between is not None:
                mask |= self._ev_mask_of(raw) << self._ev_shift
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
            line += count(block, pos, n)
        self._keep_last_lines(block, lo, n, line)
        self._need_lookahead = owe
        self._splitter.advance(line - first)
        self._last_line = line - 1
        self._evaluate_pending(final=False)
        self._age_open(final=False)

    def _newlines(self, block: bytes, a: int, b: int) -> int:
        """How many newlines ``block[a:b]`` holds: from a worker's counts when both are line
        starts it counted at (the bounds of the stretches between candidates), else counted."""
        counted, known = self._counted
        if known is not None and counted is block:
            x, y = known.get(a), known.get(b)
            if x is not None and y is not None:
                return y - x
        return count_newlines(block, a, b)

    def _process(self, line: Line, mask: int = 0) -> bool:
        """Match one logical line; True when it holds a rule trigger (it then needs look-ahead).

        ``mask``: the prefilter's needles found on the line (0: unknown, try every trigger)."""
        text = line.text
        low = text.lower()
        # which triggers does the line hold? (one pass over the pack's literals, then an index)
        if not mask:
            mask = self._text_mask(low)
        present = [t for t in (self._triggers_for(mask) if mask > 0 else () if mask == 0 else self._all_triggers)
                   if t in low]
        rule_idx: set[int] = set()
        for t in present:
            rule_idx.update(self._rule_by_trigger.get(t, ()))
        if rule_idx and (self._deferred or self._tail):
            # a failure may start here: what it needs of the deferred lines before it is read
            # first (a line that cannot start one does not need them: they wait)
            self._resolve_deferred(line.number)
        if self._open:  # findings the lines before this one closed, however the input was cut
            self._age_open(final=False, last_line=line.number - 1)
        self._recent.append(line)
        if line.rank is not None and _VLLM_PROCESS.match(line.rank):
            self._collector.vote_engine("vllm", line.number)
        # traceback frames
        if _TRACEBACK in text:
            self._traceback_at.setdefault(line.rank, deque(maxlen=64)).append(line.number)
        if "file " in low or ".py in " in low or '", line ' in low:
            m = _FRAME.search(text)
            if m:
                # a frame counts by its function's name, and by its file's package ("%phase")
                for func in (m["func"], *self._path_phases(m["path"] or "")):
                    self._frames.append((line.number, func, line.rank))
                    for o in self._open:
                        if o.line < line.number <= o.line + AFTER_LINES:
                            if o.rank == line.rank or line.rank in o.merged_ranks:
                                o.frames.append(func)
                            else:
                                o.foreign.append(func)
        phases = self._phases_always
        contexts: list[Any] = []
        rules: list[CompiledRule] = []
        if present:
            ph_idx: set[int] = set()
            ctx_idx: set[int] = set()
            for t in present:
                ph_idx.update(self._phase_by_trigger.get(t, ()))
                ctx_idx.update(self._ctx_by_trigger.get(t, ()))
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
            groups = m.groupdict()
            # a package list names its engine in the text ("vllm==0.6.3"): weaker than a rule's engine
            listed = groups.pop("engine", None)
            engine = self._collector.list_engine(listed, line.number) if listed else ctx.rule.engine
            if groups.get("engine_version") and not listed:  # a start banner, not a pasted package list
                self._run_start = line.number
            self._collector.apply_groups(groups, ctx.rule.parser, ctx.rule.units, engine, self._line_base + line.number)
            if groups.get("oom_recovered"):  # the failure just before was caught and retried
                self._recovered_at.append((line.number, line.rank))
        # rule candidates
        if rules:
            self._lead_from_block(line)
            self._pending.append(_Pending(line, rules, self.source))
        self._evaluate_pending(final=False)
        return bool(rules)

    def _text_mask(self, low: str) -> int:
        """The needles the lower-cased text of a line holds (a line whose mask the prefilter could
        not give: normalising changed it), from one prefilter call per kind of needle instead of
        a test of every trigger; -1 when the prefilter cannot say (one built for other needles).

        Exact: ``low`` is lower-cased, so ASCII case folding finds in its UTF-8 exactly the
        (lower-case) needles that are substrings of it."""
        main = self._main_mask
        ev = getattr(self._ev_prefilter, "mask", None)  # optional (see Prefilter)
        if not self._masks_ok or main is None or (ev is None and self._ev_prefilter is not None):
            return -1
        data = low.encode("utf-8", "surrogatepass")
        mask: int = main(data)
        if ev is not None:
            mask |= ev(data) << self._ev_shift
        return mask

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
        a block ends) leaves that line, found searching backwards, and its last ``BEFORE_LINES``
        lines as a raw span of the *tail*, searched for evidence only when something reads the
        deferred lines: a found line supersedes every line deferred before it. A short stretch
        (the line a chunk boundary cut; a pipe's small reads) joins the tail as a span of its own,
        and a span that falls ``BEFORE_LINES`` behind leaves only its latest progress line."""
        lines = self._newlines(block, a, b)
        end = number + lines
        if lines > BEFORE_LINES:
            near = b - 1
            rfind = block.rfind
            for _ in range(BEFORE_LINES):
                near = rfind(b"\n", a, near)
            near += 1
            self._read_periodic(block, a, near, end - BEFORE_LINES)
            latest = self._latest_progress(block, a, near, end - BEFORE_LINES)
            if latest is not None:
                for span in self._tail:  # (older: what they hold of periodic lines is read first)
                    self._read_periodic(span[0], span[1], span[2], span[4])
                self._tail = []
                self._supersede(latest)
            else:  # the tail is as far behind: only its latest progress line may be read
                while self._tail:
                    self._retire_oldest()
            self._tail.append((block, near, b, end - BEFORE_LINES, end))
            return end
        if a < b:
            self._tail.append((block, a, b, number, end))
        while len(self._tail) > 1 and end - self._tail[0][4] >= BEFORE_LINES:
            self._retire_oldest()
        if len(self._tail) > TAIL_SPANS:
            self._expand_tail(1)
        return end

    def _latest_progress(self, block: bytes, a: int, hi: int, number: int) -> tuple[int, bytes, int] | None:
        """The latest progress line of the evidence in ``block[a:hi]`` (line ``number`` at
        ``hi``), searched backwards in pieces, as ``(line number, bytes, mask)``; or None."""
        assert self._progress_pf is not None
        shift = self._ev_shift
        ev_mask_of = self._ev_mask_of if self._progress_pf is not self._ev_prefilter else None
        top, width = hi, EVIDENCE_PIECE // 8  # (the latest is most often among the last lines)
        while hi > a:
            cut = (block.rfind(b"\n", a, hi - width) + 1 or a) if hi - width > a else a
            for s, e, m in reversed(self._progress_pf.candidates(block, cut, hi)):
                raw = block[s:e]
                if ev_mask_of is not None:  # (a prefilter of the progress needles alone)
                    m = ev_mask_of(raw)
                mask = self._raw_mask(raw, m << shift)
                if self._may_progress(mask) and any(self._is_progress(ln, mask) for ln in normalise(0, raw)):
                    # counted back from ``top`` now: a stretch is counted once, not twice
                    return number - count_newlines(block, s, top), raw, self._read_mask(raw, m)
            hi, width = cut, width * 64  # (then the rest: a stretch without one is searched in two calls)
        return None

    def _read_periodic(self, block: bytes, a: int, hi: int, number: int) -> None:
        """Read the latest periodic lines of ``block[a:hi]`` (line ``number`` at ``hi``), a stretch
        about to be left unread: for each periodic context rule whose needle the stretch holds, the
        lines searching backwards until every group it reads has been read once (most often the
        last line of its kind). Values go to the collector with their lines' positions, so reading
        them out of order leaves what reading in order leaves (see ContextCollector.apply_groups)."""
        if self._presence is None or hi <= a:
            return
        # the main scan of the block noted where each periodic needle first is (hyperscan);
        # otherwise a pass of its own over the stretch
        known = getattr(self._prefilter, "present_in", None)
        present: int | None = None
        if known is not None and getattr(self._prefilter, "present_literals", None) == self._presence.literals:
            present = known(block, a, hi)
        if present is None:
            present = self._presence.which(block, a, hi)
        if not present:
            return
        order = list(self._periodic_ctx)
        want = sum(order[k] for k in range(len(order)) if present >> k & 1)
        assert self._periodic_pf is not None
        seen: dict[int, set[str]] = {}
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
                    return
            hi, width = cut, width * 64

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
        """Drop the tail's oldest span, ``BEFORE_LINES`` behind: only its latest progress line
        can still be read, and it supersedes the lines deferred before it."""
        block, a, b, _, end = self._tail.pop(0)
        self._read_periodic(block, a, b, end)
        latest = self._latest_progress(block, a, b, end)
        if latest is not None:
            self._supersede(latest)

    def _expand_tail(self, spans: int | None = None) -> None:
        """Defer the evidence lines of the tail's spans (see :meth:`_set_aside`), in order: all
        of them, or the oldest ``spans``."""
        if not self._tail:
            return
        assert self._ev_prefilter is not None
        cut = len(self._tail) if spans is None else spans
        todo, rest = self._tail[:cut], self._tail[cut:]
        self._tail = []  # (deferring reads the tail first: it is empty while these are deferred)
        for block, pos, b, number, _ in todo:
            for s, e, m in self._ev_prefilter.candidates(block, pos, b):
                number += count_newlines(block, pos, s)
                pos = s
                raw = block[s:e]
                self._defer(number, raw, self._read_mask(raw, m))
        self._tail = rest + self._tail

    def _path_phases(self, path: str) -> tuple[str, ...]:
        """``"%phase"`` for each phase whose packages hold the file at ``path`` (a traceback
        repeats its files: the answers are kept)."""
        phases = self._phases_of_path.get(path)
        if phases is None:
            if len(self._phases_of_path) >= 4096:
                self._phases_of_path.clear()
            unix = path.replace("\\", "/")
            phases = tuple("%" + ph.rule.phase for ph in self.pack.phases if any(p in unix for p in ph.paths))
            self._phases_of_path[path] = phases
        return phases

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
        if self._tail:
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
        low = line.text.lower()
        phases = set(self._phases_always)
        if not mask:
            mask = self._text_mask(low)
        for t in self._triggers_for(mask) if mask > 0 else () if mask == 0 else self._all_triggers:
            if t in low:
                phases.update(self._phase_by_trigger.get(t, ()))
        return any(_search_any(self._progress_patterns[i], line.text) for i in sorted(phases))

    def _keep_last_lines(self, block: bytes, lo: int, n: int, following: int) -> None:
        """Keep the last ``LEAD_LINES`` lines of ``block[lo:n]`` (complete lines; line
        ``following`` comes next), for a trigger at the start of the next block to find its lead
        lines as it would in one block (:meth:`_lead_from_block`)."""
        self._last_lines.extend(reversed(_lines_before(block, lo, n, following - 1, LEAD_LINES)))

    def _lead_from_block(self, line: Line) -> None:
        """Put the ``LEAD_LINES`` lines above a rule's trigger line into the recent lines when the
        prefilter skipped them (they hold no trigger): a message wrapped before its trigger
        starts there (see :meth:`_lead_lines`)."""
        block, lo, start, number = self._here
        if number != line.number or not self._recent or self._recent[-1] is not line:
            return
        known = {ln.number for ln in self._recent}
        # the lines above it in this block, or in the blocks before (it may start this one)
        above = dict(self._last_lines)
        above.update(_lines_before(block, lo, start, number - 1, LEAD_LINES))
        lead: list[Line] = []
        for n in range(number - 1, number - LEAD_LINES - 1, -1):
            raw = above.get(n)
            if raw is None or n in known:
                break
            lead[:0] = normalise(n, raw)
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
