"""Rule matching at its boundaries (issue 38, the mutation run of ``scan/matching``): which
reading of a wrapped window wins, where a message ends, when a pending line is matched, and
the small helpers that decide those, each pinned at the value where it changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import regex

from oomdoctor.report import Finding, Report
from oomdoctor.rulepack.loader import RulePack, load_pack
from oomdoctor.scan.matching import PREFIX_CHARS, _ClauseMatch, _cuts_a_word, _shared_prefix
from oomdoctor.scanner import Scanner


def _pack(tmp_path: Path, *rules: str) -> RulePack:
    (tmp_path / "rules.toml").write_text("".join(rules), encoding="utf-8")
    return load_pack([tmp_path], include_builtin=False)


def _rule(rid: str, trigger: str, pattern: str, *, window: int = 3, extra: str = "") -> str:
    return (f'[[rule]]\nid = "{rid}"\ntitle = "A test rule"\nengine = "test"\nkind = "test"\n'
            f'triggers = ["{trigger}"]\nwindow = {window}\npattern = \'{pattern}\'\n{extra}'
            f'[[rule.match]]\nlog = "{trigger}"\n')


def _scan(pack: RulePack, text: str) -> Report:
    scanner = Scanner(pack, source="<test>", advise=False)
    scanner.feed(text.encode("utf-8"))
    return scanner.close()


def _found(report: Report) -> list[tuple[str, int, int, dict[str, object]]]:
    return [(f.rule, f.location.line, f.location.end_line, dict(f.figures)) for f in report.findings]


def _only(report: Report) -> Finding:
    assert len(report.findings) == 1, _found(report)
    return report.findings[0]


# -- helpers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("15185\n1674624", True),  # a number broken by the line break
        ("1\n2", True),  # the group ends at 1: the smallest end that can be cut
        ("\n12", False),  # the group ends at 0: nothing before the break
        ("12\n", False),  # the break is the text's last character
        ("x1\n2", True),  # the digit right before the break decides, not the one before it
        ("x\n2", False),
        ("1\n2x", True),  # the digit right after the break decides, not the one after it
        ("1\nx2", False),
        ("12 34", False),  # a blank, not a break
    ],
)
def test_a_group_cut_by_a_line_break(text: str, cut: bool) -> None:
    m = regex.match(r"(?P<n>[x\d]*)", text)
    assert m is not None
    assert _cuts_a_word(m, text) is cut


@pytest.mark.parametrize(
    ("a", "b", "prefix"),
    [
        ("pod-7 | stderr F abc", "pod-7 | stderr F def", "pod-7 | stderr F "),  # up to its last delimiter
        ("abcdefg x", "abcdefg y", "abcdefg "),  # eight characters: long enough
        ("abcdef x", "abcdef y", ""),  # seven: too short to be a prefix
        ("abcdefgh", "abcdefgh", ""),  # no delimiter at all
        ("x" * (PREFIX_CHARS - 1) + " a", "x" * (PREFIX_CHARS - 1) + " b", "x" * (PREFIX_CHARS - 1) + " "),
        ("x" * PREFIX_CHARS + " a", "x" * PREFIX_CHARS + " b", ""),  # the delimiter lies past the look
    ],
)
def test_the_shared_prefix_of_two_lines(a: str, b: str, prefix: str) -> None:
    assert PREFIX_CHARS == 256
    assert _shared_prefix(a, b) == prefix


def test_a_clause_match_stands_for_the_whole_text() -> None:
    m = _ClauseMatch("abc\nd")
    assert (m.start(), m.end(), m.group(), m.groupdict()) == (0, 3, "abc\nd", {})  # the first line's end
    m.ends.extend([5, 9, 2])
    assert m.end() == 9  # the last figure's end


# -- when a pending line is matched --------------------------------------------------------------


_COUNT = _rule("test.count", "zzqq", r"zzqq (?P<count>\d+)", window=2)


@pytest.mark.parametrize(("after", "pending"), [(0, 1), (1, 1), (2, 0)])
def test_a_pending_line_is_matched_once_its_window_is_full(tmp_path: Path, after: int, pending: int) -> None:
    scanner = Scanner(_pack(tmp_path, _COUNT), source="<test>", advise=False)
    scanner.feed(("zzqq 7\n" + "".join(f"line {i}\n" for i in range(after))).encode())
    assert len(scanner._pending) == pending


@pytest.mark.parametrize(("after", "pending"), [(7, 1), (8, 0)])
def test_a_pending_line_waits_four_windows_for_its_rank(tmp_path: Path, after: int, pending: int) -> None:
    """Another rank's lines never fill rank 0's window: it is matched once 4 × 2 lines follow."""
    scanner = Scanner(_pack(tmp_path, _COUNT), source="<test>", advise=False)
    scanner.feed(("[rank0]: zzqq 7\n" + "".join(f"[rank1]: line {i}\n" for i in range(after))).encode())
    assert len(scanner._pending) == pending


# -- readings of a window -----------------------------------------------------------------------


def test_a_line_claimed_by_a_message_up_to_its_end_starts_no_other(tmp_path: Path) -> None:
    pack = _pack(tmp_path, _rule("test.two-lines", "zzqq", r"zzqq (?P<count>\d+)\nqqzz", window=1),
                 _rule("test.second", "qqzz", r"qqzz (?P<count>\d+)", window=1))
    assert _found(_scan(pack, "zzqq 7\nqqzz 8\n")) == [("test.two-lines", 1, 2, {"count": 7})]


@pytest.mark.parametrize("by_clause", [False, True])
def test_a_message_wrapped_before_its_trigger_starts_on_the_line_above(tmp_path: Path, by_clause: bool) -> None:
    extra = "by_clause = true\n" if by_clause else ""
    pack = _pack(tmp_path, _rule("test.lead", "beta", r"alpha beta (?P<count>\d+)", extra=extra))
    assert _found(_scan(pack, "alpha\nbeta 5\n")) == [("test.lead", 1, 2, {"count": 5})]


def test_a_match_may_start_where_the_anchor_line_ends(tmp_path: Path) -> None:
    """Read as the terminal wrapped it ("zzqq" + "zz7"), the match starts at the anchor's end."""
    pack = _pack(tmp_path, _rule("test.at-end", "zzqq", r"zz(?P<count>\d+)"))
    assert _found(_scan(pack, "zzqq\nzz7\n")) == [("test.at-end", 1, 2, {"count": 7})]


