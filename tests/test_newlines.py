"""count_newlines: exactly bytes.count, whichever method each piece of a range is counted by."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oomdoctor.newlines import LONG_LINE, PIECE, count_newlines


def _log(lengths: list[int]) -> bytes:
    return b"".join(b"x" * n + b"\n" for n in lengths)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.one_of(st.integers(0, 8), st.integers(40, 400), st.integers(5000, 70000)), max_size=300),
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_equals_bytes_count(lengths: list[int], cut: tuple[float, float]) -> None:
    """Long lines, short lines and lines longer than a piece, mixed, in any sub-range."""
    data = _log(lengths)
    a, b = sorted(int(x * len(data)) for x in cut)
    assert count_newlines(data, a, b) == data.count(b"\n", a, b)
    assert count_newlines(data) == data.count(b"\n")


def test_switches_between_methods_at_piece_boundaries() -> None:
    """Short lines, then long, then short again, with newlines right at the pieces' bounds."""
    short = _log([LONG_LINE // 4] * (3 * PIECE // (LONG_LINE // 4 + 1)))
    long_ = _log([PIECE - 1] * 3 + [LONG_LINE * 3] * 2000)
    data = short + long_ + short + b"no newline at the end"
    for a in (0, 1, PIECE - 1, PIECE, len(short) - 1, len(short)):
        for b in (len(data), len(data) - 1, len(short) + len(long_) + 7, a + PIECE, a + PIECE + 1):
            if a <= b <= len(data):
                assert count_newlines(data, a, b) == data.count(b"\n", a, b), (a, b)


def test_edges() -> None:
    assert count_newlines(b"") == 0
    assert count_newlines(b"\n" * (3 * PIECE)) == 3 * PIECE
    assert count_newlines(b"a" * (3 * PIECE)) == 0
    assert count_newlines(b"\n" * (3 * PIECE), 5, 5) == 0
