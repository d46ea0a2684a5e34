"""What redaction costs on adversarial input, in plain reads of the same text.

    python bench/redaction.py            # 1 MiB per input
    python bench/redaction.py --size 4MiB

Each input is one pattern's prefix repeated (the inputs of ``tests/test_redaction.py``; the
quadratic patterns of issue 16 took 132 s on 60 000 characters). For each it prints the seconds of
``redact`` and that time over one ``regex`` pass of the same engine over the text (best of three).
The test asserts only linear growth; this ratio was under 400 on an idle machine (a loaded one
measured 541 and 544, hence a figure here rather than an assert there).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import regex

from oomdoctor.redaction import redact
from tests.test_redaction import ADVERSARIAL

_READ = regex.compile(r"(?i)zq")  # one plain pass of the same engine over the text


def best(fn: object, n: int = 3) -> float:
    out = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out = min(out, time.perf_counter() - t0)
    return out


def size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20}
    for suffix, mult in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * mult)
    return int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1MiB", help="characters per input (e.g. 1MiB, 256KiB)")
    n = size(ap.parse_args().size)
    print("| input | redact (s) | reads |")
    print("| --- | ---: | ---: |")
    for unit in ADVERSARIAL:
        text = (unit * (n // len(unit) + 1))[:n]
        t = best(lambda text=text: redact(text))
        read = best(lambda text=text: _READ.findall(text))
        print(f"| `{unit}` | {t:.3f} | {t / max(read, 1e-9):.0f} |")


if __name__ == "__main__":
    main()
