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
    #: the figures come from a plan (``oomdoctor fit``, before any run), not from a log: remedies are
    #: worded as pre-flight advice (their ``<key>_plan`` templates where the wording differs)
    planned: bool = False

    @property
    def figures(self) -> dict[str, Any]:
        return self.finding.figures

    def fig(self, name: str) -> Any:
        return self.finding.figures.get(name)


Calculator = Callable[[AdviceInput], "Remedy | None"]

_REGISTRY: dict[str, Calculator] = {}
#: remedy id -> the module that registered it
_MODULE_OF: dict[str, str] = {}


def remedy(remedy_id: str) -> Callable[[Calculator], Calculator]:
    """Register a calculator under ``remedy_id``."""

    def deco(fn: Calculator) -> Calculator:
        if remedy_id in _REGISTRY:
            raise ValueError(f"duplicate remedy id {remedy_id}")
        _REGISTRY[remedy_id] = fn
        _MODULE_OF[remedy_id] = fn.__module__
        return fn

    return deco


_LOADED = False


def _module_names() -> list[str]:
    import pkgutil

    import oomdoctor.advisor as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith("remedies_"))


def _load_all() -> None:
    """Import every ``oomdoctor.advisor.remedies_*`` module; importing registers its calculators."""
    global _LOADED
    if _LOADED:
        return
    import importlib

    for mod in _module_names():
        importlib.import_module(f"oomdoctor.advisor.{mod}")
    _LOADED = True


def _sources_key() -> str | None:
    """A key of the sources of every ``remedies_*`` module (None when one has no source)."""
    from pathlib import Path

    from oomdoctor import cache

    here = Path(__file__).parent
    return cache.source_key("remedies 1", (here / f"{mod}.py" for mod in _module_names()))


_INDEX: dict[str, str] | None = None


def _index() -> dict[str, str]:
    """remedy id -> module, without importing the modules when the sources were indexed before.

    The index is derived from importing every module once and cached on disk (see
    ``oomdoctor.cache``) under a digest of their sources: any edit re-derives it.
    """
    global _INDEX
    if _INDEX is not None:
        return _INDEX
    from oomdoctor import cache

    key = _sources_key()
    found = cache.load("remedies", key) if key else None
    if isinstance(found, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        _INDEX = found
        return found
    _load_all()
    prefix = "oomdoctor.advisor.remedies_"
    _INDEX = {rid: mod for rid, mod in _MODULE_OF.items() if mod.startswith(prefix)}
    if key:
        cache.store("remedies", key, _INDEX)
    return _INDEX


def remedy_ids() -> list[str]:
    """Every remedy id: those of the ``remedies_*`` modules and any registered elsewhere."""
    return sorted(set(_index()) | set(_REGISTRY))


def calculator(remedy_id: str) -> Calculator:
    """The calculator of ``remedy_id``, importing only the module that defines it."""
    fn = _REGISTRY.get(remedy_id)
    if fn is not None:
        return fn
    mod = _index().get(remedy_id)
    if mod is not None:
        import importlib

        importlib.import_module(mod)
        fn = _REGISTRY.get(remedy_id)
        if fn is not None:
            return fn
    _load_all()
    return _REGISTRY[remedy_id]
