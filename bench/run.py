"""Benchmark oomdoctor against grep and cat on a generated vLLM serving log; one run, ~1-2 minutes.

    python bench/run.py                 # 1 GiB log, writes bench/RESULTS.md
    python bench/run.py --size 200MiB   # quicker

Measured side by side on the same machine (ratios are what the targets are about):

- post-mortem wall time (``oomdoctor -f json LOG``) with hyperscan and with the pure-Python
  prefilter, against ``grep -c -i -E`` of the same triggers (``LC_ALL=C``);
- pipe passthrough (``cat LOG | oomdoctor > /dev/null``) against ``cat LOG | cat > /dev/null``;
- peak RSS (``/usr/bin/time``) of each run, plus a 200 MB line without a newline;
- a 50-line log end to end against importing the CLI's dependencies;
- live latency: seconds from writing a failure's last line into a pipe that stays open to the
  diagnosis appearing on stderr.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import genlog  # noqa: E402

PY = sys.executable
OOMDOCTOR = [PY, "-m", "oomdoctor"]
TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None  # Debian's `time` package


def triggers() -> list[str]:
    from oomdoctor.rulepack import default_pack
    from oomdoctor.scanner import _BUILTIN_TRIGGERS

    return [*default_pack().all_triggers(), *_BUILTIN_TRIGGERS]


def grep_pattern(trigs: list[str]) -> str:
    return "|".join(re.sub(r"([][.*+?(){}|^$\\])", r"\\\1", t) for t in trigs)


def timed(cmd: str, env: dict[str, str] | None = None, stdin: int | None = None) -> tuple[float, int | None]:
    """Wall seconds and peak RSS (KiB, from /usr/bin/time) of a shell command."""
    rss_file = HERE / "out" / "rss.txt"
    wrapped = cmd
    if TIME:
        wrapped = f"{TIME} -f %M -o {rss_file} sh -c {sh_quote(cmd)}"
    t0 = time.perf_counter()
    proc = subprocess.run(wrapped, shell=True, env={**os.environ, **(env or {})}, check=False, stdin=stdin)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # oomdoctor exits 1 when it finds a failure; grep when none
        raise SystemExit(f"bench: command failed with exit code {proc.returncode}: {cmd}")
    rss = None
    if TIME and rss_file.exists():
        m = re.findall(r"^(\d+)\s*$", rss_file.read_text(), re.M)
        rss = int(m[-1]) if m else None
    return dt, rss


def sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def best(n: int, cmd: str, env: dict[str, str] | None = None) -> tuple[float, int | None]:
    runs = [timed(cmd, env) for _ in range(n)]
    return min(r[0] for r in runs), max((r[1] or 0) for r in runs) or None


def hyperscan_ok() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def long_line(size: int) -> Path:
    path = HERE / "out" / f"one-line-{genlog.size_label(size)}.log"
    if not path.exists() or path.stat().st_size != size:
        chunk = (b"INFO prompt: " + b"abcdefghij" * 100_000)[: 1 << 20]
        with open(path, "wb") as f:
            left = size
            while left > 0:
                f.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
    return path


def small_log() -> Path:
    path = HERE / "out" / "small-50.log"
    import random

    rng = random.Random(7)
    lines = genlog.startup(rng, 0, 100)[:24]
    lines += genlog.oom_block(rng, 100, 200, 0)
    path.write_text("\n".join(lines[:50]) + "\n")
    return path


def live_latency(env: dict[str, str]) -> float | None:
    """Write traffic, then an OOM block, into oomdoctor's stdin (left open); time to stderr."""
    import random
    import select

    rng = random.Random(11)
    traffic, _ = genlog.traffic(rng, 0, 200_000)
    block = ("\n".join(genlog.oom_block(rng, 500, 300, 1)) + "\n").encode()
    p = subprocess.Popen(
        OOMDOCTOR, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    assert p.stdin is not None and p.stderr is not None
    try:
        p.stdin.write(traffic)
        p.stdin.flush()
        time.sleep(1.5)  # started, imported, and idle
        for line in block.splitlines(keepends=True):
            p.stdin.write(line)
            p.stdin.flush()
        t_last = time.perf_counter()
        ready, _, _ = select.select([p.stderr], [], [], 10.0)
        if not ready:
            return None
        os.read(p.stderr.fileno(), 65536)
        return time.perf_counter() - t_last
    finally:
        p.stdin.close()
        p.wait(timeout=30)


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=genlog.parse_size, default=genlog.parse_size("1GiB"))
    ap.add_argument("--line-size", type=genlog.parse_size, default=genlog.parse_size("200MB"))
    ap.add_argument("--no-pure", action="store_true", help="skip the pure-Python post-mortem")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    args = ap.parse_args()

    load_before = _load()
    log = genlog.generate(args.size)
    size = log.stat().st_size
    trigs = triggers()
    pat = grep_pattern(trigs)
    hs = hyperscan_ok()
    rows: list[tuple[str, str, str, str, str]] = []

    def row(what: str, ours: str, base: str, ratio: str, target: str) -> None:
        rows.append((what, ours, base, ratio, target))
        print(f"{what}: {ours} vs {base} -> {ratio} (target {target})", flush=True)

    subprocess.run(f"cat {log} > /dev/null", shell=True, check=False)  # warm the page cache
    # not > /dev/null: GNU grep then stops at the first match
    grep_out = HERE / "out" / "grep-count.txt"
    t_grep, _ = best(2, f"LC_ALL=C grep -c -i -E {sh_quote(pat)} {log} > {grep_out}")
    t_cat, _ = best(2, f"cat {log} > /dev/null")
    t_catcat, _ = best(2, f"cat {log} | cat > /dev/null")
    rss: dict[str, int | None] = {}

    if hs:
        t_fast, rss["post-mortem, hyperscan"] = timed(
            f"{' '.join(OOMDOCTOR)} -f json {log} > /dev/null", {"OOMDOCTOR_PREFILTER": "hyperscan"}
        )
        row("post-mortem, hyperscan", f"{t_fast:.2f} s", f"grep {t_grep:.2f} s", f"{t_fast / t_grep:.2f}×", "≤ 1.0×")
    else:
        row("post-mortem, hyperscan", "hyperscan not importable", "", "", "≤ 1.0×")
    if not args.no_pure:
        t_pure, rss["post-mortem, pure Python"] = timed(
            f"{' '.join(OOMDOCTOR)} -f json {log} > /dev/null", {"OOMDOCTOR_PREFILTER": "python"}
        )
        row("post-mortem, pure Python", f"{t_pure:.2f} s", f"grep {t_grep:.2f} s", f"{t_pure / t_grep:.2f}×", "≤ 3×")
    t_pipe, rss["pipe mode"] = timed(f"cat {log} | {' '.join(OOMDOCTOR)} > /dev/null 2>/dev/null")
    mb = size / 1e6
    row(
        "pipe passthrough throughput",
        f"{mb / t_pipe:.0f} MB/s",
        f"cat|cat {mb / t_catcat:.0f} MB/s",
        f"{t_catcat / t_pipe:.2f}×",
        "≥ 0.5×",
    )
    line = long_line(args.line_size)
    _, rss[f"{genlog.size_label(args.line_size)} line, no newline"] = timed(
        f"{' '.join(OOMDOCTOR)} -f json {line} > /dev/null"
    )
    _, rss["pipe, long line"] = timed(f"cat {line} | {' '.join(OOMDOCTOR)} > /dev/null 2>/dev/null")
    worst = max((v for v in rss.values() if v), default=0)
    row(
        "peak RSS (worst of the runs)",
        f"{worst / 1024:.0f} MiB",
        ", ".join(f"{k} {v / 1024:.0f}" for k, v in rss.items() if v),
        "",
        "≤ 80 MiB",
    )
    small = small_log()
    t_imp, _ = best(5, f'{PY} -c "import typer, rich, pydantic, jsonschema, regex"')
    t_small, _ = best(5, f"{' '.join(OOMDOCTOR)} {small} > /dev/null")
    row("50-line log end to end", f"{t_small:.3f} s", f"imports {t_imp:.3f} s", f"{t_small / t_imp:.2f}×", "≤ 2×")
    lat = live_latency({})
    row("live diagnosis latency", f"{lat:.2f} s" if lat is not None else "none in 10 s", "", "", "≤ 1 s")

    prefilter = "hyperscan" if hs else "pure Python"
    lines = [
        "# Benchmark results",
        "",
        f"`python bench/run.py --size {genlog.size_label(args.size)}` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; log: {log.name} ({size / 2**30:.2f} GiB, "
        f"{len(trigs)} triggers); grep: `LC_ALL=C grep -c -i -E` of the same triggers; "
        f"baselines cat {t_cat:.2f} s, cat|cat {t_catcat:.2f} s. Default prefilter here: {prefilter}. "
        f"Load average before/after: {load_before} / {_load()} (other work on the machine skews wall times).",
        "",
        "| measure | oomdoctor | baseline | ratio | target |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows),
        "",
    ]
    args.results.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
