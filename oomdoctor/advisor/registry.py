"""Remedy calculators by id. Rules name remedies by these ids; unknown ids fail at load time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.report import Context, Finding, Remedy


@dataclass
class AdviceInput:
    """What a calculator may use: the finding's figures, the run context and user hints."""

    finding: Finding
    context: Context
    hints: dict[str, str] = field(default_factory=dict)

    @property
    def figures(self) -> dict[str, Any]:
        return self.finding.figures

    def fig(self, name: str) -> Any:
        return self.finding.figures.get(name)


Calculator = Callable[[AdviceInput], "Remedy | None"]

_REGISTRY: dict[str, Calculator] = {}


def remedy(remedy_id: str) -> Callable[[Calculator], Calculator]:
    """Register a calculator under ``remedy_id``."""

    def deco(fn: Calculator) -> Calculator:
        if remedy_id in _REGISTRY:
            raise ValueError(f"duplicate remedy id {remedy_id}")
        _REGISTRY[remedy_id] = fn
        return fn

    return deco


_LOADED = False


def _load_all() -> None:
    """Import every ``oomdoctor.advisor.remedies_*`` module; importing registers its calculators."""
    global _LOADED
    if _LOADED:
        return
    import importlib
    import pkgutil

    import oomdoctor.advisor as pkg

    for mod in sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)):
        if mod.startswith("remedies_"):
            importlib.import_module(f"oomdoctor.advisor.{mod}")
    _LOADED = True


def remedy_ids() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def calculator(remedy_id: str) -> Calculator:
    _load_all()
    return _REGISTRY[remedy_id]
