"""Measure the two ways ``oomdoctor.newlines`` counts newlines, by line length.

    python bench/count_newlines.py

Prints seconds per GiB for ``bytes.count`` and for ``bytes.replace(b"\\n", b"")`` on 32 KiB
pieces (what ``count_newlines`` does where lines are long), for lines of 2 to 1000 bytes, and
for ``count_newlines`` itself: ``LONG_LINE`` should sit where the two methods cross.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oomdoctor.newlines import LONG_LINE, PIECE, count_newlines

BLOCK = 1 << 20
BLOCKS = 64  # 64 MiB per measure


def per_gib(fn: object, blocks: list[bytes]) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for b in blocks:
            fn(b)  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best * (1 << 30) / (BLOCK * len(blocks))


def by_replace(block: bytes) -> int:
    n = 0
    for i in range(0, len(block), PIECE):
        piece = block[i : i + PIECE]
        n += len(piece) - len(piece.replace(b"\n", b""))
    return n


def main() -> None:
    print(f"LONG_LINE = {LONG_LINE}, PIECE = {PIECE}")
    print("line bytes | bytes.count s/GiB | replace s/GiB | count_newlines s/GiB")
    for length in (2, 4, 8, 16, 24, 32, 48, 64, 96, 160, 400, 1000):
        line = b"x" * (length - 1) + b"\n"
        block = (line * (BLOCK // length + 1))[:BLOCK]
        blocks = [bytes(block) for _ in range(BLOCKS)]  # distinct objects, as blocks read are
        counted = per_gib(lambda b: b.count(b"\n"), blocks)
        replaced = per_gib(by_replace, blocks)
        ours = per_gib(count_newlines, blocks)
        print(f"{length:10} | {counted:17.3f} | {replaced:13.3f} | {ours:20.3f}")


if __name__ == "__main__":
    main()