def test_on_a_tie_the_earlier_reading_wins(tmp_path: Path) -> None:
    """Joined with "\\n" the word is "ab", as wrapped "abcd", joined with a blank "ab cd": two figures
    each, so the first reading is kept."""
    pack = _pack(tmp_path, _rule("test.tie", "zzqq", r"zzqq (?P<count>\d+) (?P<word>[a-z ]+)",
                 extra='types = { word = "str" }\n'))
    assert _found(_scan(pack, "zzqq 5 ab\ncd\n")) == [("test.tie", 1, 1, {"count": 5, "word": "ab"})]


def test_a_match_that_ends_on_the_break_ends_on_the_anchor_line(tmp_path: Path) -> None:
    pack = _pack(tmp_path, _rule("test.break", "zzqq", r"zzqq (?P<count>\d+)\s*"))
    assert _found(_scan(pack, "zzqq 7\nfoo\n")) == [("test.break", 1, 1, {"count": 7})]


def test_a_by_clause_rule_whose_pattern_matches_keeps_the_pattern_figures(tmp_path: Path) -> None:
    pack = _pack(tmp_path, _rule("test.clauses", "zzqq", r"zzqq (?P<count>\d+)", extra="by_clause = true\n"))
    assert _found(_scan(pack, "zzqq 7\n")) == [("test.clauses", 1, 1, {"count": 7})]


