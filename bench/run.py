"""Benchmark oomdoctor against grep and cat on generated logs of several shapes, side by side, in one run.

    python bench/run.py                                  # every shape, 1 GiB each, writes bench/RESULTS.md
    python bench/run.py --size 64MiB --repeat 1          # quicker (start-up then weighs in the ratios)
    python bench/run.py --shapes vllm-stats,hf-trainer   # some shapes (see bench/genlog.py)

For each log shape (``bench/logshapes/``: vLLM serving, vLLM with a stats line every other line,
Hugging Face Trainer progress, DeepSpeed behind ``[rankN]:``, docker/Kubernetes JSON-wrapped vLLM
(request logs; stats every other line), llama.cpp server, "memory" on one line in ten, SGLang, TGI
and ollama serving), measured
side by side on the same machine (ratios are what the targets are about):

- post-mortem wall and CPU time (``oomdoctor -f json LOG``) with hyperscan and with the
  pure-Python prefilter (with its worker processes, and in one process), against ``grep -c -i -E``
  of the same triggers (``LC_ALL=C``); CPU time counts the workers too;
- pipe passthrough (``cat LOG | oomdoctor > /dev/null``) against ``cat LOG | cat > /dev/null``:
  throughput is the log's size over the seconds until ``cat`` has written all of it, i.e. how
  long the pipe held the writer up, which is what a server writing into oomdoctor feels; the
  seconds until oomdoctor exits (it then analyses the input it still holds and prints) are shown
  too;
- peak RSS (``/usr/bin/time``) of each run;
- whether the findings are identical: the JSON reports of hyperscan and of the workers against
  the one-process pure path's (source names aside), and whether that report holds exactly the
  shape's four failures (their kind, four times, and nothing else); pipe mode's failures are
  counted too: behind ``cat`` it is flooded and only sifts most of the input for failures, but
  with hyperscan it must still find all four. A missed count or a differing report makes the run
  exit with status 1 (after writing the tables).

Once per run, not per shape: peak RSS on a 200 MB line without a newline, a 50-line log end to
end against importing the CLI's dependencies, and live latency (the last line of an OOM block
written into a pipe that stays open -> the diagnosis on stderr).

The tables go to ``bench/RESULTS.md`` and, between the ``<!-- bench:begin -->`` and
``<!-- bench:end -->`` markers, into the README (``--no-readme`` leaves the README alone). The
ratio table has one row per shape: the targets are the same on every shape, so a column shows at a
glance which shape misses one, and a shape added later is one more row. Absolute seconds, per
shape, are in a second table in RESULTS.md only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import genlog  # noqa: E402

PY = sys.executable
OOMDOCTOR = [PY, "-m", "oomdoctor"]
TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None  # Debian's `time` package
OUT = HERE / "out"
#: the report every other path is compared with
REFERENCE = "pure, one process"
OOM_BLOCKS = genlog.OOM_BLOCKS


def triggers() -> list[str]:
    """The literal triggers the prefilter looks for: the rule pack's and the scanner's own."""
    from oomdoctor.rulepack import default_pack

    trigs = list(default_pack().all_triggers())
    try:
        from oomdoctor.scanner import _BUILTIN_TRIGGERS as builtin
    except ImportError:  # moved: grep then looks for the rule pack's triggers only
        print("bench: oomdoctor.scanner._BUILTIN_TRIGGERS not found; grep gets the rule pack's only", file=sys.stderr)
        builtin = ()
    return [*trigs, *builtin]


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


def normalised(path: Path) -> dict[str, Any]:
    """A JSON report without the names of its input (a file's path, or ``<stdin>``)."""
    report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    report.pop("sources", None)
    for f in report.get("findings", []):
        f.get("location", {}).pop("source", None)
    return report


@dataclass
class ShapeResult:
    """Every measure of one shape."""

    shape: genlog.Shape
    log: Path
    size: int
    grep: Run = field(default_factory=Run)
    runs: dict[str, Run] = field(default_factory=dict)  # post-mortem, by prefilter path
    catcat: Run = field(default_factory=Run)
    catcat_exit: Run = field(default_factory=Run)
    pipe: Run = field(default_factory=Run)
    pipe_exit: Run = field(default_factory=Run)
    reports: dict[str, Path] = field(default_factory=dict)  # JSON report, by path (pipe mode too)

    def differing(self) -> list[str]:
        """The paths whose report differs from the one-process pure path's."""
        if REFERENCE not in self.reports:
            return []
        ref = normalised(self.reports[REFERENCE])
        return [n for n, p in self.reports.items() if n not in (REFERENCE, "pipe") and normalised(p) != ref]

    def found(self, name: str | None = None) -> tuple[int, Counter[str]]:
        """How many findings of the expected kind a report holds (the reference's by default), and
        how many of each other kind."""
        name = name or (REFERENCE if REFERENCE in self.reports else next(iter(self.reports), None))
        if name is None or not self.reports[name].exists():
            return 0, Counter()
        kinds = Counter(f["kind"] for f in normalised(self.reports[name])["findings"])
        expected = kinds.pop(self.shape.expect, 0)
        return expected, kinds

    def found_cell(self, name: str | None = None) -> str:
        n, other = self.found(name)
        cell = f"{n} × {self.shape.expect}" + ("" if n == OOM_BLOCKS else " ✗")
        if other:
            cell += " ✗; also " + ", ".join(f"{c} × {k}" for k, c in sorted(other.items()))
        return cell


def measure(shape: str, size: int, repeat: int, hs: bool, pure: bool, pat: str) -> ShapeResult:
    """Every per-shape measure, the timed commands of a kind interleaved with their baseline."""
    log = genlog.generate(size, shape=shape)
    res = ShapeResult(genlog.SHAPES[shape], log, log.stat().st_size)
    reports = OUT / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    subprocess.run(f"cat {log} > /dev/null", shell=True, check=False)  # warm the page cache
    # not > /dev/null: GNU grep then stops at the first match
    grep_cmd = f"LC_ALL=C grep -c -i -E {sh_quote(pat)} {log} > {OUT / 'grep-count.txt'}"
    paths: list[tuple[str, dict[str, str]]] = []
    if hs:
        paths.append(("hyperscan", {"OOMDOCTOR_PREFILTER": "hyperscan"}))
    if pure:
        paths.append(("pure, workers", {"OOMDOCTOR_PREFILTER": "python"}))
        paths.append((REFERENCE, {"OOMDOCTOR_PREFILTER": "python", "OOMDOCTOR_WORKERS": "0"}))
    for name, _ in paths:
        res.runs[name] = Run()
        res.reports[name] = reports / f"{shape}-{name.replace(', ', '-').replace(' ', '-')}.json"
    for _ in range(repeat):  # interleaved, so that load from elsewhere hits both sides alike
        timed(grep_cmd, run=res.grep)
        for name, env in paths:
            timed(f"{' '.join(OOMDOCTOR)} -f json -o {res.reports[name]} {log}", env, res.runs[name])
    res.reports["pipe"] = reports / f"{shape}-pipe.json"
    for _ in range(repeat):
        piped(["cat"], log, res.catcat, res.catcat_exit)
        piped([*OOMDOCTOR, "-f", "json", "-o", str(res.reports["pipe"])], log, res.pipe, res.pipe_exit)
    return res


def _ratio(x: float, base: float, target: float, at_most: bool = True) -> str:
    if base <= 0 or x <= 0:  # below the clock's resolution (0.01 s of CPU)
        return "n/a"
    r = x / base
    miss = r > target if at_most else r < target
    return f"{r:.2f}×" + (" ✗" if miss else "")


def ratio_cell(r: Run | None, base: Run, target: float) -> str:
    if r is None:
        return "not run"
    return f"{_ratio(r.wall, base.wall, target)} (CPU {_ratio(r.cpu, base.cpu, target)})"


def shape_rows(results: list[ShapeResult], workers: int) -> list[str]:
    """The ratio table: one row per shape, one column per target."""
    head = [
        "shape",
        "post-mortem, hyperscan ÷ grep (≤ 1.0×)",
        f"pure Python, {workers} workers ÷ grep (≤ 3×)",
        "pure Python, one process ÷ grep (≤ 3×)",
        "passthrough ÷ cat\\|cat, at the writer (until exit) (≥ 0.5×)",
        "peak RSS (≤ 80 MiB)",
        "hyperscan and workers: findings identical to pure, one process",
        f"failures found ({OOM_BLOCKS} expected)",
        "pipe mode: failures found (behind `cat`: a flood, sifted)",
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in results:
        pipe = (
            f"{_ratio(r.catcat.wall, r.pipe.wall, 0.5, at_most=False)} "
            f"({_ratio(r.catcat_exit.wall, r.pipe_exit.wall, 0.5, at_most=False)})"
        )
        rss = max([x.rss for x in r.runs.values()] + [r.pipe.rss]) / 1024
        differ = r.differing()
        same = "yes" if not differ else "no ✗: " + ", ".join(differ)
        rows.append(
            "| "
            + " | ".join(
                [
                    f"{r.shape.name}: {r.shape.about}",
                    ratio_cell(r.runs.get("hyperscan"), r.grep, 1.0),
                    ratio_cell(r.runs.get("pure, workers"), r.grep, 3.0),
                    ratio_cell(r.runs.get(REFERENCE), r.grep, 3.0),
                    pipe,
                    f"{rss:.0f} MiB" + (" ✗" if rss > 80 else ""),
                    same,
                    r.found_cell(),
                    r.found_cell("pipe"),
                ]
            )
            + " |"
        )
    return rows


def seconds_rows(results: list[ShapeResult]) -> list[str]:
    """The absolute figures behind the ratios, per shape."""
    head = ["shape", "size", "grep", "hyperscan", "pure, workers", "pure, one process", "cat\\|cat",
            "pipe: writer / exit", "peak RSS by run (MiB)"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]

    def s(r: Run | None) -> str:
        return "—" if r is None else f"{r.wall:.2f} s ({r.cpu:.2f} s CPU)"

    for r in results:
        rss = ", ".join(f"{k} {v.rss / 1024:.0f}" for k, v in [*r.runs.items(), ("pipe", r.pipe)])
        rows.append(
            "| "
            + " | ".join(
                [
                    r.shape.name,
                    f"{r.size / 2**20:.0f} MiB",
                    s(r.grep),
                    s(r.runs.get("hyperscan")),
                    s(r.runs.get("pure, workers")),
                    s(r.runs.get(REFERENCE)),
                    s(r.catcat),
                    f"{r.pipe.wall:.2f} s / {r.pipe_exit.wall:.2f} s ({r.pipe.cpu:.2f} s CPU)",
                    rss,
                ]
            )
            + " |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=genlog.parse_size, default=genlog.parse_size("1GiB"), help="bytes per log")
    ap.add_argument("--shapes", type=genlog.shape_names, default=list(genlog.SHAPES),
                    help=f"comma-separated, or 'all' (default): {', '.join(genlog.SHAPES)}")
    ap.add_argument("--line-size", type=int, default=200_000_000, help="bytes of the newline-less line")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each timed command (best is kept)")
    ap.add_argument("--no-pure", action="store_true", help="skip the pure-Python post-mortem")
    ap.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    ap.add_argument("--no-readme", action="store_true", help="do not write the tables into README.md")
    args = ap.parse_args()

    load_before = _load()
    # what a wheel install has: byte-compiled modules (with PYTHONDONTWRITEBYTECODE set, or an
    # editable install never run before, every run would compile oomdoctor from source)
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "oomdoctor")], check=True)
    trigs = triggers()
    pat = grep_pattern(trigs)
    hs = hyperscan_ok()
    workers = min(os.cpu_count() or 1, 8)
    results: list[ShapeResult] = []
    for name in args.shapes:
        r = measure(name, args.size, args.repeat, hs, not args.no_pure, pat)
        results.append(r)
        print("\n".join(shape_rows([r], workers)[2:]), flush=True)

    once: list[tuple[str, str, str, str, str]] = []

    def row(what: str, ours: str, base: str, ratio: str, target: str) -> None:
        once.append((what, ours, base, ratio, target))
        print(f"{what}: {ours} vs {base} -> {ratio} (target {target})", flush=True)

    line = long_line(args.line_size)
    label = f"{args.line_size / 1e6:.0f} MB line, no newline"
    rss = {
        label: timed(f"{' '.join(OOMDOCTOR)} -f json {line} > /dev/null").rss,
        label + ", pipe": timed(f"cat {line} | {' '.join(OOMDOCTOR)} > /dev/null 2>/dev/null").rss,
    }
    worst = max(rss.values())
    row(
        "peak RSS on one long line",
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
    row(
        "50-line log end to end (vs importing the deps)",
        f"{tiny.wall:.2f} s wall, {tiny.cpu:.2f} s CPU",
        f"{imp.wall:.2f} s wall, {imp.cpu:.2f} s CPU (`python3 -c pass`: {bare.wall:.2f} s)",
        f"{tiny.wall / imp.wall:.2f}× wall, {tiny.cpu / imp.cpu:.2f}× CPU ({tiny.wall / bare.wall:.1f}× `python3 -c pass`)",
        "≤ 2×",
    )
    lat = live_latency({})
    row("live diagnosis latency", f"{lat:.2f} s" if lat is not None else "none in 10 s", "", "", "≤ 1 s")

    prefilter = "hyperscan" if hs else "pure Python"
    shapes_arg = "" if args.shapes == list(genlog.SHAPES) else f" --shapes {','.join(args.shapes)}"
    setting = (
        f"`python bench/run.py --size {genlog.size_label(args.size)}{shapes_arg} --repeat {args.repeat}` on "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; {len(trigs)} triggers; "
        f"grep: `LC_ALL=C grep -c -i -E` of the same triggers. Default prefilter here: {prefilter}. "
        f"Modules byte-compiled first, as in a wheel install. Ratios of wall time (of CPU time in brackets), "
        f"best of {args.repeat}; ✗ marks a missed target. "
        f"Load average before/after: {load_before} / {_load()} (other work on the machine skews wall times)."
    )
    once_table = [
        "| measure (once, not per shape) | oomdoctor | baseline | ratio | target |",
        "| --- | --- | --- | --- | --- |",
        *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in once),
    ]
    tables = [*shape_rows(results, workers), "", *once_table]
    lines = [
        "# Benchmark results",
        "",
        setting,
        "",
        *tables,
        "",
        "Seconds per shape (wall, CPU in brackets; best of the repeats):",
        "",
        *seconds_rows(results),
        "",
    ]
    args.results.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    if not args.no_readme:
        write_readme(ROOT / "README.md", setting, tables)
    problems = []
    for r in results:
        name = r.shape.name
        if r.differing():
            problems.append(f"{name}: reports differ from the one-process pure path's: {', '.join(r.differing())}")
        for path in [n for n in r.reports if n != "pipe"] + (["pipe"] if hs else []):
            n, other = r.found(path)
            if n != OOM_BLOCKS or other:
                problems.append(f"{name}, {path}: {r.found_cell(path)} (expected {OOM_BLOCKS} × {r.shape.expect})")
    for problem in problems:
        print(f"bench: {problem}", file=sys.stderr)
    if problems:
        raise SystemExit(1)


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
