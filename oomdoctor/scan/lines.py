"""Line assembly and windows: bytes in, candidate lines read (phase evidence goes to
:mod:`oomdoctor.scan.evidence`), the lines around a failure kept."""

from __future__ import annotations

from collections import deque
from typing import Any

from oomdoctor import regex_cache
from oomdoctor.newlines import count_newlines
from oomdoctor.reader import Line, normalise, only_cut_by_normalise, only_cut_in
from oomdoctor.rulepack import CompiledRule
from oomdoctor.rulepack.loader import REGEX_TIMEOUT
from oomdoctor.scan.clock import line_time
from oomdoctor.scan.evidence import search_any
from oomdoctor.scan.matching import RuleTimeout, _Pending
from oomdoctor.scan.state import (
    AFTER_LINES,
    LEAD_LINES,
    PASTE_BYTES,
    ScanState,
    ray_repeat,
)

#: a frame line cut before its end ('File "/usr/lib/python3/site-packages/vllm/model_exe'), the rest
#: on the next line: a terminal's hard wrap, which repeats no prefix
_CUT_FRAME = regex_cache.compile(r'(?:^|(?<=\s))File "[^"]*$')
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


#: vLLM's own logger layout, "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d]" with the date as
#: "%m-%d %H:%M:%S" (vllm 0.6.3 logger.py _FORMAT / _DATE_FORMAT; 0.4-0.5 printed no "[" before
#: the file, 0.10 on prints the path below vllm/): a line so prefixed comes from vLLM
#: TensorFlow's glog prefix names its source file ("E tensorflow/compiler/xla/stream_executor/rocm/rocm_driver.cc:606]");
#: JAX's jaxlib names external/xla/..., never tensorflow/
_TF_SOURCE = " tensorflow/"
#: the tag of TensorRT-LLM's Python logger, read as a line prefix (reader.py): "[TRT-LLM] [RANK 2] [E]"
_TRTLLM_LOGGER = "[TRT-LLM]"
_VLLM_LOGGER = regex_cache.compile(
    r"(?:^|[\s)])(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./\-]+\.py:\d+\]$"
)


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
    after a trigger); keep the recent lines, frames, markers and progress lines; hand phase
    evidence to :class:`~oomdoctor.scan.evidence.EvidenceAside`; queue rule candidates for
    :class:`~oomdoctor.scan.matching.RuleMatching`."""

    def feed(self, data: bytes) -> None:
        """Consume a chunk of bytes (any size, any split)."""
        if self._paste is not None:
            if len(self._paste) + len(data) > PASTE_BYTES:
                self._paste = None
            else:
                self._paste += data
        head, lo, hi = self._splitter.feed_spans(data)  # no copy of ``data``
        base, self._fed = self._fed, self._fed + len(data)
        try:
            if head:  # (a line finished across blocks, or lines cut to their cap: not as fed)
                self._block_base = -1
                self._scan_block(self._splitter.line_number + 1, head)
            if hi > lo:
                self._block_base = base
                self._scan_block(self._splitter.line_number + 1, data, lo, hi)
        except TimeoutError:  # a context or phase regex (rule patterns raise RuleTimeout)
            raise RuleTimeout(f"{self._timing}: regex timed out (catastrophic backtracking?)") from None

    def pass_quiet(self, size: int, newlines: int, head: bytes, tail: bytes) -> bool:
        """Pass over the source's next ``size`` bytes without reading them, where feeding them
        would only set them aside: whole lines (``newlines`` of them, none longer than the cap)
        that a worker process found to hold no candidate line and no periodic needle, followed
        by at least ``BEFORE_LINES`` more lines (see :mod:`oomdoctor.prefilter.pool`).

        Feeding them would make them an unsearched span; here they join the far spans at once
        (``head`` and ``tail``: their first and last ``FAR_MARK`` bytes), read again only if a
        failure whose step is not known asks for its latest progress line. That is possible
        only where the source can be read again, at a line start, while no failure is pending
        or open and no look-ahead is owed: returns False (nothing done) otherwise, and the
        caller feeds them."""
        number = self._splitter.line_number + 1
        if (
            self._reread is None
            or self._ev_prefilter is None
            or not self._ascii_needles  # (else a stretch that is not ASCII is read line by line)
            or self._paste is not None
            or self._need_lookahead
            or self._pending
            or not self._splitter.at_line_start
            or self._open_before(number)
        ):
            return False
        self._pass_far(self._fed, size, number + newlines, head, tail)
        self._fed += size
        self._splitter.advance(newlines)
        self._last_line = number + newlines - 1
        self._last_lines.clear()
        return True

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

        tick = self.tick

        def ahead(pos: int, line: int, owe: int, stop: int) -> tuple[int, int, int]:
            """Process the look-ahead lines still owed, up to offset ``stop``: none once no
            rule candidate waits for its window."""
            while owe > 0 and pos < stop and self._pending:
                if tick is not None:
                    tick()
                e = find(b"\n", pos)
                for ln in normalise(line, block[pos:e]):
                    process(ln)
                pos, line, owe = e + 1, line + 1, owe - 1
            return pos, line, owe if self._pending else 0

        between = self._between if self._ev_prefilter is not None else None
        absorbing = between is not None and self._main_mask is not None
        frame_marks = self._frame_marks
        pos, line = lo, first  # the next line not yet processed or skipped
        for start, end, mask in spans:
            if start < pos:
                continue  # a copy of a line passed over (see oomdoctor.scan.runs)
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
            if tick is not None:
                tick()
            copies = self._copies_to_pass(block, start, n, line, raw)
            if copies:  # the middle of a run of one line repeated: passed over (see oomdoctor.scan.runs)
                pos, line = start + copies * (end - start + 1), line + copies
                owe = max(0, owe - copies)
                continue
            if between is not None:
                mask |= self._ev_mask_of(raw) << self._ev_shift
            if not (clean or (masks_ok and only_cut_by_normalise(raw, ascii_needles))):
                mask = 0  # normalising may change what the line holds: look for every trigger
            elif not owe and not self._pending and (
                self._defers(line, raw, mask)
                # (a warning repeated: folded into its finding from its own line)
                or ((repeats := self._repeat_triggers(mask)) is not None and self._fold_repeat(line, raw, repeats))
            ):
                # (a warning folded was read as one line; a line deferred was not read)
                self._run_line = self._recent.last() if self._recent and self._recent.last().number == line else None
                pos, line = end + 1, line + 1
                continue
            self._here = (block, lo, start, line)  # where _lead_from_block finds the lines above
            lines = normalise(line, raw)
            for ln in lines:
                has_rule = process(ln, mask) or has_rule
            self._run_line = lines[0] if len(lines) == 1 else None
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
        rule_idx = self._rules_starting(text, present)
        if rule_idx and (self._deferred or self._tail or self._unsearched) and not rule_idx <= self._phase_fixed:
            # a failure may start here: what it needs of the deferred lines before it is read
            # first (a line that cannot start one does not need them: they wait; nor does one
            # whose rules name their phase: the evidence before it could only tell the phase)
            self._resolve_deferred(line.number)
        if self._open:  # findings the lines before this one closed, however the input was cut
            self._age_open(final=False, last_line=line.number - 1)
        self._note_read(line)
        # traceback frames
        if _TRACEBACK in text:
            self._traceback_at.setdefault(line.rank, deque(maxlen=64)).append(line.number)
        cut, self._cut_frame = self._cut_frame, None
        if "file " in low or ".py in " in low or '", line ' in low:
            m, rank = None, line.rank
            if cut is not None and cut[0] == line.number - 1 and rank in (None, cut[1]):
                # a terminal wrapped the frame line: its rest, without the prefix, on this line
                # (the whole path tells the package; the rest alone, a piece of it)
                m, rank = _FRAME.search(cut[2] + text), cut[1]
            if m is None:
                m, rank = _FRAME.search(text), line.rank
            if m is None and _CUT_FRAME.search(text):
                self._cut_frame = (line.number, line.rank, text)
                rest = self._frame_rest
                if rest is not None and rest[0] == line.number + 1:
                    # its rest was read first (a context trigger in it is read at once, this line
                    # was set aside until a failure came): join them all the same
                    m, rank = _FRAME.search(text + rest[1]), line.rank
            elif line.rank is None and 'File "' not in text and '", line ' in text:
                # perhaps the rest of a wrapped frame line whose head is read later
                self._frame_rest = (line.number, text)
            if m:
                # a frame counts by its function's name, and by its file's package ("%phase")
                for func in (m["func"], *self._path_phases(m["path"] or "", m["func"] or "")):
                    self._frames.append((line.number, func, rank))
                    for o in self._open:
                        if o.line < line.number <= o.line + AFTER_LINES:
                            if o.rank == rank or rank in o.merged_ranks:
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
        # phase markers and progress lines (a Ray deduplicator's late repeat is no progress)
        repeat = ray_repeat(text)
        for i in phases:
            ph = self.pack.phases[i]
            self._timing = f'phase "{ph.rule.phase}"'
            if search_any(self._markers[i], text):
                for o in self._open:
                    if o.line <= line.number <= o.line + AFTER_LINES:
                        o.marker_phases.append(ph.rule.phase)
                self._frames.append((line.number, "@" + ph.rule.phase, line.rank))
            if not repeat and search_any(self._progress_patterns[i], text):
                self._progress.append((line.number, ph.rule.phase))
                stated = line_time(line)
                if stated is not None:
                    self._timed_progress.append((line.number, ph.rule.phase, stated))
        # context lines
        for ctx in contexts:
            self._timing = f'{ctx.source}: context "{ctx.rule.id}": pattern'
            m = ctx.pattern.search(text, timeout=REGEX_TIMEOUT)
            if m is None:
                continue
            if ctx.rule.engine:
                self._collector.vote_engine(ctx.rule.engine, line.number)
            if ctx.rule.product:
                self._collector.vote_product(ctx.rule.product, line.number)
            groups = m.groupdict()
            # a package list names its engine in the text ("vllm==0.6.3"): weaker than a rule's engine
            listed = groups.pop("engine", None)
            engine = self._collector.list_engine(listed, line.number) if listed else ctx.rule.engine
            if groups.get("engine_version") and not listed:  # a start banner, not a pasted package list
                self._run_start = line.number
            self._collector.apply_groups(groups, ctx.rule.parser, ctx.rule.units, engine, self._line_base + line.number)
            if groups.get("oom_recovered"):  # the failure just before was caught and retried
                self._recovered_at.append((line.number, line.rank))
            if groups.get("oom_retried"):  # the failure just before is retried another way
                self._retried_at.append((line.number, line.rank))
        # rule candidates
        if rules:
            self._lead_from_block(line)
            self._pending.append(_Pending(line, rules, self.source))
        self._evaluate_pending(final=False)
        return bool(rules)

    def _note_read(self, line: Line) -> None:
        """Keep a line read among the recent ones; a vLLM process name in its prefix votes for
        vLLM, a product's process name (rules/products.toml ``processes``) for the product."""
        self._recent.append(line)
        if line.prefix.endswith("]") and _VLLM_LOGGER.search(line.prefix):
            self._collector.vote_engine("vllm", line.number)
        if _TF_SOURCE in line.prefix:  # a glog prefix naming TensorFlow's own sources (its vendored XLA too)
            self._collector.vote_engine("tensorflow", line.number)
            self._collector.vote_product("tensorflow", line.number)
        if _TRTLLM_LOGGER in line.prefix:  # TensorRT-LLM's Python logger (tensorrt_llm/logger.py)
            self._collector.vote_engine("tensorrt-llm", line.number)
            self._collector.vote_product("trtllm", line.number)
        if line.rank is not None:
            if _VLLM_PROCESS.match(line.rank):
                self._collector.vote_engine("vllm", line.number)
            if " pid=" in line.rank:  # "(NAME pid=N)": a product's process (rules/products.toml)
                product = self._product_of_process(line.rank)
                if product is not None:
                    self._collector.vote_product(product, line.number)

    def _product_of_process(self, rank: str) -> str | None:
        """The product a prefix's process name names (a product's ``processes``), if one."""
        found = self._process_products.get(rank)
        if found is None:
            name = rank.split(" ", 1)[0].split("_", 1)[0]
            found = next((p.id for p in self.pack.products.values() if name in p.processes), "")
            if len(self._process_products) >= 4096:
                self._process_products.clear()
            self._process_products[rank] = found
        return found or None

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

    def _path_phases(self, path: str, func: str = "") -> tuple[str, ...]:
        """``"%phase"`` for each phase whose packages hold the file at ``path``, or that names
        ``func`` in that file ("PIECE::NAME" frames), and ``"%phase@engine"`` for each that names it
        for one engine only (a traceback repeats its frames: the answers are kept)."""
        key = f"{path}\0{func}"
        phases = self._phases_of_path.get(key)
        if phases is None:
            if len(self._phases_of_path) >= 4096:
                self._phases_of_path.clear()
            unix = path.replace("\\", "/")
            phases = tuple(
                "%" + ph.rule.phase for ph in self.pack.phases
                if any(p in unix for p in ph.paths) or any(f == func and p in unix for p, f in ph.file_frames)
            ) + tuple(
                # "%phase@engine": counts only in a log of that engine (Lifetime._phase_for)
                f"%{ph.rule.phase}@{engine}" for ph in self.pack.phases
                for engine, p, f in ph.engine_frames if f == func and p in unix
            )
            self._phases_of_path[key] = phases
        return phases

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
        if number != line.number or not self._recent or self._recent.last() is not line:
            return
        known = {ln.number for ln in self._recent.numbered(number - LEAD_LINES, number - 1)}
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
            for ln in (*lead, line):
                self._recent.append(ln)

    def _window(self, anchor: Line, size: int) -> list[Line]:
        """The lines after ``anchor`` that may continue its message: the same rank's, and the
        bare lines right after it or after one of those (a terminal wraps a prefixed line into
        pieces without the prefix)."""
        out: list[Line] = []
        limit = anchor.number + max(size, 1) * 4
        last = previous = anchor.number
        for ln in self._recent.from_number(anchor.number):
            if ln is anchor or ln.number < anchor.number:
                continue
            if ln.number > limit:
                break
            same = ln.rank == anchor.rank
            # a bare piece right after the last line taken: nothing kept in between (a blank line,
            # which is not kept, may separate the paragraphs of one multi-line message)
            adjacent = previous == last and ln.number <= last + 2
            wrapped = anchor.rank is not None and ln.rank is None and not ln.prefix and adjacent
            previous = ln.number
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
        recent = {ln.number: ln for ln in self._recent.numbered(anchor.number - LEAD_LINES, anchor.number - 1)}
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