def test_a_shouted_message_is_read_case_insensitively(tmp_path: Path) -> None:
    pack = _pack(tmp_path, _rule("test.case", "zzqq", r"zzqq (?P<count>\d+)"))
    assert _found(_scan(pack, "ZZQQ 7\n")) == [("test.case", 1, 1, {"count": 7})]
    assert _found(_scan(pack, "Zzqq 7\n")) == []  # mixed case: the rule's own spelling only


def test_a_wrapped_figure_read_whole_loses_to_a_reading_with_more_figures(tmp_path: Path) -> None:
    """Joined with "\\n", two figures (the first cut by the break); joined as wrapped, one: the
    reading with more figures wins even though it cuts a number."""
    pack = _pack(tmp_path, _rule("test.more", "zzqq", r"zzqq (?P<count>\d+)(?:\n(?P<size>\d+))?"))
    assert _found(_scan(pack, "zzqq 12\n34\n")) == [("test.more", 1, 2, {"count": 12, "size": 34})]


def test_an_extract_without_a_group_reads_its_whole_match(tmp_path: Path) -> None:
    pack = _pack(tmp_path, _rule("test.extract", "zzqq", r"zzqq", extra="extract = { count = '\\d+' }\n"))
    assert _found(_scan(pack, "zzqq 7\n")) == [("test.extract", 1, 1, {"count": 7})]


# -- by_clause rules whose pattern misses --------------------------------------------------------


_CLAUSES = "by_clause = true\n"


def test_a_clause_trigger_at_the_very_start_identifies_the_message(tmp_path: Path) -> None:
    pack = _pack(tmp_path, _rule("test.start", "zzqq", r"zzqq never",
                                 extra=_CLAUSES + "extract = { count = 'key (?P<value>\\d+)' }\n"))
    assert _found(_scan(pack, "zzqq key 7\n")) == [("test.start", 1, 1, {"count": 7})]


def test_clause_readings_tie_to_the_earlier_one(tmp_path: Path) -> None:
    """Joined with "\n" the clause reads "ab", as wrapped "abcd", joined with a blank "ab cd": one
    figure each, so the first reading is kept."""
    pack = _pack(tmp_path, _rule("test.tie", "zzqq", r"zzqq never",
                                 extra=_CLAUSES + "types = { word = \"str\" }\n"
                                 "extract = { word = 'key (?P<value>[a-z ]+)' }\n"))
    assert _found(_scan(pack, "zzqq key ab\ncd\n")) == [("test.tie", 1, 1, {"word": "ab"})]


def test_a_clause_message_ends_at_its_last_figure_or_trigger(tmp_path: Path) -> None:
    """The figure's clause ends on the break ("key 5\\n"): the next line, which holds neither a
    figure nor a trigger, is not part of the message; a later line with the trigger is."""
    pack = _pack(tmp_path, _rule("test.end", "zzqq", r"zzqq never",
                                 extra=_CLAUSES + "extract = { count = 'key (?P<value>\\d+)\\s*' }\n"))
    assert _found(_scan(pack, "zzqq key 5\nfoo\n")) == [("test.end", 1, 1, {"count": 5})]
    assert _found(_scan(pack, "zzqq key 5\nfoo\nbar zzqq\n")) == [("test.end", 1, 3, {"count": 5})]


# -- triggers cut by a line break ----------------------------------------------------------------


