#!/usr/bin/env python3
"""A small mutation run: change one comparison or number at a time and see whether tests notice.

    python tools/mutate.py oomdoctor/advisor/remedies_sglang.py
    python tools/mutate.py oomdoctor/advisor/memory_model.py --tests tests/test_survivors.py tests/test_advisor.py
    python tools/mutate.py oomdoctor/advisor/catalog.py --list        # the mutants, without running
    python tools/mutate.py --set issue38                               # every module of SETS["issue38"], one table
    python tools/mutate.py --set issue38 --retry run.log               # only the survivors run.log printed

Each mutant is one change, read from the module's syntax tree (:mod:`ast`):

- a comparison operator flipped at its boundary (``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``,
  ``in`` ↔ ``not in``, ``is`` ↔ ``is not``);
- a number changed by one step (an int ``n`` → ``n + 1``; a float ``x`` → ``x + 0.01`` below 1,
  else ``x × 1.1``; ``0.0`` → ``0.01``). Docstrings, f-strings and annotations are left alone.

The mutated module is never written into the checkout: each run is a fresh ``pytest`` session
(serial, ``-x``) in a child forked from this process, after pytest, its plugins and the third-party
libraries are imported once (oomdoctor itself never is, here), whose import system serves the
mutated source in place of the module's file, so runs do not disturb other work in the tree. A mutant is *killed* when that run fails (or passes
``--timeout``), *survives* when it passes. Tests that start their own Python process do not see
the mutant; give ``--tests`` the tests that exercise the module in-process.

An *equivalent* mutant (one that no input can tell apart from the original) is left out when
``tools/mutate_equivalent.toml`` lists it, with the reason it cannot change behaviour; the list
matches a mutant by module, change and the text of its source line, so it survives edits that move
lines.

Exit status: 0 when the kill rate reaches ``--min-rate`` (default 0: report only), else 1.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent

#: module -> the tests run against its mutants when --tests is not given
DEFAULT_TESTS: dict[str, list[str]] = {
    "oomdoctor/advisor/memory_model.py": ["tests/test_survivors.py", "tests/test_advisor.py", "tests/test_fit.py"],
    "oomdoctor/advisor/prescription.py": ["tests/test_survivors.py", "tests/test_advisor_causes.py"],
    "oomdoctor/advisor/remedies_vllm.py": ["tests/test_remedies_vllm_table.py", "tests/test_survivors.py", "tests/test_advisor.py"],
    "oomdoctor/advisor/remedies_sglang.py": ["tests/test_survivors.py", "tests/test_remedies_sglang.py", "tests/test_sglang_pages.py"],
    "oomdoctor/advisor/remedies_ggml.py": ["tests/test_remedies_ggml_table.py", "tests/test_survivors.py", "tests/test_remedies_ggml.py"],
    "oomdoctor/advisor/catalog.py": ["tests/test_catalog_table.py", "tests/test_survivors.py", "tests/test_gpu_catalog.py", "tests/test_advisor.py"],
    "oomdoctor/advisor/command.py": ["tests/test_command_table.py", "tests/test_survivors.py", "tests/test_command.py", "tests/test_command_from_dump.py"],
    "oomdoctor/advisor/engine_args.py": ["tests/test_survivors.py", "tests/test_engine_args.py"],
    "oomdoctor/advisor/engine_samples.py": ["tests/test_survivors.py", "tests/test_engine_args.py"],
    "oomdoctor/redaction.py": ["tests/test_survivors.py", "tests/test_redaction.py"],
    "oomdoctor/rulepack/loader.py": ["tests/test_rulepack_loader.py", "tests/test_survivors.py", "tests/test_rule_examples.py",
                                     "tests/test_startup.py"],
    "oomdoctor/scan/matching.py": ["tests/test_matching.py", "tests/test_survivors.py", "tests/test_scanner.py"],
    "oomdoctor/server/limits.py": ["tests/test_server_limits.py"],
    # the rest of advisor/ (issue 38 §4): each module with the fast in-process tests that exercise it
    "oomdoctor/advisor/remedies_host.py": ["tests/test_remedies_host.py"],
    "oomdoctor/advisor/remedies_tgi.py": ["tests/test_remedies_tgi.py", "tests/test_tgi_flags.py"],
    "oomdoctor/advisor/remedies_training.py": ["tests/test_remedies_training.py", "tests/test_training_frames.py"],
    "oomdoctor/advisor/remedies_trtllm.py": ["tests/test_remedies_trtllm.py"],
    "oomdoctor/advisor/remedies_weights.py": ["tests/test_remedies_weights.py"],
    "oomdoctor/advisor/remedies_xla.py": ["tests/test_remedies_xla.py"],
    "oomdoctor/advisor/remedies_vllm_rs.py": ["tests/test_vllm_rs.py"],
    "oomdoctor/advisor/remedies_rl.py": ["tests/test_advisor_first_remedy.py", "tests/test_advisor_stated_facts.py"],
    "oomdoctor/advisor/fit.py": ["tests/test_fit.py", "tests/test_survivors.py"],
    "oomdoctor/advisor/sglang_fit.py": ["tests/test_sglang_fit.py", "tests/test_remedies_sglang.py"],
    "oomdoctor/advisor/vllm_budget.py": ["tests/test_vllm_startups.py", "tests/test_fit.py"],
    "oomdoctor/advisor/weights.py": ["tests/test_survivors.py", "tests/test_fit.py"],
    "oomdoctor/advisor/values.py": ["tests/test_survivors.py", "tests/test_bounds.py"],
    "oomdoctor/advisor/versions.py": ["tests/test_versions.py", "tests/test_engine_args.py", "tests/test_llamacpp_build.py"],
    "oomdoctor/advisor/knobs.py": ["tests/test_product_knobs.py"],
    "oomdoctor/advisor/product_knobs.py": ["tests/test_product_knobs.py", "tests/test_advisor_first_remedy.py"],
    "oomdoctor/advisor/ranking.py": ["tests/test_advisor.py", "tests/test_advisor_first_remedy.py"],
    "oomdoctor/advisor/cause.py": ["tests/test_advisor_causes.py"],
    "oomdoctor/advisor/account.py": ["tests/test_model_agreement.py"],
    "oomdoctor/advisor/siblings.py": ["tests/test_advisor_first_remedy.py"],
    "oomdoctor/advisor/unsized.py": ["tests/test_advisor_first_remedy.py", "tests/test_remedies_ggml_table.py"],
}

#: named sets of modules for ``--set``, each run with its DEFAULT_TESTS
SETS: dict[str, list[str]] = {
    # issue 38: the modules that decide users' answers
    "issue38": [
        "oomdoctor/advisor/memory_model.py",
        "oomdoctor/advisor/prescription.py",
        "oomdoctor/advisor/remedies_sglang.py",
        "oomdoctor/advisor/remedies_ggml.py",
        "oomdoctor/advisor/catalog.py",
        "oomdoctor/advisor/command.py",
        "oomdoctor/advisor/engine_args.py",
        "oomdoctor/advisor/engine_samples.py",
        "oomdoctor/scan/matching.py",
        "oomdoctor/rulepack/loader.py",
        "oomdoctor/redaction.py",
        "oomdoctor/server/limits.py",
        "oomdoctor/advisor/remedies_vllm.py",  # the largest (over 300 mutants): last
    ],
    # the rest of advisor/ (issue 38 §4 names the whole package); rates in the README where measured
    "advisor": [
        "oomdoctor/advisor/remedies_host.py",
        "oomdoctor/advisor/remedies_tgi.py",
        "oomdoctor/advisor/remedies_training.py",
        "oomdoctor/advisor/remedies_trtllm.py",
        "oomdoctor/advisor/remedies_weights.py",
        "oomdoctor/advisor/remedies_xla.py",
        "oomdoctor/advisor/remedies_vllm_rs.py",
        "oomdoctor/advisor/remedies_rl.py",
        "oomdoctor/advisor/fit.py",
        "oomdoctor/advisor/sglang_fit.py",
        "oomdoctor/advisor/vllm_budget.py",
        "oomdoctor/advisor/weights.py",
        "oomdoctor/advisor/values.py",
        "oomdoctor/advisor/versions.py",
        "oomdoctor/advisor/knobs.py",
        "oomdoctor/advisor/product_knobs.py",
        "oomdoctor/advisor/ranking.py",
        "oomdoctor/advisor/cause.py",
        "oomdoctor/advisor/account.py",
        "oomdoctor/advisor/siblings.py",
        "oomdoctor/advisor/unsized.py",
    ],
}

EQUIVALENT = ROOT / "tools" / "mutate_equivalent.toml"

#: imported once before the first mutant, so that each forked run only imports oomdoctor and the tests
_PRELOAD = ("pytest", "_pytest.pytester", "hypothesis", "hypothesis.strategies", "xdist", "pydantic", "regex",
            "rich", "rich.console", "typer", "jsonschema", "httpx", "fastapi", "fastapi.testclient", "starlette",
            "uvicorn", "prometheus_client", "yaml", "schemathesis")

_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


@dataclass
class Mutant:
    index: int
    line: int
    what: str


def _bumped(value: int | float) -> int | float:
    if isinstance(value, int):
        return value + 1
    if value == 0:
        return 0.01
    return round(value + 0.01, 6) if abs(value) < 1 else round(value * 1.1, 6)


def _skipped(tree: ast.AST) -> set[int]:
    """ids of nodes not to mutate: docstrings, f-strings, annotations."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            out.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.AnnAssign):
            out.update(id(n) for n in ast.walk(node.annotation))
        if isinstance(node, ast.arg) and node.annotation is not None:
            out.update(id(n) for n in ast.walk(node.annotation))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            out.update(id(n) for n in ast.walk(node.returns))
    return out


