"""Counting the newlines of a range of bytes at memory speed.

``bytes.count`` of one byte tests every byte in a loop that checks a limit on each hit, which the
compiler does not vectorise: ~0.5 s/GiB on the bench machine, whatever the text.
``bytes.replace(b"\\n", b"")`` finds the newlines with ``memchr`` (vectorised in glibc) before it
copies what is left: where lines are long that is 2-3 times faster, copies included; where lines
are short (one ``memchr`` call per newline) it is many times slower. So a range is counted in
pieces, each by the method that suits the lines of its first KiB
(``bench/count_newlines.py`` measures both).

Pieces are small so that their copies come from the allocator's free lists: a copy of a whole
MiB is given back to the system when it is freed, and the page faults of taking it again cost
more than the count saves.
"""

from __future__ import annotations

#: bytes per piece (the copies stay in the cache and below the allocator's mmap threshold)
PIECE = 1 << 15
#: ``memchr`` pays where lines are longer than this on average (bytes; see bench/count_newlines.py)
LONG_LINE = 40
#: a piece's method is told from this many bytes at its start
SAMPLE = 1024


def count_newlines(data: bytes, a: int = 0, b: int | None = None) -> int:
    """How many ``b"\\n"`` ``data[a:b]`` holds (``0 <= a <= b <= len(data)``)."""
    b = len(data) if b is None else b
    if b - a <= PIECE:
        return data.count(b"\n", a, b)
    total = 0
    count = data.count
    for i in range(a, b, PIECE):
        j = min(i + PIECE, b)
        if count(b"\n", i, i + SAMPLE) * LONG_LINE > SAMPLE:  # short lines
            total += count(b"\n", i, j)
        else:
            piece = data[i:j]
            total += len(piece) - len(piece.replace(b"\n", b""))
    return total
