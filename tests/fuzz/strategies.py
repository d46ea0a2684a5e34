"""Hypothesis strategies for log byte streams: real failure lines, their mutations, hostile bytes."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


def _fixture_lines() -> list[bytes]:
    lines: set[bytes] = set()
    for path in sorted((ROOT / "fixtures").glob("*/*.log")):
        for line in path.read_bytes().splitlines(keepends=True):
            if line.strip():
                lines.add(line[:4000])
    return sorted(lines)


FIXTURE_LINES = _fixture_lines()

HOSTILE = [
    b"\x00",
    b"\r",
    b"\r\n",
    b"\n",
    b"Loading 10%\rLoading 20%\r",
    b"\x1b[1;31m",
    b"\x1b[0m",
    b"\x1b]0;title\x07",
    b"^[[1;36m",
    b"#033[0m",
    b"\xff\xfe",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xf0\x9f\x98",
    b"Traceback (most recent call last):\n",
    b'  File "/x/vllm/worker/worker.py", line 1, in determine_num_available_blocks\n',
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ",
    b" GiB. GPU 0 has a total capacity of ",
    b"(VllmWorkerProcess pid=12) ",
    b"[rank3]: ",
    b"A" * 70_000,  # a long line (lines past reader.MAX_LINE_BYTES: tests/test_long_lines.py)
]


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    line = draw(st.sampled_from(FIXTURE_LINES))
    at = draw(st.integers(0, len(line)))
    cut = draw(st.integers(0, 8))
    insert = draw(st.one_of(st.binary(max_size=8), st.sampled_from(HOSTILE[:14])))
    return line[:at] + insert + line[at + cut :]


piece = st.one_of(
    st.sampled_from(FIXTURE_LINES),
    _mutated(),
    st.sampled_from(HOSTILE),
    st.binary(max_size=64),
)

#: a log: pieces of real logs, mutated lines, hostile bytes and random bytes, in any order
log_bytes = st.lists(piece, max_size=40).map(b"".join)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """Cut ``data`` at the given offsets (taken modulo its length, any order, duplicates ok)."""
    if not data:
        return [data]
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


cut_points = st.lists(st.integers(0, 1 << 30), max_size=12)