def _sites(tree: ast.AST) -> list[tuple[ast.AST, int | None]]:
    """Mutation sites in a fixed order: (Compare, operator index) or (Constant, None)."""
    skip = _skipped(tree)
    sites: list[tuple[ast.AST, int | None]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            sites.extend((node, i) for i, op in enumerate(node.ops) if type(op) in _FLIP)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, int | float)
              and not isinstance(node.value, bool)):
            sites.append((node, None))
    return sites


def mutants(source: str) -> list[Mutant]:
    out = []
    for k, (node, op) in enumerate(_sites(ast.parse(source))):
        if op is not None:
            assert isinstance(node, ast.Compare)
            old = type(node.ops[op])
            what = f"{_SYMBOL[old]} -> {_SYMBOL[_FLIP[old]]}"
        else:
            assert isinstance(node, ast.Constant) and isinstance(node.value, int | float)
            what = f"{node.value!r} -> {_bumped(node.value)!r}"
        out.append(Mutant(k, getattr(node, "lineno", 0), what))
    return out


def mutated(source: str, index: int) -> str:
    tree = ast.parse(source)
    node, op = _sites(tree)[index]
    if op is not None:
        assert isinstance(node, ast.Compare)
        node.ops[op] = _FLIP[type(node.ops[op])]()
    else:
        assert isinstance(node, ast.Constant) and isinstance(node.value, int | float)
        node.value = _bumped(node.value)
    return ast.unparse(ast.fix_missing_locations(copy.deepcopy(tree)))


