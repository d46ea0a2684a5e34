"""The report contract (DESIGN §3): the one structure every renderer and the HTTP server read.

``schema_version`` 5 (2 added ``finding.cause`` and ``finding.account``; 3 added ``remedy.run``; 4 added
``report.contexts``, one per source, with ``finding.product`` and ``context.product``; 5 added
``report.cut_lines`` and ``summary.cut_lines``, the lines longer than the bound searched whole; 6 added
``remedy.code``, each change as a code line labelled with its language and where it runs, and gives
``remedy.command`` to every remedy whose change a known launch command can carry, not only the first). The JSON Schema generated from these models is committed as
``oomdoctor/report.schema.json`` and a test checks it does not drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from oomdoctor.i18n import current_lang

SCHEMA_VERSION = 6

Severity = Literal["error", "warning"]
Confidence = Literal["high", "medium", "low"]
Phase = Literal[
    "weights-load",
    "startup-check",
    "profiling",
    "kv-cache-alloc",
    "cudagraph-capture",
    "warmup",
    "inference",
    "training",
    "unknown",
]
PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]


class _Model(BaseModel):
    # each model's validator is built when first used, not at import: a run builds only those it
    # uses, once each (building all at import was the largest part of a small log's start-up)
    model_config = ConfigDict(extra="forbid", defer_build=True)


class RunStep(_Model):
    """A shell command the user runs by hand for a remedy (to look before changing anything):
    not a launch command, and no flag of the engine."""

    label: str = Field(description="What running it does, in the report's language.")
    command: str = Field(description="The command line, to paste as it is.")


CodeLanguage = Literal["shell", "python", "json", "yaml", "toml"]


class CodeLine(_Model):
    """One of a remedy's changes as a line to paste, with what it is and where it goes."""

    language: CodeLanguage = Field(description="What the line parses as: shell, python, json, yaml or toml.")
    where: str = Field(
        description="Where it runs: for shell, 'environment' (an export before the launch) or the program whose "
        "command line takes the flags ('vllm serve', 'docker run'); else the call or file it goes in "
        "('LLM', 'TrainingArguments', 'DeepSpeed config', 'Kubernetes container spec')."
    )
    text: str = Field(description="The line itself. In a Python call, '...' stands for the arguments already passed.")
    keys: list[str] = Field(default_factory=list, description="The env, flags or settings keys the line sets.")


class Remedy(_Model):
    """One thing to try, with the concrete values to use."""

    id: str
    rank: int = 0
    title: str
    flags: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, str] = Field(default_factory=dict)
    saves_bytes: int | None = None
    fits: bool | None = None
    confidence: Confidence = "medium"
    why: str = ""
    tradeoff: str = ""
    command: str | None = Field(
        default=None,
        description="The whole launch command with this remedy applied (shell), when the log gives the command "
        "and the remedy's change is flags or environment variables its program takes.",
    )
    code: list[CodeLine] = Field(
        default_factory=list,
        description="The remedy's env, flags and settings as code lines, each labelled with its language and where "
        "it runs. Settings said in words (not code) are only in settings.",
    )
    run: list[RunStep] = Field(
        default_factory=list,
        description="Shell commands to run by hand for this remedy (e.g. listing the processes on the GPU).",
    )
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="Where each input of the calculation came from (message, context, config, catalog, hint).",
    )


Provenance = Literal["stated", "derived", "assumed"]


class AccountEntry(_Model):
    """One line of the memory ledger of the failing device."""

    name: str = Field(description="What holds or lacks the memory (capacity, cap, other-processes, weights, request, ...).")
    bytes: int | None = Field(default=None, description="Size in bytes (None for an entry counted in tokens).")
    tokens: int | None = Field(default=None, description="Size in tokens, for a KV cache counted that way.")
    source: Provenance = Field(description="stated by the log, derived from stated figures, or assumed (a default).")
    line: int | None = Field(default=None, description="The log line the figure came from, when known.")
    note: str = ""


