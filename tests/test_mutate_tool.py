"""tools/mutate.py: which mutants it makes of a module, and what each one changes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "tools" / "mutate.py"
_spec = importlib.util.spec_from_file_location("oomdoctor_mutate_tool", _PATH)
assert _spec is not None and _spec.loader is not None
mutate = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = mutate
_spec.loader.exec_module(mutate)

SOURCE = '''"""Docstring 1."""
LIMIT: int = 40


def f(x: int, y: float = 0.5) -> bool:
    """Not 2 mutated."""
    z = f"{x:>3}"
    return x < LIMIT and y >= 0.3 and z != "" and True
'''


def test_mutants_are_comparisons_and_numbers_only() -> None:
    got = [(m.line, m.what) for m in mutate.mutants(SOURCE)]
    assert sorted(got) == sorted([
        (2, "40 -> 41"),
        (5, "0.5 -> 0.51"),
        (8, "< -> <="),
        (8, ">= -> >"),
        (8, "0.3 -> 0.31"),
        (8, "!= -> =="),
    ])


def test_each_mutant_changes_exactly_its_site() -> None:
    whats = {m.what: m.index for m in mutate.mutants(SOURCE)}
    assert "x <= LIMIT" in mutate.mutated(SOURCE, whats["< -> <="])
    assert "LIMIT: int = 41" in mutate.mutated(SOURCE, whats["40 -> 41"])
    assert "y > 0.3" in mutate.mutated(SOURCE, whats[">= -> >"])
    clean = mutate.mutated(SOURCE, whats["0.3 -> 0.31"])
    assert "y >= 0.31" in clean and "x < LIMIT" in clean and "LIMIT: int = 40" in clean


def test_steps() -> None:
    assert [mutate._bumped(v) for v in (0, 7, 0.0, 0.95, 2.5, -0.5)] == [1, 8, 0.01, 0.96, 2.75, -0.49]
