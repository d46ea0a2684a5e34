"""Shell completion of option values (typer's ``autocompletion`` callbacks, run only while the shell
asks: ``_OOMDOCTOR_COMPLETE`` set): formats, languages, GPU and model names of the catalog, rule ids,
hint keys and the small fixed choices. Each returns the values that start with what was typed
(as typer keeps only those), so the shell offers them on Tab."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def _matching(values: Iterable[str], incomplete: str) -> list[str]:
    return [v for v in values if v.startswith(incomplete)]


def choices(*values: str) -> Callable[[str], list[str]]:
    """A completer offering ``values``."""

    def complete(incomplete: str) -> list[str]:
        return _matching(values, incomplete)

    return complete


def formats(incomplete: str) -> list[str]:
    """``-f/--format`` of the diagnosis and of ``run``."""
    from oomdoctor.render import FORMATS

    return _matching(FORMATS, incomplete)


def langs(incomplete: str) -> list[str]:
    from oomdoctor.i18n import LANGS

    return _matching(LANGS, incomplete)


def gpus(incomplete: str) -> list[str]:
    """``fit --gpu``: the GPU catalog's names."""
    from oomdoctor.advisor.catalog import gpus as catalog

    return _matching(sorted({g.name for g in catalog()}), incomplete)


def models(incomplete: str) -> list[str]:
    """``fit --model``: the model catalog's names (a path or a Hub name is typed by hand)."""
    from oomdoctor.advisor.catalog import models as catalog

    return _matching(sorted({m.name for m in catalog()}), incomplete)


def rule_ids(incomplete: str) -> list[str]:
    """``rules show RULE_ID``: the built-in pack's rule ids."""
    from oomdoctor.rulepack import default_pack

    return _matching(sorted(r.id for r in default_pack().rules), incomplete)


def hints(incomplete: str) -> list[str]:
    """``--hint KEY=VALUE``: the keys, each with its ``=``; after a ``gpu=``, the catalog's GPUs."""
    from oomdoctor.hints import HINT_KEYS

    key, eq, value = incomplete.partition("=")
    if eq and key == "gpu":
        return [f"gpu={name}" for name in gpus(value)]
    return _matching((f"{k}=" for k in HINT_KEYS), incomplete)
