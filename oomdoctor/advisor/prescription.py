"""The advice tables, loaded, checked, and asked: the cause -> remedy table
(``rules/advice/causes.toml``) and what ranking needs to know of each remedy
(``rules/advice/remedies.toml``: cost, lever, additive, eliminates).

The tables are data: per cause, the summary templates, the remedies to compute first (narrowed by
engine and phase) and the remedies withheld because they cannot change the failing budget. The
calculators that give each remedy its values stay in code (``remedies_*`` modules).
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from oomdoctor import cache
from oomdoctor.i18n import LANGS, current_lang
from oomdoctor.paths import builtin_rules_dir
from oomdoctor.units import format_size

#: the cause vocabulary (DESIGN §1); the table must have exactly these
CAUSES: tuple[str, ...] = (
    "other-processes", "memory-cap", "fragmentation", "weights-exceed-device", "kv-cache-too-small",
    "kv-cache-exceeds-free", "kv-budget-exhausted", "kv-page-granularity", "cudagraph-capture", "sampler-warmup",
    "engine-headroom", "activation-peak", "training-state", "oversized-request", "driver-fault", "colocation",
    "placement", "host-ram", "container-limit", "shared-memory", "pipeline-parallel-fallback", "unknown",
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


class CauseTexts(_Strict):
    """A translation of a cause's human text (same templates, same placeholders)."""

    summary: list[str] = Field(min_length=1)


class CauseEntry(_Strict):
    id: str
    summary: list[str] = Field(min_length=1, description="Templates; the first whose values are known is used.")
    ja: CauseTexts | None = Field(default=None, description="The Japanese of the summary templates.")
    prescribe: list[Prescribe] = Field(default_factory=list)
    withhold: list[str | Prescribe] = Field(
        default_factory=list, description="Remedies that cannot change this budget (optionally per engine/phase)."
    )
    examples: list[CauseExample] = Field(default_factory=list)


class CauseTable(_Strict):
    cause: list[CauseEntry]


def table_path() -> Path:
    """``rules/advice/causes.toml`` of the shipped pack."""
    return builtin_rules_dir() / "advice" / "causes.toml"


def load_table(path: Path | None = None, known_remedies: set[str] | None = None) -> dict[str, CauseEntry]:
    """Read and check the table: known causes only, each once, every remedy id registered."""
    path = path or table_path()
    try:
        table = CauseTable.model_validate(cache.load_toml(path))
    except (ValidationError, cache.toml_module().TOMLDecodeError) as exc:
        raise ValueError(f"{path.name}: {exc}") from exc
    out: dict[str, CauseEntry] = {}
    for entry in table.cause:
        if entry.id not in CAUSES:
            raise ValueError(f'{path.name}: cause "{entry.id}": not in the vocabulary {CAUSES}')
        if entry.id in out:
            raise ValueError(f'{path.name}: cause "{entry.id}": duplicate')
        for tpl in entry.summary:
            placeholders(tpl, f'{path.name}: cause "{entry.id}": summary')
        if entry.ja is not None:
            check_translation(
                dict(enumerate(entry.summary)), dict(enumerate(entry.ja.summary)), f'{path.name}: cause "{entry.id}": ja.summary'
            )
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


#: the formats a placeholder may ask for: ``{x:size}`` (bytes, as 1.50 GiB), ``{x:frac}`` (0.85), ``{x}``
SPECS = ("", "size", "frac")


def placeholders(tpl: str, where: str = "template") -> set[str]:
    """The ``{name:spec}`` placeholders of ``tpl`` (ValueError on an unknown spec or a bad brace)."""
    out: set[str] = set()
    try:
        parsed = list(string.Formatter().parse(tpl))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}: {tpl!r}") from exc
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if spec not in SPECS or not name.isidentifier():
            raise ValueError(f'{where}: unknown placeholder "{{{name}:{spec}}}"')
        out.add(f"{name}:{spec}" if spec else name)
    return out


def check_translation(english: dict[Any, str], other: dict[Any, str], where: str) -> None:
    """A translation has exactly the English's keys, and each text exactly its placeholders
    (with their formats), so it can neither drop nor add nor reformat a figure."""
    if set(english) != set(other):
        raise ValueError(f"{where}: keys {sorted(map(str, other))} differ from the English {sorted(map(str, english))}")
    for key, tpl in english.items():
        want, got = placeholders(tpl, where), placeholders(other[key], where)
        if want != got:
            raise ValueError(f"{where}[{key}]: placeholders {sorted(got)} differ from the English {sorted(want)}")


def render_template(tpl: str, values: dict[str, Any]) -> str:
    """``tpl`` with its placeholders filled (KeyError when a value is missing)."""
    text = _render(tpl, values)
    if text is None:
        missing = [n for _, n, _, _ in string.Formatter().parse(tpl) if n is not None and values.get(n) is None]
        raise KeyError(f"no value for {missing} in {tpl!r}")
    return text


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
    templates = entry.summary
    if current_lang() == "ja" and entry.ja is not None:
        templates = entry.ja.summary
    for tpl in templates:
        text = _render(tpl, values)
        if text is not None:
            return text
    return templates[-1]


def prescribed(cause_id: str, engine: str | None, phase: str) -> list[str]:
    """Remedy ids the cause calls for in this engine and phase, in the table's order."""
    return [p.remedy for p in cause_table()[cause_id].prescribe if p.applies(engine, phase)]


