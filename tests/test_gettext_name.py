"""A module that imports gettext's ``_`` must never bind ``_`` itself.

``x, _ = f()`` inside a function makes ``_`` local to the whole function, so every ``_("...")``
in it calls whatever was bound instead of gettext (it happened once, in a merge: the combined
plan's title then raised TypeError).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "oomdoctor"


def _imports_gettext(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.ImportFrom) and any(a.name == "_" and a.asname is None for a in node.names)
        for node in ast.walk(tree)
    )


def _binds_underscore(tree: ast.Module) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id == "_" and isinstance(node.ctx, ast.Store)) or (isinstance(node, ast.arg) and node.arg == "_"):
            lines.append(node.lineno)
    return lines


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if _imports_gettext(ast.parse(p.read_text(encoding="utf-8"))))


def test_some_modules_use_gettext() -> None:
    assert len(MODULES) >= 3  # the check below is not vacuous


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_gettext_underscore_is_never_rebound(path: Path) -> None:
    bound = _binds_underscore(ast.parse(path.read_text(encoding="utf-8")))
    assert not bound, f"{path.name} binds _ at lines {bound}: name it (e.g. _why) so gettext's _ stays visible"


def test_the_check_sees_a_rebinding() -> None:
    tree = ast.parse("from oomdoctor.i18n import _\ndef f():\n    a, _ = 1, 2\n    return _('x')\n")
    assert _imports_gettext(tree) and _binds_underscore(tree) == [3]
