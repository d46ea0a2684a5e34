"""Benchmark oomdoctor against grep and cat on a generated vLLM serving log; one run, ~1-2 minutes.

    python bench/run.py                 # 1 GiB log, writes bench/RESULTS.md
    python bench/run.py --size 200MiB   # quicker

Measured side by side on the same machine (ratios are what the targets are about):

- post-mortem wall time (``oomdoctor -f json LOG``) with hyperscan and with the pure-Python
  prefilter (with its worker processes, and in one process), against ``grep -c -i -E`` of the
  same triggers (``LC_ALL=C``); CPU time counts the workers too;
- pipe passthrough (``cat LOG | oomdoctor > /dev/null``) against ``cat LOG | cat > /dev/null``:
  throughput is the log's size over the seconds until ``cat`` has written all of it, i.e. how
  long the pipe held the writer up, which is what a server writing into oomdoctor feels; the
  seconds until oomdoctor exits (it then analyses the input it still holds and prints) are shown
  too;
- peak RSS (``/usr/bin/time``) of each run, plus a 200 MB line without a newline;
- a 50-line log end to end against importing the CLI's dependencies;
- live latency: seconds from writing a failure's last line into a pipe that stays open to the
  diagnosis appearing on stderr.

The table goes to ``bench/RESULTS.md`` and, between the ``<!-- bench:begin -->`` and
``<!-- bench:end -->`` markers, into the README (``--no-readme`` leaves the README alone).
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


class Run:
    """Best wall and CPU (user + sys) seconds over the repeats, worst peak RSS (KiB)."""

    def __init__(self) -> None:
        self.wall = float("inf")
        self.cpu = float("inf")
        self.rss = 0

    def add(self, wall: float, cpu: float, rss: int) -> None:
        self.wall = min(self.wall, wall)
        self.cpu = min(self.cpu, cpu)
        self.rss = max(self.rss, rss)


def timed(cmd: str, env: dict[str, str] | None = None, run: Run | None = None) -> Run:
    """Run a shell command under /usr/bin/time: wall, CPU of the whole command, peak RSS."""
    run = run or Run()
    stats = HERE / "out" / "time.txt"
    wrapped = f"{TIME} -f '%U %S %M' -o {stats} sh -c {sh_quote(cmd)}" if TIME else cmd
    t0 = time.perf_counter()
    t_cpu0 = os.times()
    proc = subprocess.run(wrapped, shell=True, env={**os.environ, **(env or {})}, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):  # oomdoctor exits 1 when it finds a failure; grep when none
        raise SystemExit(f"bench: command failed with exit code {proc.returncode}: {cmd}")
    if TIME:
        m = re.findall(r"^([\d.]+) ([\d.]+) (\d+)\s*$", stats.read_text(), re.M)
        user, sys_, rss = m[-1]
        run.add(wall, float(user) + float(sys_), int(rss))
    else:
        t_cpu1 = os.times()
        cpu = (t_cpu1.children_user - t_cpu0.children_user) + (t_cpu1.children_system - t_cpu0.children_system)
        run.add(wall, cpu, 0)
    return run


def piped(reader: list[str], log: Path, written: Run, exited: Run, env: dict[str, str] | None = None) -> None:
    """``cat LOG | READER > /dev/null``: seconds until cat has written everything (``written``)
    and until the reader exits (``exited``); CPU of both processes; peak RSS of the reader."""
    t0 = time.perf_counter()
    writer = subprocess.Popen(["cat", str(log)], stdout=subprocess.PIPE)
    proc = subprocess.Popen(
        reader, stdin=writer.stdout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    assert writer.stdout is not None
    writer.stdout.close()
    _, w_status, w_use = os.wait4(writer.pid, 0)
    t_written = time.perf_counter() - t0
    _, r_status, r_use = os.wait4(proc.pid, 0)
    t_exited = time.perf_counter() - t0
    writer.returncode = os.waitstatus_to_exitcode(w_status)
    proc.returncode = os.waitstatus_to_exitcode(r_status)
    if writer.returncode != 0 or proc.returncode not in (0, 1):
        raise SystemExit(f"bench: cat {log} | {' '.join(reader)} failed: {writer.returncode}, {proc.returncode}")
    cpu = w_use.ru_utime + w_use.ru_stime + r_use.ru_utime + r_use.ru_stime
    written.add(t_written, cpu, r_use.ru_maxrss)  # KiB on Linux
    exited.add(t_exited, cpu, r_use.ru_maxrss)


def sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def best(n: int, cmd: str, env: dict[str, str] | None = None) -> Run:
    run = Run()
    for _ in range(n):
        timed(cmd, env, run)
    return run


def hyperscan_ok() -> bool:
    try:
        import hyperscan  # noqa: F401
    except ImportError:
        return False
    return True


def long_line(size: int) -> Path:
    path = HERE / "out" / f"one-line-{size}.log"
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
    ap.add_argument("--line-size", type=int, default=200_000_000, help="bytes of the newline-less line")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each timed command (best is kept)")
    ap.add_argument("--no-pure", action="store_true", help="skip the pure-Python post-mortem")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("--no-readme", action="store_true", help="do not write the table into README.md")
    args = ap.parse_args()

    load_before = _load()
    # what a wheel install has: byte-compiled modules (with PYTHONDONTWRITEBYTECODE set, or an
    # editable install never run before, every run would compile oomdoctor from source)
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "oomdoctor")], check=True)
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
    grep_cmd = f"LC_ALL=C grep -c -i -E {sh_quote(pat)} {log} > {HERE / 'out' / 'grep-count.txt'}"
    ours = f"{' '.join(OOMDOCTOR)} -f json {log} > /dev/null"
    grep, fast, pure, pure_one = Run(), Run(), Run(), Run()
    for _ in range(args.repeat):  # interleaved, so that load from elsewhere hits both sides alike
        timed(grep_cmd, run=grep)
        if hs:
            timed(ours, {"OOMDOCTOR_PREFILTER": "hyperscan"}, fast)
    if not args.no_pure:
        timed(ours, {"OOMDOCTOR_PREFILTER": "python"}, pure)
        timed(ours, {"OOMDOCTOR_PREFILTER": "python", "OOMDOCTOR_WORKERS": "0"}, pure_one)
        timed(grep_cmd, run=grep)

    def vs(r: Run, base: Run) -> tuple[str, str, str]:
        return (
            f"{r.wall:.2f} s wall, {r.cpu:.2f} s CPU",
            f"{base.wall:.2f} s wall, {base.cpu:.2f} s CPU",
            f"{r.wall / base.wall:.2f}× wall, {r.cpu / base.cpu:.2f}× CPU",
        )

    if hs:
        row("post-mortem, hyperscan (vs grep)", *vs(fast, grep), "≤ 1.0×")
    else:
        row("post-mortem, hyperscan (vs grep)", "hyperscan not importable", "", "", "≤ 1.0×")
    if not args.no_pure:
        workers = min(os.cpu_count() or 1, 8)
        row(f"post-mortem, pure Python, {workers} worker processes (vs grep)", *vs(pure, grep), "≤ 3×")
        row("post-mortem, pure Python, one process (`OOMDOCTOR_WORKERS=0`)", *vs(pure_one, grep), "≤ 3×")
    catcat, catcat_exit, pipe, pipe_exit = Run(), Run(), Run(), Run()
    for _ in range(args.repeat):
        piped(["cat"], log, catcat, catcat_exit)
        piped(OOMDOCTOR, log, pipe, pipe_exit)
    mb = size / 1e6
    row(
        "pipe passthrough throughput (vs cat\\|cat): size / seconds until `cat` has written all",
        f"{mb / pipe.wall:.0f} MB/s ({pipe.wall:.2f} s; oomdoctor exits after {pipe_exit.wall:.2f} s; "
        f"{pipe.cpu:.2f} s CPU)",
        f"{mb / catcat.wall:.0f} MB/s ({catcat.wall:.2f} s, {catcat.cpu:.2f} s CPU)",
        f"{catcat.wall / pipe.wall:.2f}× ({catcat_exit.wall / pipe_exit.wall:.2f}× until exit)",
        "≥ 0.5×",
    )
    rss = {
        "post-mortem, hyperscan": fast.rss,
        "post-mortem, pure": pure.rss,
        "post-mortem, pure, one process": pure_one.rss,
        "pipe mode": pipe.rss,
    }
    line = long_line(args.line_size)
    label = f"{args.line_size / 1e6:.0f} MB line, no newline"
    rss[label] = timed(f"{' '.join(OOMDOCTOR)} -f json {line} > /dev/null").rss
    rss[label + ", pipe"] = timed(f"cat {line} | {' '.join(OOMDOCTOR)} > /dev/null 2>/dev/null").rss
    worst = max(rss.values())
    row(
        "peak RSS (worst of the runs)",
        f"{worst / 1024:.0f} MiB",
        "; ".join(f"{k} {v / 1024:.0f} MiB" for k, v in rss.items() if v),
        "",
        "≤ 80 MiB",
    )
    small = small_log()
    imp, tiny, bare = Run(), Run(), Run()
    for _ in range(7):
        timed(f'{PY} -c "import typer, rich, pydantic, jsonschema, regex"', run=imp)
        timed(f"{' '.join(OOMDOCTOR)} {small} > /dev/null", run=tiny)
        timed(f'{PY} -c "pass"', run=bare)
    ours_small, base_small, ratio_small = vs(tiny, imp)
    row(
        "50-line log end to end (vs importing the deps)",
        ours_small,
        f"{base_small} (`python3 -c pass`: {bare.wall:.2f} s)",
        f"{ratio_small} ({tiny.wall / bare.wall:.1f}× `python3 -c pass`)",
        "≤ 2×",
    )
    lat = live_latency({})
    row("live diagnosis latency", f"{lat:.2f} s" if lat is not None else "none in 10 s", "", "", "≤ 1 s")
    t_cat = best(1, f"cat {log} > /dev/null").wall
    t_catcat = catcat.wall

    prefilter = "hyperscan" if hs else "pure Python"
    lines = [
        "# Benchmark results",
        "",
        f"`python bench/run.py --size {genlog.size_label(args.size)}` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; log: {log.name} ({size / 2**30:.2f} GiB, "
        f"{len(trigs)} triggers); grep: `LC_ALL=C grep -c -i -E` of the same triggers; "
        f"baselines cat {t_cat:.2f} s, cat|cat {t_catcat:.2f} s. Default prefilter here: {prefilter}. "
        f"Modules byte-compiled first, as in a wheel install. "
        f"Load average before/after: {load_before} / {_load()} (other work on the machine skews wall times).",
        "",
        "| measure | oomdoctor | baseline | ratio | target |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows),
        "",
    ]
    args.results.write_text("\n".join(lines))
    print("\n".join(lines))
    if not args.no_readme:
        write_readme(ROOT / "README.md", lines[2], lines[4:-1])


BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def write_readme(readme: Path, setting: str, table: list[str]) -> None:
    """Put the table (and the line saying how it was measured) between the README's markers."""
    text = readme.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"bench: {readme} has no {BEGIN} ... {END} markers; table not written", file=sys.stderr)
        return
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = "\n".join(["", setting, "", *table, ""])
    readme.write_text(f"{head}{BEGIN}\n{body}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    main()