class _Loader(importlib.abc.SourceLoader):
    def __init__(self, original: str, mutated: str) -> None:
        self.original, self.mutated = original, mutated

    def get_filename(self, fullname: str) -> str:
        return self.original

    def get_data(self, path: str) -> bytes:
        with open(self.mutated if path == self.original else path, "rb") as fh:
            return fh.read()


class _Finder(importlib.abc.MetaPathFinder):
    """Serves ``name`` from the mutated file (tracebacks and ``__file__`` still name the original)."""

    def __init__(self, name: str, original: str, mutated: str) -> None:
        self.name, self.loader = name, _Loader(original, mutated)

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.loader.original, loader=self.loader)


def _preload() -> None:
    """Import pytest, its plugins and the libraries the tests use, never oomdoctor itself."""
    for name in _PRELOAD:
        with contextlib.suppress(Exception):  # an absent optional library is the child's business
            importlib.import_module(name)
    for ep in importlib.metadata.entry_points(group="pytest11"):
        with contextlib.suppress(Exception):
            ep.load()
    assert not any(m == "oomdoctor" or m.startswith("oomdoctor.") for m in sys.modules), "oomdoctor preloaded"


def _child(module: str, mutated_path: str, original: Path, tests: list[str]) -> int:
    import pytest

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.chdir(ROOT)
    sys.dont_write_bytecode = True
    sys.meta_path.insert(0, _Finder(module, str(original), mutated_path))
    return int(pytest.main(["-x", "-q", "-n0", "-p", "no:randomly", "-p", "no:cacheprovider", "--no-header", *tests]))


def _run(module: str, mutated_path: str, original: Path, tests: list[str], timeout: float) -> str:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            code = _child(module, mutated_path, original, tests)
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "killed (timeout)"
        time.sleep(0.02)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return "survived"
    if code == 1:
        return "killed"
    return f"killed (pytest exit {code})"


