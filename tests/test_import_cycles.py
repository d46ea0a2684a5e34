"""No import inside a function holds an import cycle apart.

An ``import`` in a function body is fine when it only defers a cost (an optional extra such as
FastAPI or hyperscan, a renderer a run may never need): the module it names could be imported at
the top. It is a defect when the module it names imports, directly or through others, the module
the function sits in: the cycle is only hidden, and the shared piece belongs in a module below both
(as :mod:`oomdoctor.paths`, :mod:`oomdoctor.cli.live` and :mod:`oomdoctor.server.logs` are).

The graph is read with :mod:`ast` from ``oomdoctor/``: an edge per imported ``oomdoctor`` module,
from module-level imports and from imports inside functions alike (``if TYPE_CHECKING:`` blocks
excepted: they never run). A function-level edge that lies on a cycle of that graph fails, unless
:data:`ALLOWED` names it with a reason. A package's own ``__getattr__`` (PEP 562 lazy attributes)
is not a cycle: it runs on first use of the attribute, after the package is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "oomdoctor"

#: (importing module, imported module) -> why this function-level import stays; keep it short
ALLOWED: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        target = ".".join([*base, *([node.module] if node.module else [])])
    else:
        target = node.module or ""
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    # ``from pkg import submodule`` imports the submodule; ``from pkg import name`` runs pkg
    found = subs if subs and len(subs) == len(node.names) else [target, *subs]
    return [t for t in found if t in MODULES]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _edges() -> list[tuple[str, str, int, bool]]:
    """(importer, imported, line, inside a function) for every import of an oomdoctor module."""
    edges: list[tuple[str, str, int, bool]] = []

    for module, path in MODULES.items():
        def walk(node: ast.AST, in_function: bool, module: str = module, path: Path = path) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    for stmt in child.orelse:
                        walk_one(stmt, in_function)
                    continue
                walk_one(child, in_function)

        def walk_one(node: ast.AST, in_function: bool, module: str = module, path: Path = path) -> None:
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges.extend((module, t, node.lineno, in_function) for t in _targets(module, path, node))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                if not (path.name == "__init__.py" and getattr(node, "name", "") == "__getattr__"):
                    walk(node, True)
            else:
                walk(node, in_function)

        walk(ast.parse(path.read_text(encoding="utf-8")), False)
    return edges


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        here = todo.pop()
        if here == goal:
            return True
        for nxt in graph.get(here, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def _cycle_dodges() -> dict[tuple[str, str], int]:
    edges = _edges()
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in edges:
        graph.setdefault(a, set()).add(b)
    return {(a, b): line for a, b, line, lazy in edges if lazy and _reaches(graph, b, a)}


def test_no_function_level_import_hides_an_import_cycle() -> None:
    dodges = {pair: line for pair, line in _cycle_dodges().items() if pair not in ALLOWED}
    assert not dodges, (
        "imports inside functions that hold a cycle apart (move the shared piece into a module "
        "both import at the top): "
        + ", ".join(f"{MODULES[a].relative_to(PACKAGE.parent)}:{line} imports {b}" for (a, b), line in dodges.items())
    )


def test_every_allowed_import_is_still_a_cycle_and_says_why() -> None:
    dodges = _cycle_dodges()
    stale = [pair for pair in ALLOWED if pair not in dodges]
    assert not stale, f"no longer a cycle, drop from ALLOWED: {stale}"
    assert all(len(reason) > 20 for reason in ALLOWED.values())


def _first_import(code: str) -> ast.Import | ast.ImportFrom:
    node = next(n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Import | ast.ImportFrom))
    return node


def test_the_checker_reads_imports_as_python_runs_them() -> None:
    follow, cli = MODULES["oomdoctor.cli.follow"], MODULES["oomdoctor.cli"]
    lazy = _first_import("def f():\n    from oomdoctor.cli.diagnose import exit_code\n")
    assert _targets("oomdoctor.cli.follow", follow, lazy) == ["oomdoctor.cli.diagnose"]
    # a submodule imported from its package names the submodule
    assert _targets("oomdoctor.cli", cli, _first_import("from oomdoctor.cli import diagnose")) == ["oomdoctor.cli.diagnose"]
    assert _targets("oomdoctor.cli.follow", follow, _first_import("from .live import exit_code")) == ["oomdoctor.cli.live"]
    assert _reaches({"a": {"b"}, "b": {"a"}}, "b", "a")
    assert not _reaches({"a": {"b"}, "b": set()}, "b", "a")
