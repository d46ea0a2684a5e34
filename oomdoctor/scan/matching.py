"""Rule matching: a queued candidate line and its window against its rules' patterns."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import regex

from oomdoctor import regex_cache
from oomdoctor.fallback import role_figures
from oomdoctor.figures import groups_to_figures
from oomdoctor.reader import Line, is_request_echo, normalise
from oomdoctor.rulepack import CompiledRule
from oomdoctor.rulepack.loader import REGEX_TIMEOUT
from oomdoctor.scan.recent import RecentLines
from oomdoctor.scan.state import (
    ScanState,
)

_FOLDED: dict[str, Any] = {}


def _folded(pattern: Any) -> Any:
    """``pattern`` compiled case-insensitively (once per pattern text)."""
    found = _FOLDED.get(pattern.pattern)
    if found is None:
        found = _FOLDED[pattern.pattern] = regex_cache.compile(pattern.pattern, regex.VERSION0 | regex.IGNORECASE)
    return found


def _cuts_a_word(m: Any, text: str) -> bool:
    """Whether a group of ``m`` ends at a line break inside a number ("15185" / "1674624"): a
    reading that joins the pieces with nothing between them may read it whole."""
    for name in m.groupdict():
        end = m.end(name)
        if 0 < end < len(text) - 1 and text[end] == "\n" and text[end - 1].isdigit() and text[end + 1].isdigit():
            return True
    return False


#: the longest log prefix :func:`_shared_prefix` looks for (a prefix is short; two long lines that
#: are the same must not cost a walk over all their characters)
PREFIX_CHARS = 256


def _shared_prefix(a: str, b: str) -> str:
    """The prefix two lines share up to a delimiter (blank, '|', ']', '>', ':') after its eighth
    character, or "" (the prefix of a log the reader does not know, repeated on each line); it
    is looked for in the first :data:`PREFIX_CHARS` characters."""
    n = 0
    for x, y in zip(a[:PREFIX_CHARS], b[:PREFIX_CHARS], strict=False):
        if x != y:
            break
        n += 1
    cut = max((i + 1 for i in range(n) if a[i] in " |]>:"), default=0)
    return a[:cut] if cut >= 8 else ""


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


def match_order(rule: CompiledRule) -> tuple[int, int]:
    """Where ``rule`` comes in the order a line's rules are tried: the highest priority first,
    then the order the pack lists them in."""
    return (-rule.rule.priority, rule.order)


class RuleTimeout(Exception):
    """A rule's regex ran past its time limit; the message names the rule."""


@dataclass
class _Pending:
    line: Line
    rules: list[CompiledRule]
    source: str


class RuleMatching(ScanState):
    """Match each pending candidate line, once its window has filled, against its rules (wrapped
    and cut readings, lead lines above it, clause by clause); a match goes to
    :meth:`~oomdoctor.scan.folding.Folding._add_finding`."""

    def _rules_starting(self, text: str, present: list[str]) -> set[int]:
        """The rules a line whose message is ``text`` may start, given the triggers it holds: none
        when it echoes a user's prompt (whatever the prompt says, no failure of this program)."""
        rules = {i for t in present for i in self._rule_by_trigger.get(t, ())}
        return rules if rules and not is_request_echo(text) else set()

    def _evaluate_pending(self, final: bool) -> None:
        while self._pending:
            p = self._pending[0]
            size = max(r.rule.window for r in p.rules)
            latest = self._recent.last().number if self._recent else 0
            if not final and latest < p.line.number + size * 4 and len(self._window(p.line, size)) < size:
                return
            self._pending.popleft()
            self._match(p)

    def _match(self, p: _Pending) -> None:
        anchor = p.line
        if self._claimed_until.get(anchor.rank, 0) >= anchor.number:
            return
        ordered = sorted(p.rules, key=match_order)
        for rule in ordered:
            if rule.id in self.dropped_rules:
                continue
            start = anchor
            try:
                start, found = self._find(rule, anchor)
            except RuleTimeout as exc:
                if rule.builtin:
                    raise
                # a user's rule that backtracks: drop it alone, so every other rule still reports
                self.dropped_rules[rule.id] = str(exc)
                self.pack.say(f"{exc}; this rule is skipped for the rest of the run")
                continue
            if found is None:
                continue
            m, text, end_line, figures = found
            self._claimed_until[start.rank] = max(self._claimed_until.get(start.rank, 0), end_line)
            self._claimed_until[anchor.rank] = max(self._claimed_until.get(anchor.rank, 0), end_line)
            # (its window filled, the lines before the last one read aged the open findings)
            self._note_fold(start, rule, m, text, figures, end_line, max(r.rule.window for r in p.rules) - 1)
            self._add_finding(rule, m, text, figures, start, end_line)
            return

    def _find(self, rule: CompiledRule, anchor: Line) -> tuple[Line, tuple[Any, str, int, dict[str, Any]] | None]:
        """The line ``rule``'s match starts on and the match (None: no match) for the candidate ``anchor``."""
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
        return start, found

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
        self._recent = RecentLines(lines, maxlen=len(lines))
        for a, b in pairwise(lines):
            if is_request_echo(a.text):
                continue  # (a user's prompt: see LineAssembly._process)
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
