"""Perturb a benchmark log and time oomdoctor against grep on each variant: is a shape fast only
as ``genlog.py`` writes it?

    python bench/perturb.py                                   # vllm-serving and sglang-serving, 64 MiB
    python bench/perturb.py --shapes vllm-stats --size 256MiB

Each variant changes every line the way real logs differ from the generated ones, and keeps the
shape's four failures:

- ``as-is``: the log ``genlog.py`` writes;
- ``ansi``: level names in colour (``\\x1b[32mINFO\\x1b[0m``), as a terminal-attached logger prints;
- ``crlf``: ``\\r\\n`` line ends (a log written on Windows, or through a pty);
- ``cri``: the CRI-O/containerd prefix Kubernetes nodes write (``2025-06-01T00:00:00.000000000Z stdout F``);
- ``warnings``: the engine's own memory warning after every 20th line (vLLM V0's preemption
  warning; SGLang's "KV cache pool is full. Retract requests."), a server under memory pressure.

For each: the seconds of ``LC_ALL=C grep -c -i -E`` of the triggers and of ``oomdoctor -f json``
(the default prefilter; best of ``--repeat``), their ratio, and the shape's failures found (the
warning, where added, is one more finding). Prints a Markdown table; writes nothing else but the
variants under ``bench/out/``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import genlog  # noqa: E402
import run as bench  # noqa: E402

_COLOURS = ((b"INFO", b"\x1b[32mINFO\x1b[0m"), (b"WARNING", b"\x1b[33mWARNING\x1b[0m"), (b"ERROR", b"\x1b[31mERROR\x1b[0m"))
#: a memory warning each engine prints while it serves under memory pressure
_WARNINGS = {
    "sglang": b"[2025-06-01 00:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
    b"#new_token_ratio: 0.4000 -> 0.5000",
    "vllm": b"WARNING 08-19 00:00:01 [scheduler.py:1560] Sequence group 1234 is preempted by "
    b"PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
    b"end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more "
    b"KV cache memory. total_num_cumulative_preemption=51",
}
#: the kind the added warning is reported as
_WARNING_KINDS = {"sglang": "sglang.kv-cache.retract", "vllm": "vllm.kv-cache.preemption"}


def _ansi(line: bytes) -> bytes:
    for word, coloured in _COLOURS:
        if word in line:
            return line.replace(word, coloured, 1)
    return line


def _variants(engine: str) -> dict[str, Callable[[Iterator[bytes]], Iterator[bytes]]]:
    warning = _WARNINGS[engine] + b"\n"

    def warnings(lines: Iterator[bytes]) -> Iterator[bytes]:
        for i, line in enumerate(lines, 1):
            yield line
            if i % 20 == 0:
                yield warning

    return {
        "as-is": lambda lines: lines,
        "ansi": lambda lines: (_ansi(line) for line in lines),
        "crlf": lambda lines: (line[:-1] + b"\r\n" if line.endswith(b"\n") else line for line in lines),
        "cri": lambda lines: (b"2025-06-01T00:00:00.000000000Z stdout F " + line for line in lines),
        "warnings": warnings,
    }


def _write(src: Path, dst: Path, change: Callable[[Iterator[bytes]], Iterator[bytes]]) -> Path:
    if not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime:
        with open(src, "rb") as f, open(dst, "wb") as out:
            out.writelines(change(iter(f)))
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=genlog.parse_size, default=genlog.parse_size("64MiB"), help="bytes of the base log")
    ap.add_argument("--shapes", type=genlog.shape_names, default=["vllm-serving", "sglang-serving"])
    ap.add_argument("--repeat", type=int, default=2, help="runs of each timed command (best is kept)")
    args = ap.parse_args()
    pat = bench.grep_pattern(bench.triggers())
    reports = bench.OUT / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    print("| shape | variant | size | grep | oomdoctor | ÷ grep | failures found |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.shapes:
        shape = genlog.SHAPES[name]
        base = genlog.generate(args.size, shape=name)
        engine = "sglang" if name.startswith("sglang") else "vllm"
        for variant, change in _variants(engine).items():
            log = _write(base, base.with_name(f"{base.stem}-{variant}.log"), change) if variant != "as-is" else base
            report = reports / f"perturb-{log.stem}.json"
            grep, ours = bench.Run(), bench.Run()
            bench.timed(f"cat {log} > /dev/null")  # warm the page cache
            for _ in range(args.repeat):
                bench.timed(f"LC_ALL=C grep -c -i -E {bench.sh_quote(pat)} {log} > {bench.OUT / 'grep-count.txt'}", run=grep)
                bench.timed(f"{' '.join(bench.OOMDOCTOR)} -f json -o {report} {log}", run=ours)
            kinds = [f["kind"] for f in json.loads(report.read_text(encoding="utf-8"))["findings"]]
            found = f"{kinds.count(shape.expect)} × {shape.expect}"
            if variant == "warnings":
                found += f", {kinds.count(_WARNING_KINDS[engine])} × {_WARNING_KINDS[engine]}"
            print(
                f"| {name} | {variant} | {log.stat().st_size >> 20} MiB | {grep.wall:.2f} s | {ours.wall:.2f} s"
                f" | {ours.wall / grep.wall:.2f}× | {found} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
