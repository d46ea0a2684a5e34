"""Pydantic models of the rule pack (``rules/*.toml``).

The JSON Schema in ``rules/schema.json`` is generated from these models
(``python -m oomdoctor.rulepack.schema``) and a test checks that it does not drift.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from oomdoctor.report import Phase

FigureType = Literal["size", "int", "float", "str", "int-list"]


def _placeholders(text: str) -> list[str]:
    import string

    return sorted({name for _lit, name, _spec, _conv in string.Formatter().parse(text) if name is not None})


class _Strict(BaseModel):
    # built on first validation only: a rule file read from the cache is rebuilt with
    # model_construct (see loader._cached), so most runs never build these validators
    model_config = ConfigDict(extra="forbid", defer_build=True)


class MatchExample(_Strict):
    """A log excerpt the rule must win, with every figure it must extract."""

    log: str = Field(min_length=1)
    figures: dict[str, Any] = Field(default_factory=dict)
    phase: Phase | None = None
    remedies: list[str] | None = Field(
        default=None, description="Expected ids of the first remedies, in order (a prefix of the list)."
    )
    flags: dict[str, str] | None = Field(
        default=None, description="Expected flags of the first remedy."
    )
    named_by: str | None = Field(
        default=None,
        description=(
            "Another rule that names the finding this example opens: its message, read in the window"
            " with a higher priority, takes the finding over and keeps this rule's figures."
        ),
    )
    note: str = ""


class NoMatchExample(_Strict):
    """A near miss or a healthy line the rule must not match."""

    log: str = Field(min_length=1)
    note: str = ""


class Rule(_Strict):
    """One failure message (or family of wordings) and how to read its figures."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.\-]*$")
    title: str = Field(min_length=1)
    ja: dict[Literal["title"], str] = Field(
        default_factory=dict,
        description="The Japanese of the human text beside the English (ja.title), with the same placeholders.",
    )
    engine: str = Field(min_length=1)
    kind: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    severity: Literal["error", "warning"] = "error"
    phase: Phase | None = Field(default=None, description="Fixed phase; inferred from the log when absent.")
    needs_phase: Phase | None = Field(
        default=None,
        description="A stand-in for a failure whose own line is missing: its finding is kept only when its phase "
        "(inferred from the log) is this one and no other rule's finding in the same source explains the failure.",
    )
    priority: int = Field(default=0, description="Higher wins when several rules match the same line.")
    triggers: list[str] = Field(min_length=1, description="Literals (case-insensitive) for the prefilter.")
    pattern: str = Field(min_length=1, description="Anchor regex; must start on the trigger line.")
    window: int = Field(default=3, ge=0, le=40, description="Following lines joined to the anchor line.")
    extract: dict[str, str] = Field(
        default_factory=dict, description="Figure name -> regex whose first group is the value."
    )
    extract_all: dict[str, str] = Field(
        default_factory=dict,
        description="Figure name -> regex with named groups; every match becomes one item of a list.",
    )
    by_clause: bool = Field(
        default=False,
        description=(
            "When the pattern does not match (a message cut at its start, wrapped inside a phrase, a"
            " variant wording), a trigger found in the anchor line and its window joined (blanks and"
            " case ignored) starting on the anchor line identifies the message; each figure then comes"
            " from its own 'extract' clause, searched over the whole joined message."
        ),
    )
    roles: bool = Field(
        default=False,
        description=(
            "Figures also come from the generic extractor: each size in the message takes its role"
            " (requested, total, free, ...) from the words around it. For the fallback rule."
        ),
    )
    types: dict[str, FigureType] = Field(
        default_factory=dict, description="Figure types; '*_bytes' default to size, others to number."
    )
    units: dict[str, str] = Field(
        default_factory=dict, description="Unit of a size figure printed without one (default bytes)."
    )
    remedies: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    description: str = ""
    match: list[MatchExample] = Field(min_length=1)
    no_match: list[NoMatchExample] = Field(default_factory=list)

    @model_validator(mode="after")
    def _same_placeholders(self) -> Rule:
        for key, text in self.ja.items():
            if not text.strip():
                raise ValueError(f"rule {self.id}: ja.{key} is empty")
            want, got = _placeholders(getattr(self, key)), _placeholders(text)
            if want != got:
                raise ValueError(f"rule {self.id}: ja.{key} placeholders {got} differ from the English {want}")
        return self

    def title_in(self, lang: str) -> str:
        """The title in ``lang`` (``en`` or ``ja``); English where no translation is given."""
        return self.ja.get("title", self.title) if lang == "ja" else self.title