def _rid(item: str | Prescribe) -> str:
    return item if isinstance(item, str) else item.remedy


def withheld(cause_id: str, engine: str | None = None, phase: str = "unknown") -> set[str]:
    """Remedy ids that cannot change the budget this cause exhausts (in this engine and phase).

    Besides the table's own list: where the cause lowers a knob (``<knob>.lower``), raising that
    knob (``<knob>.raise``, ``<knob>.raise-…``) would undo it, so it is withheld too.
    """
    out = {_rid(w) for w in cause_table()[cause_id].withhold if isinstance(w, str) or w.applies(engine, phase)}
    lowered = [rid[: -len("lower")] for rid in prescribed(cause_id, engine, phase) if rid.endswith(".lower")]
    if lowered:
        out |= {rid for rid in remedy_table() for knob in lowered if rid.startswith(knob + "raise")}
    return out


class RemedyEntry(_Strict):
    """What ranking and combining need to know about one remedy."""

    cost: int = Field(default=5, ge=0, description="Relative cost of the trade-off (lower = cheaper).")
    lever: str | None = Field(default=None, description="Remedies pulling one lever are never combined.")
    additive: bool = Field(default=True, description="False: the saving scales every term; never added.")
    eliminates: bool = Field(default=False, description="Removes the failing allocation itself.")
    last_resort: bool = Field(
        default=False, description="The engine itself says to try it last (a large loss): ranked after the "
        "other remedies of its tier, even when it alone is known to fit.",
    )
    tradeoff: str = Field(default="", description="What the remedy costs, when its calculator does not say.")
    text: dict[str, str] = Field(
        default_factory=dict, description="Named templates the calculator words its title and why with."
    )
    ja: dict[str, str] = Field(
        default_factory=dict, description="The Japanese of `text` and `tradeoff` (same keys, same placeholders)."
    )
    knob: str | None = Field(
        default=None,
        description="The setting an unsized remedy names (unsized.py), with its `text.setting_<variant>` words as "
        "the value (a setting: a flag or a variable carries a value or nothing).",
    )

    def english(self) -> dict[str, str]:
        """Every English text of the entry, by key (``tradeoff`` included when set)."""
        return {**self.text, **({"tradeoff": self.tradeoff} if self.tradeoff else {})}


class RemedyTable(_Strict):
    remedy: dict[str, RemedyEntry]


def load_remedy_table(path: Path | None = None, known_remedies: set[str] | None = None) -> dict[str, RemedyEntry]:
    """Read and check ``remedies.toml``: known keys only, every remedy id registered."""
    path = path or table_path().with_name("remedies.toml")
    try:
        table = RemedyTable.model_validate(cache.load_toml(path))
    except (ValidationError, cache.toml_module().TOMLDecodeError) as exc:
        raise ValueError(f"{path.name}: {exc}") from exc
    if known_remedies is not None:
        for rid in table.remedy:
            if rid not in known_remedies:
                raise ValueError(f'{path.name}: remedy "{rid}": no calculator has this id')
    for rid, entry in table.remedy.items():
        for key, tpl in entry.english().items():
            placeholders(tpl, f'{path.name}: remedy "{rid}": {key}')
        if entry.ja:
            check_translation(entry.english(), entry.ja, f'{path.name}: remedy "{rid}": ja')
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


def _localized(entry: RemedyEntry, key: str, lang: str) -> str:
    if lang == "ja" and key in entry.ja:
        return entry.ja[key]
    return entry.english()[key]


#: suffix of a template's pre-flight wording (``why_graph_plan`` beside ``why_graph``)
PLAN_SUFFIX = "_plan"
_planned: ContextVar[bool] = ContextVar("oomdoctor_planned", default=False)


@contextmanager
def planned_wording(planned: bool = True) -> Iterator[None]:
    """Inside the block, word remedies for a plan (``oomdoctor fit``), not a log: every template
    with a ``<key>_plan`` variant uses it (no "in this log", no "vLLM's own estimate")."""
    token = _planned.set(planned)
    try:
        yield
    finally:
        _planned.reset(token)


def remedy_text(remedy_id: str, key: str, **values: Any) -> str:
    """The remedy's template ``key`` (``text.<key>`` or ``tradeoff`` in remedies.toml), filled
    with ``values``, in the language in force (English where no translation exists); its
    ``<key>_plan`` variant instead, when there is one, inside :func:`planned_wording`."""
    entry = remedy_info(remedy_id)
    if _planned.get() and key + PLAN_SUFFIX in entry.text:
        key += PLAN_SUFFIX
    return render_template(_localized(entry, key, current_lang()), values)


def remedy_tradeoff(remedy_id: str) -> str:
    """The table's trade-off of ``remedy_id`` in the language in force ("" when none)."""
    entry = remedy_info(remedy_id)
    return _localized(entry, "tradeoff", current_lang()) if entry.tradeoff else ""


def untranslated(lang: str = "ja") -> list[str]:
    """Every text of the advice tables without a ``lang`` translation (``cause/<id>/summary``,
    ``remedy/<id>/<key>``): what the completeness test reports."""
    assert lang in LANGS
    out = [f"cause/{cid}/summary" for cid, e in cause_table().items() if e.ja is None]
    for rid, entry in remedy_table().items():
        out += [f"remedy/{rid}/{key}" for key in entry.english() if key not in entry.ja]
    return out
