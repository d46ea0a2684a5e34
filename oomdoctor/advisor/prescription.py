"""The advice tables, loaded, checked, and asked: the cause -> remedy table
(``rules/advice/causes.toml``) and what ranking needs to know of each remedy
(``rules/advice/remedies.toml``: cost, lever, additive, eliminates).

The tables are data: per cause, the summary templates, the remedies to compute first (narrowed by
engine and phase) and the remedies withheld because they cannot change the failing budget. The
calculators that give each remedy its values stay in code (``remedies_*`` modules).
"""

from __future__ import annotations

import string
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oomdoctor.units import format_size

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: the cause vocabulary (DESIGN §1); the table must have exactly these
CAUSES: tuple[str, ...] = (
    "other-processes", "memory-cap", "fragmentation", "weights-exceed-device", "kv-cache-too-small",
    "kv-budget-exhausted", "cudagraph-capture", "sampler-warmup", "activation-peak", "training-state",
    "placement", "host-ram", "container-limit", "shared-memory", "unknown",
)  # fmt: skip


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Prescribe(_Strict):
    """One remedy a cause calls for, optionally only for some engines or phases."""

    remedy: str
    engines: list[str] = Field(default_factory=list, description="Only for these engines (empty: any).")
    phases: list[str] = Field(default_factory=list, description="Only in these phases (empty: any).")
    not_phases: list[str] = Field(default_factory=list, description="Never in these phases.")

    def applies(self, engine: str | None, phase: str) -> bool:
        if self.engines and engine not in self.engines:
            return False
        if self.phases and phase not in self.phases:
            return False
        return phase not in self.not_phases


class CauseExample(_Strict):
    """A real log excerpt and the cause oomdoctor must name for it."""

    log: str
    engine: str | None = None


class CauseEntry(_Strict):
    id: str
    summary: list[str] = Field(min_length=1, description="Templates; the first whose values are known is used.")
    prescribe: list[Prescribe] = Field(default_factory=list)
    withhold: list[str | Prescribe] = Field(
        default_factory=list, description="Remedies that cannot change this budget (optionally per engine/phase)."
    )
    examples: list[CauseExample] = Field(default_factory=list)


class CauseTable(_Strict):
    cause: list[CauseEntry]


def table_path() -> Path:
    """``rules/advice/causes.toml`` of the shipped pack."""
    from oomdoctor.rulepack.loader import builtin_rules_dir

    return builtin_rules_dir() / "advice" / "causes.toml"


def load_table(path: Path | None = None, known_remedies: set[str] | None = None) -> dict[str, CauseEntry]:
    """Read and check the table: known causes only, each once, every remedy id registered."""
    path = path or table_path()
    try:
        table = CauseTable.model_validate(tomllib.loads(path.read_text("utf-8")))
    except (ValidationError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path.name}: {exc}") from exc
    out: dict[str, CauseEntry] = {}
    for entry in table.cause:
        if entry.id not in CAUSES:
            raise ValueError(f'{path.name}: cause "{entry.id}": not in the vocabulary {CAUSES}')
        if entry.id in out:
            raise ValueError(f'{path.name}: cause "{entry.id}": duplicate')
        for tpl in entry.summary:
            for _, name, spec, _ in string.Formatter().parse(tpl):
                if name is not None and spec not in ("", "size", "frac"):
                    raise ValueError(f'{path.name}: cause "{entry.id}": summary: unknown spec "{name}:{spec}"')
        if known_remedies is not None:
            for rid in [p.remedy for p in entry.prescribe] + [_rid(w) for w in entry.withhold]:
                if rid not in known_remedies:
                    raise ValueError(f'{path.name}: cause "{entry.id}": unknown remedy "{rid}"')
        out[entry.id] = entry
    missing = set(CAUSES) - set(out)
    if missing:
        raise ValueError(f"{path.name}: causes without an entry: {sorted(missing)}")
    return out


@lru_cache(maxsize=1)
def cause_table() -> dict[str, CauseEntry]:
    """The shipped table (checked on first use)."""
    from oomdoctor.advisor.registry import remedy_ids

    return load_table(known_remedies=set(remedy_ids()))


def _render(tpl: str, values: dict[str, Any]) -> str | None:
    out: list[str] = []
    for literal, name, spec, _ in string.Formatter().parse(tpl):
        out.append(literal)
        if name is None:
            continue
        v = values.get(name)
        if v is None:
            return None
        if spec == "size":
            out.append(format_size(int(v)))
        elif spec == "frac":
            out.append(f"{float(v):.2f}")
        else:
            out.append(str(v))
    return "".join(out)


def summary(cause_id: str, values: dict[str, Any]) -> str:
    """The cause in words, with the first template whose numbers are all known."""
    entry = cause_table()[cause_id]
    for tpl in entry.summary:
        text = _render(tpl, values)
        if text is not None:
            return text
    return entry.summary[-1]


def prescribed(cause_id: str, engine: str | None, phase: str) -> list[str]:
    """Remedy ids the cause calls for in this engine and phase, in the table's order."""
    return [p.remedy for p in cause_table()[cause_id].prescribe if p.applies(engine, phase)]


def _rid(item: str | Prescribe) -> str:
    return item if isinstance(item, str) else item.remedy


def withheld(cause_id: str, engine: str | None = None, phase: str = "unknown") -> set[str]:
    """Remedy ids that cannot change the budget this cause exhausts (in this engine and phase)."""
    return {_rid(w) for w in cause_table()[cause_id].withhold if isinstance(w, str) or w.applies(engine, phase)}


class RemedyEntry(_Strict):
    """What ranking and combining need to know about one remedy."""

    cost: int = Field(default=5, ge=0, description="Relative cost of the trade-off (lower = cheaper).")
    lever: str | None = Field(default=None, description="Remedies pulling one lever are never combined.")
    additive: bool = Field(default=True, description="False: the saving scales every term; never added.")
    eliminates: bool = Field(default=False, description="Removes the failing allocation itself.")
    tradeoff: str = Field(default="", description="What the remedy costs, when its calculator does not say.")


class RemedyTable(_Strict):
    remedy: dict[str, RemedyEntry]


def load_remedy_table(path: Path | None = None, known_remedies: set[str] | None = None) -> dict[str, RemedyEntry]:
    """Read and check ``remedies.toml``: known keys only, every remedy id registered."""
    path = path or table_path().with_name("remedies.toml")
    try:
        table = RemedyTable.model_validate(tomllib.loads(path.read_text("utf-8")))
    except (ValidationError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path.name}: {exc}") from exc
    if known_remedies is not None:
        for rid in table.remedy:
            if rid not in known_remedies:
                raise ValueError(f'{path.name}: remedy "{rid}": no calculator has this id')
    return table.remedy


@lru_cache(maxsize=1)
def remedy_table() -> dict[str, RemedyEntry]:
    """The shipped remedy table (checked on first use)."""
    from oomdoctor.advisor.registry import remedy_ids

    return load_remedy_table(known_remedies=set(remedy_ids()))


_DEFAULT = RemedyEntry()


def remedy_info(remedy_id: str) -> RemedyEntry:
    """The table's entry for ``remedy_id`` (defaults for a remedy it does not list)."""
    return remedy_table().get(remedy_id, _DEFAULT)
