"""The lines kept for windows: a window found from the end while their numbers ascend is the one
a walk over all of them finds, whatever order the lines were read in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from oomdoctor.reader import Line
from oomdoctor.scan.recent import MIN_LINES, RecentLines


def _walk(lines: list[Line], number: int) -> list[Line]:
    """What a caller of ``from_number`` keeps: every line from ``number`` on, in reading order."""
    return [ln for ln in lines if ln.number >= number]


@given(
    numbers=st.lists(st.integers(0, 60), max_size=80),
    pops=st.lists(st.integers(0, 79), max_size=5),
    maxlen=st.integers(1, 40),
    ask=st.integers(-1, 62),
)
def test_from_number_keeps_what_a_walk_over_every_line_keeps(
    numbers: list[int], pops: list[int], maxlen: int, ask: int
) -> None:
    recent = RecentLines(maxlen=maxlen)
    kept: list[Line] = []
    for i, n in enumerate(numbers):
        line = Line(number=n, text=str(i))
        recent.append(line)
        kept = [*kept, line][-maxlen:]
        if i in pops and kept:  # a line taken back (lead lines put in before a trigger line)
            assert recent.pop() is kept.pop()
        assert list(recent) == kept
        assert _walk(list(recent.from_number(ask)), ask) == _walk(kept, ask)
        assert list(recent.numbered(ask, ask + 2)) == [ln for ln in kept if ask <= ln.number <= ask + 2]


def test_in_order_a_window_is_found_from_the_end() -> None:
    recent = RecentLines((Line(number=n, text="") for n in range(300)), maxlen=256)
    assert [ln.number for ln in recent.from_number(295)] == [295, 296, 297, 298, 299]
    recent.append(Line(number=10, text="a deferred line read late"))
    assert len(list(recent.from_number(295))) == 256  # out of order: every line is walked
    for n in range(300, 556):  # until that line has left
        recent.append(Line(number=n, text=""))
    assert [ln.number for ln in recent.from_number(554)] == [554, 555]


@given(
    sizes=st.lists(st.integers(0, 40), max_size=80),
    numbers=st.lists(st.integers(0, 60), min_size=80, max_size=80),
    ask=st.integers(-1, 62),
)
def test_long_lines_leave_early_but_the_last_ones_stay_and_windows_still_agree(
    sizes: list[int], numbers: list[int], ask: int
) -> None:
    # a text budget of 100 characters, of which lines up to 40 long: the oldest leave early
    recent = RecentLines(maxlen=256, max_chars=100)
    kept: list[Line] = []
    for i, size in enumerate(sizes):
        line = Line(number=numbers[i], text="x" * size)
        recent.append(line)
        kept.append(line)
        while sum(len(ln.text) for ln in kept) > 100 and len(kept) > MIN_LINES:
            kept.pop(0)
        assert list(recent) == kept
        assert _walk(list(recent.from_number(ask)), ask) == _walk(kept, ask)


def test_a_run_of_lines_a_mebibyte_long_holds_at_most_the_budget_or_the_last_lines() -> None:
    recent = RecentLines(maxlen=256)
    for n in range(40):
        recent.append(Line(number=n, text="x" * (1 << 20)))
    assert [ln.number for ln in recent] == list(range(40 - MIN_LINES, 40))  # 16 MiB > 8 MiB: the last 16
    for n in range(40, 300):
        recent.append(Line(number=n, text="short"))
    assert len(recent) == 256 and sum(len(ln.text) for ln in recent) == 256 * 5