def equivalents(path: Path = EQUIVALENT) -> dict[tuple[str, str, str], str]:
    """(module, change, stripped source line) -> the reason the mutant cannot change behaviour."""
    if not path.exists():
        return {}
    out: dict[tuple[str, str, str], str] = {}
    for e in tomllib.loads(path.read_text(encoding="utf-8")).get("mutant", []):
        if not str(e.get("reason", "")).strip():
            raise SystemExit(f"{path}: {e.get('module')}: {e.get('change')}: an exclusion needs a reason")
        out[(e["module"], e["change"], e["code"].strip())] = e["reason"]
    return out


def _module_name(path: Path) -> str:
    parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass
class Outcome:
    module: str
    mutants: int
    killed: int
    excluded: int
    survivors: list[Mutant]
    seconds: float

    @property
    def rate(self) -> float:
        return self.killed / self.mutants if self.mutants else 1.0


def _wanted_lines(spec: str) -> set[int]:
    wanted: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        wanted.update(range(int(lo), int(hi or lo) + 1))
    return wanted


def _todo(rel: str, source: str, lines: str | None, skip: dict[tuple[str, str, str], str]) -> tuple[list[Mutant], int]:
    todo = mutants(source)
    if lines:
        wanted = _wanted_lines(lines)
        todo = [m for m in todo if m.line in wanted]
    code = source.splitlines()
    kept = [m for m in todo if (rel, m.what, code[m.line - 1].strip()) not in skip]
    return kept, len(todo) - len(kept)


def run_module(rel: str, tests: list[str], lines: str | None, timeout: float, verbose: bool = True,
               only: set[tuple[int, str]] | None = None) -> Outcome | None:
    """Run every mutant of ``rel`` (or those on ``lines``, or those in ``only``: (line, change))."""
    path = ROOT / rel
    source = path.read_text(encoding="utf-8")
    todo, excluded = _todo(rel, source, lines, equivalents())
    if only is not None:
        todo = [m for m in todo if (m.line, m.what) in only]
    module = _module_name(path)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="oomdoctor-mutate-") as tmp:
        clean = Path(tmp) / "clean.py"
        clean.write_text(source, encoding="utf-8")
        baseline = _run(module, str(clean), path, tests, timeout=3600)
        took = time.monotonic() - started
        if baseline != "survived":
            print(f"{rel}: the tests fail without any mutant ({baseline}): fix them first", file=sys.stderr)
            return None
        limit = timeout or max(60.0, 5 * took)
        print(f"{rel}: {len(todo)} mutants ({excluded} equivalent left out), tests {' '.join(tests)} "
              f"(clean run {took:.1f} s)", flush=True)
        killed = 0
        survivors = []
        for m in todo:
            mpath = Path(tmp) / f"mutant_{m.index}.py"
            mpath.write_text(mutated(source, m.index), encoding="utf-8")
            verdict = _run(module, str(mpath), path, tests, limit)
            killed += verdict != "survived"
            if verdict == "survived":
                survivors.append(m)
            if verbose or verdict == "survived":
                print(f"  {rel}:{m.line}: {m.what}: {verdict}", flush=True)
    return Outcome(rel, len(todo), killed, excluded, survivors, time.monotonic() - started)


_LOG_TOTAL = re.compile(r"^(?P<rel>\S+\.py): killed (?P<killed>\d+) of (?P<n>\d+) mutants")
_LOG_SURVIVOR = re.compile(r"^  survivor (?P<rel>\S+\.py):(?P<line>\d+): (?P<what>.+)$")


Survivors = Counter[tuple[int, str]]


def read_log(text: str) -> dict[str, tuple[int, int, Survivors]]:
    """A previous run's output: module -> (killed, mutants, survivors as (line, change) -> count)."""
    totals: dict[str, tuple[int, int]] = {}
    survivors: dict[str, Survivors] = {}
    for line in text.splitlines():
        if m := _LOG_TOTAL.match(line):
            totals[m["rel"]] = (int(m["killed"]), int(m["n"]))
        elif m := _LOG_SURVIVOR.match(line):
            survivors.setdefault(m["rel"], Counter())[(int(m["line"]), m["what"])] += 1
    return {rel: (k, n, survivors.get(rel, Counter())) for rel, (k, n) in totals.items()}


