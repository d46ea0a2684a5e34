"""The knobs each product has: ``rules/advice/knobs.toml``, validated, and one question about it.

A remedy speaks to the program the user runs (``finding.product``): its ``flags``, ``env`` and
``settings`` keys must be that product's own. The catalog lists, per product, where its knob data
comes from (``source``), the engine whose generated flag data answers for its flags
(``engine_flags``, read through :func:`oomdoctor.advisor.versions.flag_exists`), whether the log's
version is the product's own (``log_version``), and its hand-listed knobs with ``since``/``until``
and a citation each. ``[host]`` holds the machine's and the container's knobs, which the ``host.*``
remedies give whatever the product.

:func:`load_knobs` reads and validates a file; a broken file raises :class:`KnobsError` naming the
file, the product and the field. :func:`has_knob` answers whether a key is a knob of a product at a
version.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from oomdoctor import cache
from oomdoctor.advisor.memory_model import parse_version
from oomdoctor.advisor.versions import flag_exists
from oomdoctor.paths import builtin_rules_dir

#: the section that is not a product: knobs of the host, valid for the host.* remedies of any product
HOST = "host"
Field_ = Literal["flags", "env", "settings"]


class KnobsError(ValueError):
    """A knobs file that does not load: the message names the file, the product and the field."""


class Knob(BaseModel):
    """One flag, environment variable or setting key of a product, as remedies print it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    field: Field_
    key: str = Field(min_length=1)
    since: str | None = None
    until: str | None = None
    source: str = Field(min_length=1)

    @field_validator("since", "until")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and parse_version(v) is None:
            raise ValueError(f"not a version: {v!r}")
        return v

    def at(self, version: str | None) -> bool:
        """Whether the knob exists at ``version`` (None: the current release, so nothing removed)."""
        ver = parse_version(version) if version else None
        if ver is None:
            return self.until is None
        since, until = parse_version(self.since), parse_version(self.until)
        return not ((since and ver < since) or (until and ver > until))


class ProductKnobs(BaseModel):
    """One product's section of the catalog."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    engine_flags: Literal["vllm", "sglang", "llama.cpp", "tgi"] | None = None
    log_version: Literal["own", "other"]
    knob: list[Knob] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> ProductKnobs:
        seen: set[tuple[str, str]] = set()
        for k in self.knob:
            if (k.field, k.key) in seen:
                raise ValueError(f"{k.field} {k.key!r} is listed twice")
            seen.add((k.field, k.key))
        return self

    def find(self, field: str, key: str) -> Knob | None:
        return next((k for k in self.knob if k.field == field and k.key == key), None)


def _where(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    return f" {loc}: {first['msg']}" if loc else f": {first['msg']}"


def load_knobs(path: Path, products: set[str] | None = None) -> dict[str, ProductKnobs]:
    """The catalog at ``path``, validated; ``products``, when given, the product ids it may name
    (besides ``host``). Raises :class:`KnobsError` naming the file, the product and the field."""
    try:
        data = cache.load_toml(path)
    except (OSError, ValueError) as exc:
        raise KnobsError(f"{path}: {exc}") from exc
    out: dict[str, ProductKnobs] = {}
    for pid, section in data.items():
        if products is not None and pid != HOST and pid not in products:
            raise KnobsError(f"{path}: [{pid}]: not a product of rules/products.toml")
        if not isinstance(section, dict):
            raise KnobsError(f"{path}: [{pid}]: a table is expected")
        try:
            out[pid] = ProductKnobs.model_validate(section)
        except ValidationError as exc:
            raise KnobsError(f"{path}: [{pid}]{_where(exc)}") from exc
    return out


@lru_cache(maxsize=1)
def knobs() -> dict[str, ProductKnobs]:
    """The shipped catalog, ``rules/advice/knobs.toml``."""
    from oomdoctor.rulepack import default_pack

    return load_knobs(builtin_rules_dir() / "advice" / "knobs.toml", set(default_pack().products))


def has_knob(product: str | None, field: str, key: str, version: str | None, *, host: bool = False) -> bool:
    """Whether ``key`` is a ``field`` knob ("flags", "env", "settings") of ``product`` at ``version``.

    ``version`` is the log's (``report.context.engine_version``); it gates only products whose
    ``log_version`` is "own" (None: the current release). A knob the product lists answers first;
    else the engine's flag data for ``flags``/``env`` (a ``flags`` value is passed as
    ``--flag=value`` by the caller when it should be checked too). ``host``: the remedy is a host
    remedy, so the ``[host]`` knobs count as well. An unknown product has no knobs."""
    table = knobs()
    if host and (h := table[HOST].find(field, key)) is not None:
        return h.at(None)
    entry = table.get(product or "")
    if entry is None:
        return False
    ver = version if entry.log_version == "own" else None
    listed = entry.find(field, key.split("=", 1)[0])
    if listed is not None:
        return listed.at(ver)
    if entry.engine_flags and field in ("flags", "env"):
        return bool(flag_exists(entry.engine_flags, key, ver))
    return False