class Account(_Model):
    """Where the memory went: the ledger the cause and the remedies are read from."""

    entries: list[AccountEntry] = Field(default_factory=list)

    def get(self, name: str) -> int | None:
        """Bytes of the entry ``name``, or None when the account has no such entry."""
        for e in self.entries:
            if e.name == name and e.bytes is not None:
                return e.bytes
        return None

    def tokens(self, name: str) -> int | None:
        """Tokens of the entry ``name``, or None when the account has no such entry in tokens."""
        for e in self.entries:
            if e.name == name and e.tokens is not None:
                return e.tokens
        return None


class Cause(_Model):
    """Why the memory ran out, in one word of a small vocabulary, with its evidence."""

    id: str
    summary: str
    evidence: list[str] = Field(default_factory=list)


class Location(_Model):
    source: str = "<stdin>"
    line: int
    end_line: int


class Finding(_Model):
    """One failure (or memory warning) found in the log."""

    rule: str
    kind: str
    engine: str
    product: str | None = Field(
        default=None,
        description="The program the user runs and configures, whose knobs the remedies speak in: vllm-serve, "
        "vllm-python (the LLM class or an app embedding vLLM), ollama (not the llama.cpp inside it), verl, comfyui, "
        "pytorch (a plain script), ... (rules/products.toml). The engine is the code that failed.",
    )
    severity: Severity
    phase: Phase = "unknown"
    title: str
    message: str
    location: Location
    occurrences: int = 1
    ranks: list[str] = Field(default_factory=list)
    figures: dict[str, Any] = Field(default_factory=dict)
    cause: Cause | None = None
    account: Account | None = None
    remedies: list[Remedy] = Field(default_factory=list)


class Context(_Model):
    """Facts about the run collected from non-error lines (and hints)."""

    engine: str | None = None
    engine_version: str | None = None
    product: str | None = Field(
        default=None, description="The program the user runs and configures (see finding.product), when the log names one."
    )
    model: str | None = None
    gpu_name: str | None = None
    gpu_total_bytes: int | None = None
    gpu_count: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enforce_eager: bool | None = None
    block_size: int | None = None
    weights_bytes: int | None = None
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    cudagraph_bytes: int | None = None
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    expandable_segments: bool | None = None
    command: list[str] | None = None
    launch_args: dict[str, str] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    #: the launch arguments the user typed (a ``non-default args`` dump), as opposed to those of an
    #: engine-config dump: only these may rebuild a command line (not part of the report)
    _typed_args: dict[str, str] = PrivateAttr(default_factory=dict)
    #: a dump of every launch argument, defaults included (vLLM's ``args: Namespace(...)``,
    #: SGLang's ``server_args=ServerArgs(...)``): rebuilds a command from what differs from the
    #: defaults (not part of the report)
    _dump_args: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def typed_args(self) -> dict[str, str]:
        return self._typed_args

    @property
    def dump_args(self) -> dict[str, str]:
        return self._dump_args


class _Sourced(_Model):
    source: str = Field(description="The source these facts came from (as in sources and finding.location.source).")


class SourceContext(Context, _Sourced):
    """The context of one source (a file, a request, a stream): the facts its own lines (and the
    hints) gave. Each source is diagnosed on its own, so these are the facts its findings' cause
    and remedies rest on. (``source`` comes first in the JSON: the base it is declared in comes last.)"""

    @classmethod
    def of(cls, source: str, context: Context) -> SourceContext:
        """``context`` as the context of ``source`` (the launch arguments it knows typed or dumped too)."""
        out = cls(source=source, **context.model_dump())
        out._typed_args = dict(context.typed_args)
        out._dump_args = dict(context.dump_args)
        return out

    def facts(self) -> Context:
        """These facts without the source: the :class:`Context` a diagnosis of the source alone has."""
        out = Context(**self.model_dump(exclude={"source"}))
        out._typed_args = dict(self.typed_args)
        out._dump_args = dict(self.dump_args)
        return out


