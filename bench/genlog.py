"""Generate realistic, deterministic logs of a given size, one per log shape (fast: repeated blocks).

Each shape (``bench/logshapes/``) is what one kind of workload prints: a start-up banner, traffic
(requests, progress, step lines) built into 1 MiB segments once and repeated, and four
out-of-memory failures of the kind that tool really prints, at 1/5, 2/5, 3/5 and 4/5 of the file,
each followed by a restart.

    python bench/genlog.py --size 1GiB                  # every shape -> bench/out/SHAPE-1GiB.log
    python bench/genlog.py --size 64MiB --shapes vllm-stats,hf-trainer

``vllm-serving`` is the log of the first benchmark (byte-identical to it, for continuity).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

from logshapes import (
    Shape,
    deepspeed_ranks,
    hf_trainer,
    k8s_json,
    k8s_stats,
    k8s_tracebacks,
    llamacpp_server,
    memory_noise,
    ollama_debug,
    request_tracebacks,
    sglang_serving,
    tgi_serving,
    vllm_serving,
    vllm_stats,
)
from logshapes.vllm_serving import oom_block, startup, traffic

__all__ = ["SHAPES", "Shape", "generate", "oom_block", "parse_size", "shape_names", "size_label", "startup", "traffic"]

OUT = Path(__file__).resolve().parent / "out"
#: bump when the content changes so that cached logs are regenerated
GENERATOR_VERSION = 4
SEGMENTS = 12
SEGMENT_BYTES = 1 << 20
OOM_BLOCKS = 4
#: failures are a segment apart from this size on (a wrapped segment is larger than 1 MiB)
MIN_SIZE = 8 << 20
SEED = 20240819

SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        vllm_serving.SHAPE,
        vllm_stats.SHAPE,
        hf_trainer.SHAPE,
        deepspeed_ranks.SHAPE,
        k8s_json.SHAPE,
        k8s_stats.SHAPE,
        llamacpp_server.SHAPE,
        memory_noise.SHAPE,
        request_tracebacks.SHAPE,
        k8s_tracebacks.SHAPE,
        sglang_serving.SHAPE,
        tgi_serving.SHAPE,
        ollama_debug.SHAPE,
    )
}


def shape_names(text: str) -> list[str]:
    """``a,b`` -> the shapes named (``all``: every shape), checked."""
    if text.strip() == "all":
        return list(SHAPES)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    return names


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 1GiB, 200MiB)")
    unit = (m.group(2) or "B").upper().rstrip("B").rstrip("I")
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit])


def size_label(n: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f}{unit}"
    return f"{n}B"


def generate(size: int, path: Path | None = None, shape: str = "vllm-serving") -> Path:
    """Write the log of ``shape`` (reusing an existing one of the same size and generator version)."""
    sh = SHAPES[shape]
    if size < MIN_SIZE:
        print(f"genlog: below {size_label(MIN_SIZE)} failures can be written back to back "
              "(they are placed between 1 MiB segments) and then read as one", file=sys.stderr)
    OUT.mkdir(parents=True, exist_ok=True)
    path = path or OUT / f"{sh.name}-{size_label(size)}.log"
    stamp = path.with_suffix(".stamp")
    want = f"{GENERATOR_VERSION} {size}"
    if path.exists() and stamp.exists() and stamp.read_text() == want:
        return path
    wrap = sh.wrap() if sh.wrap else (lambda b: b)
    rng = random.Random(SEED)
    sec = 0
    segments = []
    for _ in range(SEGMENTS):
        seg, sec = sh.traffic(rng, sec, SEGMENT_BYTES)
        segments.append(wrap(seg))
    # failures at fixed fractions of the file, each followed by a restart
    marks = [int(size * (i + 1) / (OOM_BLOCKS + 1)) for i in range(OOM_BLOCKS)]
    written = 0
    i = 0
    with open(path, "wb") as f:
        head = wrap(("\n".join(sh.head(rng, 0)) + "\n").encode())
        f.write(head)
        written += len(head)
        k = 0
        while written < size:
            if k < len(marks) and written >= marks[k]:
                data = wrap(("\n".join(sh.failure(rng, k)) + "\n").encode())
                k += 1
            else:
                data = segments[i % SEGMENTS]
                i += 1
                if written + len(data) > size:  # end on a whole line
                    cut = data.rfind(b"\n", 0, size - written)
                    data = data[: cut + 1] if cut >= 0 else b""
                    if not data:
                        break
            f.write(data)
            written += len(data)
    stamp.write_text(want)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("1GiB"), help="bytes per log (default 1GiB)")
    ap.add_argument("--shapes", type=shape_names, default=list(SHAPES),
                    help=f"comma-separated, or 'all' (default): {', '.join(SHAPES)}")
    ap.add_argument("--out", type=Path, default=None, help="file name (one shape only)")
    args = ap.parse_args()
    if args.out and len(args.shapes) != 1:
        ap.error("--out needs exactly one shape")
    for name in args.shapes:
        print(generate(args.size, args.out, name))


if __name__ == "__main__":
    main()