def retry(rel: str, prior: tuple[int, int, Survivors], tests: list[str], timeout: float,
          verbose: bool) -> Outcome | None:
    """Only the survivors of a previous run: its killed stay killed (tests were only added), a
    survivor now listed as equivalent leaves the count, the others run again."""
    _killed_before, n_before, survivors = prior
    source = (ROOT / rel).read_text(encoding="utf-8")
    skip = equivalents()
    code = source.splitlines()
    now = [m for m in mutants(source) if (m.line, m.what) in survivors]
    now_equivalent = sum(1 for m in now if (rel, m.what, code[m.line - 1].strip()) in skip)
    # a survivor whose code is gone (the line was rewritten) is neither killed nor alive
    gone = sum(max(0, n - sum(1 for m in now if (m.line, m.what) == key)) for key, n in survivors.items())
    o = run_module(rel, tests, None, timeout, verbose, only=set(survivors))
    if o is None:
        return None
    total = n_before - now_equivalent - gone
    # what survives now are the retried mutants that survived again (a survivor's (line, change)
    # may match more mutants than the log listed, so counting kills would over-count)
    return Outcome(rel, total, max(0, total - len(o.survivors)), _todo(rel, source, None, skip)[1], o.survivors,
                   o.seconds)


def table(outcomes: list[Outcome]) -> str:
    rows = [f"| {'module':<40} | mutants | killed | equivalent | rate |", f"|{'-' * 42}|--------:|-------:|-----------:|-----:|"]
    for o in outcomes:
        rows.append(f"| {o.module:<40} | {o.mutants:>7} | {o.killed:>6} | {o.excluded:>10} | {o.rate:>4.0%} |")
    n = sum(o.mutants for o in outcomes)
    k = sum(o.killed for o in outcomes)
    e = sum(o.excluded for o in outcomes)
    rows.append(f"| {'total':<40} | {n:>7} | {k:>6} | {e:>10} | {(k / n if n else 1.0):>4.0%} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", type=Path, nargs="?", help="the module to mutate, e.g. oomdoctor/advisor/remedies_sglang.py")
    ap.add_argument("--set", dest="set_name", choices=sorted(SETS), help="every module of a named set, with its default tests")
    ap.add_argument("--tests", nargs="+", help="pytest arguments for each mutant (default: DEFAULT_TESTS)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--lines", help="only mutants on these lines: 10-40,55 (one module only)")
    ap.add_argument("--quiet", action="store_true", help="print survivors only, not every mutant")
    ap.add_argument("--retry", type=Path, metavar="LOG",
                    help="run only the survivors a previous run printed (its output saved in LOG) and count its kills")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per mutant (default: 5 × the clean run, at least 60)")
    ap.add_argument("--min-rate", type=float, default=0.0, help="exit 1 below this kill rate (0–1)")
    args = ap.parse_args(argv)
    if (args.module is None) == (args.set_name is None):
        ap.error("name one module or one --set")
    if args.set_name and (args.lines or args.tests):
        ap.error("--lines and --tests take one module, not a --set")

    rels = SETS[args.set_name] if args.set_name else [str(args.module.resolve().relative_to(ROOT))]
    if args.list:
        skip = equivalents()
        total = 0
        for rel in rels:
            todo, _ = _todo(rel, (ROOT / rel).read_text(encoding="utf-8"), args.lines, skip)
            for m in todo:
                print(f"{rel}:{m.line}: {m.what}")
            total += len(todo)
        print(f"{total} mutants")
        return 0
    for rel in rels:
        if not (args.tests or DEFAULT_TESTS.get(rel)):
            ap.error(f"no default tests for {rel}: give --tests")
    prior = read_log(args.retry.read_text(encoding="utf-8")) if args.retry else {}
    if args.retry:
        rels = [rel for rel in rels if rel in prior]
    _preload()
    outcomes = []
    for rel in rels:
        tests = args.tests or DEFAULT_TESTS[rel]
        if args.retry:
            o = retry(rel, prior[rel], tests, args.timeout, verbose=not args.quiet)
        else:
            o = run_module(rel, tests, args.lines, args.timeout, verbose=not args.quiet)
        if o is None:
            return 2
        outcomes.append(o)
        print(f"{rel}: killed {o.killed} of {o.mutants} mutants ({o.rate:.0%}) in {o.seconds:.0f} s", flush=True)
        for m in o.survivors:
            print(f"  survivor {rel}:{m.line}: {m.what}")
    print(table(outcomes))
    n = sum(o.mutants for o in outcomes)
    rate = sum(o.killed for o in outcomes) / n if n else 1.0
    return 0 if rate >= args.min_rate else 1


if __name__ == "__main__":
    sys.exit(main())