def common_context(contexts: Sequence[Context]) -> Context:
    """The facts every one of ``contexts`` states alike: a fact one lacks or states otherwise is
    left out (of ``launch_args`` and ``extra``, the entries all share). One context: a copy of it."""
    if not contexts:
        return Context()
    first, rest = contexts[0], contexts[1:]
    values: dict[str, Any] = {}
    for name in Context.model_fields:
        mine = getattr(first, name)
        if isinstance(mine, dict):
            values[name] = {k: v for k, v in mine.items() if all(k in getattr(c, name) and getattr(c, name)[k] == v for c in rest)}
        elif mine is not None and all(getattr(c, name) == mine for c in rest):
            values[name] = mine
    return Context(**values)


class Tool(_Model):
    name: str = "oomdoctor"
    version: str


class Summary(_Model):
    errors: int = 0
    warnings: int = 0
    cut_lines: int = Field(
        default=0,
        description="How many lines were longer than the bound searched whole (1 MiB) and were searched "
        "only in their first MiB (see cut_lines of the report for the first of them).",
    )


class CutLine(_Model):
    """A line longer than the bound searched whole: only its first ``searched_bytes`` were read."""

    source: str = Field(description="The source of the line (as in sources).")
    line: int = Field(description="The line's number in its source.")
    bytes: int = Field(description="The line's length in bytes (without its newline).")
    searched_bytes: int = Field(description="How many of its first bytes were searched (the bound, 1 MiB).")


class Report(_Model):
    """The whole diagnosis of one or more log sources."""

    schema_version: int = SCHEMA_VERSION
    tool: Tool
    sources: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    context: Context = Field(
        default_factory=Context,
        description="The run's facts. With one source, that source's context; with several, the facts they all "
        "state alike (see contexts for each source's own).",
    )
    contexts: list[SourceContext] = Field(
        default_factory=list,
        description="One context per source, in the order of sources. Each source is diagnosed on its own: "
        "a finding's cause and remedies rest only on the context of its own source (finding.location.source).",
    )
    summary: Summary = Field(default_factory=Summary)
    cut_lines: list[CutLine] = Field(
        default_factory=list,
        description="Lines longer than the bound searched whole (1 MiB): a failure message past the bound "
        "is not seen. The first 16 of each source; summary.cut_lines counts them all.",
    )
    lang: str = Field(
        default_factory=current_lang,
        description="The language of the human text (titles, cause summaries, why, trade-offs): en or ja. "
        "Keys, kinds, cause ids, flags and figures are the same in every language.",
    )

    @property
    def has_errors(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def context_of(self, source: str) -> Context:
        """The context of ``source`` (its entry in :attr:`contexts`), else the report's :attr:`context`."""
        for c in self.contexts:
            if c.source == source:
                return c
        return self.context


def combine_reports(reports: Sequence[Report]) -> Report:
    """One report of several sources, each diagnosed on its own (a :class:`Report` each, from its
    own scan): their sources, findings and contexts in order, the counts added up, and as
    ``context`` the facts every source states alike (:func:`common_context`). One report: itself."""
    if len(reports) == 1:
        return reports[0]
    if not reports:
        raise ValueError("no report to combine")
    contexts = [c for r in reports for c in r.contexts]
    findings = [f for r in reports for f in r.findings]
    return Report(
        schema_version=reports[0].schema_version,
        tool=reports[0].tool,
        sources=[s for r in reports for s in r.sources],
        findings=findings,
        context=common_context([c.facts() for c in contexts]),
        contexts=contexts,
        summary=Summary(
            errors=sum(f.severity == "error" for f in findings),
            warnings=sum(f.severity == "warning" for f in findings),
            cut_lines=sum(r.summary.cut_lines for r in reports),
        ),
        cut_lines=[c for r in reports for c in r.cut_lines],
        lang=reports[0].lang,
    )


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Report` (committed as ``oomdoctor/report.schema.json``)."""
    return Report.model_json_schema()


def main() -> None:
    """Write ``oomdoctor/report.schema.json`` (``python -c "from oomdoctor.report import main; main()"``)."""
    import json
    from pathlib import Path

    path = Path(__file__).with_name("report.schema.json")
    path.write_text(json.dumps(report_json_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