_CUT = _rule("test.cut", "zzqq", r"z\s*z\s*q\s*q\D*(?P<count>\d+)", window=1)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("foo zz\nqq 7\n", [("test.cut", 1, 2, {"count": 7})]),
        ("zz\nqq 7\n", [("test.cut", 1, 2, {"count": 7})]),  # the cut trigger starts the paste
        ("foo zzqq\n", []),  # (read whole by the line pass: nothing matched there, nothing here)
        ("foo zz\n", []),  # one line: nothing to read across
        # the break is read 100 characters to each side, blanks included
        ("foo z" + " " * 99 + "z\nqq 7\n", []),
        ("foo z" + " " * 98 + "z\nqq 7\n", [("test.cut", 1, 2, {"count": 7})]),
        ("foo zz\nq" + " " * 99 + "q 7\n", []),
        ("foo zz\nq" + " " * 98 + "q 7\n", [("test.cut", 1, 2, {"count": 7})]),
    ],
)
def test_a_trigger_cut_by_a_line_break(tmp_path: Path, text: str, found: list[object]) -> None:
    assert _found(_scan(_pack(tmp_path, _CUT), text)) == found


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("foo\nzzqq 7\n", []),  # the trigger starts on the next line: not cut
        ("foo zzqq\nbar 7\n", []),  # it ends on this line: not cut
        ("foo zz\nqq 7\n", [("test.spaced", 1, 2, {"count": 7})]),
    ],
)
def test_only_a_trigger_that_straddles_the_break_is_cut(tmp_path: Path, text: str, found: list[object]) -> None:
    """A trigger with a blank ("zz qq"), so that the line pass misses "zzqq" whole on one line."""
    pack = _pack(tmp_path, _rule("test.spaced", "zz qq", r"z\s*z\s*q\s*q\D*(?P<count>\d+)", window=1))
    assert _found(_scan(pack, text)) == found


# -- rules that read sizes by their words (roles) ------------------------------------------------


_ALLOC = "zzqq tried to allocate 2.00 GiB\n1.50 GiB free\n"


@pytest.mark.parametrize(
    ("pattern", "figures"),
    [
        # the named group ends where the anchor line ends: its words only
        (r"zzqq (?P<w>[^\n]*?GiB)[\s\S]*", {"requested_bytes": 2 << 30}),
        # the named group runs into the next line: a message wrapped there, whose words count too
        (r"zzqq (?P<w>[^\n]*\n[^\n]*)", {"requested_bytes": 2 << 30, "free_bytes": 3 << 29}),
    ],
)
def test_roles_read_the_next_line_only_when_the_match_group_runs_into_it(
    tmp_path: Path, pattern: str, figures: dict[str, int]
) -> None:
    pack = _pack(tmp_path, _rule("test.roles", "zzqq", pattern, window=1, extra="roles = true\n"))
    assert [f[3] for f in _found(_scan(pack, _ALLOC))] == [figures]


@pytest.mark.parametrize(("windows", "lag"), [((1,), 0), ((3,), 2), ((2, 5), 4), ((12,), 11)])
def test_a_match_notes_how_far_its_window_aged_the_open_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, windows: tuple[int, ...], lag: int
) -> None:
    """A candidate line is matched once the line ``window`` lines below it is read (the largest
    window of the rules it may start); the lines before that one aged the open findings. A run of
    copies passed over replays that ageing (``scan/runs``), so the match notes it: window − 1
    lines past the anchor, the line before the one read last."""
    rules = [_rule(f"t.w{w}", "boom", r"boom (?P<n>\d+)", window=w) for w in windows]
    noted: list[tuple[int, int, int]] = []
    real = Scanner._note_fold

    def spy(self: Scanner, anchor: Any, rule: Any, m: Any, text: str, figures: dict[str, Any], end: int,
            lag: int) -> None:
        noted.append((anchor.number, lag, self._recent.last().number))
        real(self, anchor, rule, m, text, figures, end, lag)

    monkeypatch.setattr(Scanner, "_note_fold", spy)
    filler = "".join(f"INFO step {i}\n" for i in range(20))
    report = _scan(_pack(tmp_path, *rules), filler + "boom 7\n" + filler)
    assert _only(report).figures == {"n": 7}
    assert noted == [(21, lag, 21 + lag + 1)]
