#!/usr/bin/env python3
"""A small mutation run: change one comparison or number at a time and see whether tests notice.

    python tools/mutate.py oomdoctor/advisor/remedies_sglang.py
    python tools/mutate.py oomdoctor/advisor/memory_model.py --tests tests/test_survivors.py tests/test_advisor.py
    python tools/mutate.py oomdoctor/advisor/catalog.py --list        # the mutants, without running

Each mutant is one change, read from the module's syntax tree (:mod:`ast`):

- a comparison operator flipped at its boundary (``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``,
  ``in`` ↔ ``not in``, ``is`` ↔ ``is not``);
- a number changed by one step (an int ``n`` → ``n + 1``; a float ``x`` → ``x + 0.01`` below 1,
  else ``x × 1.1``; ``0.0`` → ``0.01``). Docstrings, f-strings and annotations are left alone.

The mutated module is never written into the checkout: each run is a fresh ``pytest`` process
(serial, ``-x``) whose import system serves the mutated source in place of the module's file, so
runs do not disturb other work in the tree. A mutant is *killed* when that run fails (or passes
``--timeout``), *survives* when it passes. Tests that start their own Python process do not see
the mutant; give ``--tests`` the tests that exercise the module in-process.

Exit status: 0 when the kill rate reaches ``--min-rate`` (default 0: report only), else 1.
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: module -> the tests run against its mutants when --tests is not given
DEFAULT_TESTS: dict[str, list[str]] = {
    "oomdoctor/advisor/memory_model.py": ["tests/test_survivors.py", "tests/test_advisor.py", "tests/test_fit.py"],
    "oomdoctor/advisor/prescription.py": ["tests/test_survivors.py", "tests/test_advisor_causes.py"],
    "oomdoctor/advisor/remedies_vllm.py": ["tests/test_survivors.py", "tests/test_advisor.py"],
    "oomdoctor/advisor/remedies_sglang.py": ["tests/test_survivors.py", "tests/test_remedies_sglang.py"],
    "oomdoctor/advisor/remedies_ggml.py": ["tests/test_survivors.py", "tests/test_remedies_ggml.py"],
    "oomdoctor/advisor/catalog.py": ["tests/test_survivors.py", "tests/test_gpu_catalog.py", "tests/test_advisor.py"],
    "oomdoctor/advisor/command.py": ["tests/test_survivors.py", "tests/test_command.py", "tests/test_command_from_dump.py"],
    "oomdoctor/advisor/engine_args.py": ["tests/test_survivors.py", "tests/test_engine_args.py"],
    "oomdoctor/redaction.py": ["tests/test_redaction.py"],
    "oomdoctor/rulepack/loader.py": ["tests/test_rule_examples.py", "tests/test_startup.py"],
}

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


#: runs pytest with ``module`` served from the mutated source file (argv: module, mutated path,
#: original path, pytest args...)
_BOOT = r"""
import importlib.abc, importlib.util, sys
name, mutated, original = sys.argv[1:4]
class _Loader(importlib.abc.SourceLoader):
    def get_filename(self, fullname): return original
    def get_data(self, path):
        with open(mutated if path == original else path, "rb") as fh: return fh.read()
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != name: return None
        return importlib.util.spec_from_file_location(name, original, loader=_Loader())
sys.meta_path.insert(0, _Finder())
import pytest
sys.exit(pytest.main(sys.argv[4:]))
"""


def _module_name(path: Path) -> str:
    parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _run(module: str, mutated_path: str, original: Path, tests: list[str], timeout: float) -> str:
    cmd = [sys.executable, "-c", _BOOT, module, mutated_path, str(original),
           "-x", "-q", "-n0", "-p", "no:randomly", "-p", "no:cacheprovider", "--no-header", *tests]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "killed (timeout)"
    if proc.returncode == 0:
        return "survived"
    if proc.returncode == 1:
        return "killed"
    return f"killed (pytest exit {proc.returncode})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", type=Path, help="the module to mutate, e.g. oomdoctor/advisor/remedies_sglang.py")
    ap.add_argument("--tests", nargs="+", help="pytest arguments for each mutant (default: DEFAULT_TESTS)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--lines", help="only mutants on these lines: 10-40,55")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per mutant (default: 5 × the clean run, at least 60)")
    ap.add_argument("--min-rate", type=float, default=0.0, help="exit 1 below this kill rate (0–1)")
    args = ap.parse_args(argv)

    path = args.module.resolve()
    rel = str(path.relative_to(ROOT))
    source = path.read_text(encoding="utf-8")
    todo = mutants(source)
    if args.lines:
        wanted: set[int] = set()
        for part in args.lines.split(","):
            lo, _, hi = part.partition("-")
            wanted.update(range(int(lo), int(hi or lo) + 1))
        todo = [m for m in todo if m.line in wanted]
    if args.list:
        for m in todo:
            print(f"{rel}:{m.line}: {m.what}")
        print(f"{len(todo)} mutants")
        return 0
    tests = args.tests or DEFAULT_TESTS.get(rel)
    if not tests:
        ap.error(f"no default tests for {rel}: give --tests")
    module = _module_name(path)

    with tempfile.TemporaryDirectory(prefix="oomdoctor-mutate-") as tmp:
        clean = Path(tmp) / "clean.py"
        clean.write_text(source, encoding="utf-8")
        start = time.monotonic()
        baseline = _run(module, str(clean), path, tests, timeout=3600)
        took = time.monotonic() - start
        if baseline != "survived":
            print(f"the tests fail without any mutant ({baseline}): fix them first", file=sys.stderr)
            return 2
        timeout = args.timeout or max(60.0, 5 * took)
        print(f"{rel}: {len(todo)} mutants, tests {' '.join(tests)} (clean run {took:.0f} s)")
        killed = 0
        survivors = []
        for m in todo:
            mpath = Path(tmp) / f"mutant_{m.index}.py"
            mpath.write_text(mutated(source, m.index), encoding="utf-8")
            verdict = _run(module, str(mpath), path, tests, timeout)
            killed += verdict != "survived"
            if verdict == "survived":
                survivors.append(m)
            print(f"  {rel}:{m.line}: {m.what}: {verdict}", flush=True)
    rate = killed / len(todo) if todo else 1.0
    print(f"killed {killed} of {len(todo)} mutants ({rate:.0%})")
    for m in survivors:
        print(f"  survivor {rel}:{m.line}: {m.what}")
    return 0 if rate >= args.min_rate else 1


if __name__ == "__main__":
    sys.exit(main())