class ContextRule(_Strict):
    """A non-error line that carries a fact the advisor needs."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.\-]*$")
    engine: str | None = Field(default=None, description="Engine this line proves the log comes from.")
    product: str | None = Field(
        default=None,
        description=(
            "Product (a [[product]] id) this line proves the user runs and configures: the program whose knobs "
            "the remedies must speak in (ollama, not the llama.cpp it runs; verl, not the vLLM it embeds)."
        ),
    )
    references: list[str] = Field(default_factory=list, description="Upstream sources that print the line.")
    triggers: list[str] = Field(min_length=1)
    pattern: str = Field(min_length=1)
    parser: Literal["python-dict", "namespace", "config", "argv"] | None = Field(
        default=None, description="How to read the 'args' group into launch arguments."
    )
    periodic: bool = Field(
        default=False,
        description=(
            "The program prints this line again and again (a scheduler's batch line): only the latest one "
            "gives the fact, and the others are set aside unread. Its groups may only set values; a line "
            "set aside casts no engine vote. A rule with no group (it only votes) that says periodic is set aside "
            "like phase evidence: its lines vote only near a failure."
        ),
    )
    types: dict[str, FigureType] = Field(default_factory=dict)
    units: dict[str, str] = Field(default_factory=dict)
    match: list[dict[str, Any]] = Field(
        default_factory=list, description="Examples: {log = ..., values = {...}}"
    )
    no_match: list[str] = Field(
        default_factory=list, description="Near misses: lines that set none of the pattern's values."
    )


class Product(_Strict):
    """A product the user runs and configures (``rules/products.toml``), and how it is decided.

    The report's product is the one with the highest ``priority`` among those a line named (a
    context rule's ``product``, a prefix's process name); at equal priority the most named, then
    the first. Without any, the log's engine names it (``engines``)."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", description="As the corpus labels name it.")
    name: str = Field(min_length=1, description="How the report shows it (the finding's header).")
    ja: dict[Literal["name"], str] = Field(default_factory=dict, description="The Japanese of the name, where it differs.")
    priority: int = Field(
        description=(
            "How specific it is: an application or a training/RL framework (40-50) beats a wrapper (30) beats "
            "the engine it embeds (20) beats the runtime (10)."
        )
    )
    engines: list[str] = Field(
        default_factory=list,
        description="Engines (a rule's engine, the context's engine) that name this product when no line names one.",
    )
    processes: list[str] = Field(
        default_factory=list,
        description="Process names in a line's prefix, '(NAME pid=N)', that name this product (vLLM's APIServer).",
    )
    runs: str | None = Field(
        default=None,
        description=(
            "The engine this product runs inside it: a log that names the product but no engine (a bare "
            "PyTorch OOM under `vllm serve`, ollama's llama.cpp) failed inside that engine."
        ),
    )
    needs_engine: list[str] = Field(
        default_factory=list,
        description=(
            "A vote for this product counts only in a log of one of these engines (a notebook traceback "
            "names vllm-python only where vLLM runs); empty: every vote counts."
        ),
    )
    references: list[str] = Field(default_factory=list)

    def name_in(self, lang: str) -> str:
        """The name in ``lang`` (``en`` or ``ja``); the English one where no translation is given."""
        return self.ja.get("name", self.name) if lang == "ja" else self.name


class PhaseOrigin(_Strict):
    """Where one piece of generated phase evidence was read (``rules/phases.generated.toml``)."""

    kind: Literal["frame", "path", "progress", "process"]
    evidence: str = Field(
        min_length=1, description="The frame name, path piece, progress line's literal text or process name."
    )
    package: str = Field(min_length=1)
    source: str = Field(min_length=1, description="The file of the package it was read from.")
    versions: list[str] = Field(min_length=1, description="The sampled releases that have it.")


class PhaseRule(_Strict):
    """Evidence for one phase: traceback frame names and progress lines. Tables of the same phase
    (in one file or several) are merged, in the order the phase first appears."""

    phase: Phase
    frames: list[str] = Field(
        default_factory=list,
        description=(
            "Function names in traceback frames; 'PIECE::NAME' counts only in a file whose path holds "
            "PIECE (a name too common alone: torch's Module.to's 'convert', bitsandbytes' 'to')."
        ),
    )
    paths: list[str] = Field(
        default_factory=list,
        description="Pieces of traceback frames' file paths (a package's directory) that count like frame names.",
    )
    engine_frames: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "Engine -> 'PIECE::NAME' frames that tell the phase only in a log of that engine (vLLM builds "
            "its model under `with torch.device(...)`, so torch/utils/_device.py's __torch_function__ is "
            "model construction there, and any step elsewhere); asked after every phase's own frames."
        ),
    )
    markers: list[str] = Field(
        default_factory=list, description="Regexes for lines that name the phase (near the failure)."
    )
    processes: list[str] = Field(
        default_factory=list,
        description=(
            "Names of processes a log prefix gives (Ray's '(NAME pid=N)') that run only this phase: a "
            "failure such a process prints is of it where no frame, marker or progress line tells."
        ),
    )
    progress: list[str] = Field(
        default_factory=list, description="Regexes for progress lines printed while the phase runs."
    )
    triggers: list[str] = Field(default_factory=list, description="Literals for the prefilter.")
    origins: list[PhaseOrigin] = Field(
        default_factory=list,
        description="Where generated evidence was read: upstream file and releases (tools/gen_phase_table.py).",
    )


class RuleFile(_Strict):
    """One TOML file of the pack."""

    rule: list[Rule] = Field(default_factory=list)
    context: list[ContextRule] = Field(default_factory=list)
    product: list[Product] = Field(default_factory=list)
    phase: list[PhaseRule] = Field(default_factory=list)
