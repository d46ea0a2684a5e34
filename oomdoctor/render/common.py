"""Pieces every human-readable renderer shares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from oomdoctor.advisor.code_lines import code_lines, is_words
from oomdoctor.i18n import N_, _, current_lang
from oomdoctor.report import CodeLine, Context, Finding, Remedy, Report
from oomdoctor.units import format_size

#: figures shown first, in this order, with a label
FIGURE_LABELS: dict[str, str] = {
    "requested_bytes": N_("requested"),
    "total_bytes": N_("GPU total"),
    "free_bytes": N_("free"),
    "in_use_bytes": N_("this process"),
    "allocated_bytes": N_("allocated by PyTorch"),
    "reserved_bytes": N_("reserved by PyTorch"),
    "reserved_unallocated_bytes": N_("reserved, unallocated"),
    "private_pool_bytes": N_("private pools"),
    "max_seq_len": N_("max seq len"),
    "kv_cache_tokens": N_("KV cache tokens"),
    "kv_cache_needed_bytes": N_("KV cache needed"),
    "kv_cache_available_bytes": N_("KV cache available"),
    "estimated_max_model_len": N_("estimated max model len"),
    "gpu_memory_utilization": "gpu_memory_utilization",
    "desired_bytes": N_("desired"),
}


# Labels of further figures. They do not order the list (FIGURE_LABELS does); each English label is the
# name as it read before, so English output is unchanged, and the Japanese one is in the catalog.
MORE_FIGURE_LABELS: dict[str, str] = {
    "gpu_index": N_("gpu index"),
    "pid": N_("pid"),
    "process": N_("process"),
    "function": N_("function"),
    "pool": N_("pool"),
    "mps_allocated_bytes": N_("mps allocated"),
    "other_allocations_bytes": N_("other allocations"),
    "max_allowed_bytes": N_("max allowed"),
    "allowed_bytes": N_("allowed"),
    "buffer_bytes": N_("buffer"),
    "buffer_type": N_("buffer type"),
    "other_processes": N_("other processes"),
    "exit_code": N_("exit code"),
    "prefill_tokens": N_("prefill tokens"),
    "anon_rss_bytes": N_("anon rss"),
    "file_rss_bytes": N_("file rss"),
    "shmem_rss_bytes": N_("shmem rss"),
    "total_vm_bytes": N_("total vm"),
    "available_bytes": N_("available"),
    "available_tokens": N_("available tokens"),
    "evictable_tokens": N_("evictable tokens"),
    "requested_tokens": N_("requested tokens"),
    "required_bytes": N_("required"),
    "limit_bytes": N_("limit"),
    "weights_bytes": N_("weights"),
    "used_bytes": N_("used"),
    "tensor_shape": N_("tensor shape"),
    "step": N_("step"),
    "workers_killed": N_("workers killed"),
    "local_rank": N_("local rank"),
}


def figure_value(name: str, value: Any) -> str:
    if name == "other_processes" and isinstance(value, list):
        return ", ".join(f"pid {p.get('pid')}: {format_size(p.get('in_use_bytes'))}" for p in value[:6]) + (
            f" (+{len(value) - 6} more)" if len(value) > 6 else ""
        )
    if name.endswith("_bytes") and isinstance(value, int):
        return format_size(value)
    return str(value)


def figure_items(f: Finding) -> list[tuple[str, str]]:
    names = [n for n in FIGURE_LABELS if n in f.figures] + [n for n in f.figures if n not in FIGURE_LABELS]
    return [(figure_label(n), figure_value(n, f.figures[n])) for n in names]


def figure_label(name: str) -> str:
    """The label of figure ``name`` in the language in force (other figures: their name, spaced)."""
    label = FIGURE_LABELS.get(name) or MORE_FIGURE_LABELS.get(name)
    if label is not None:
        return _(label)
    if current_lang() != "en":
        return name  # no translation: the figure's own key, as in JSON (keys stay English)
    return name.replace("_bytes", "").replace("_", " ")


def code_of(r: Remedy) -> list[CodeLine]:
    """The remedy's code lines (:attr:`Remedy.code`; for a remedy built without the advisor, from
    its env, flags and settings with no product known)."""
    if r.code or not (r.env or r.flags or r.settings):
        return list(r.code)
    return code_lines(r)


def prose_settings(r: Remedy) -> list[tuple[str, str]]:
    """The remedy's changes on no code line (a value said in words, or a setting with no known
    place): shown as ``name: words``."""
    coded = {k for line in code_of(r) for k in line.keys}
    worded = [(k, v) for k, v in [*r.env.items(), *r.flags.items()] if is_words(v)]
    return worded + [(k, v) for k, v in r.settings.items() if k not in coded]


def snippet_lines(r: Remedy) -> list[str]:
    """The texts of the remedy's code lines (:func:`code_of`), each pasteable where its label says."""
    return [line.text for line in code_of(r)]


def remedy_snippet(r: Remedy) -> str:
    """The first of :func:`snippet_lines` (one line: ``--brief``, a chat's fallback text)."""
    lines = snippet_lines(r)
    return lines[0] if lines else ""


def setting_lines(r: Remedy) -> list[str]:
    """``name: words`` for each prose setting (``name：words`` in Japanese)."""
    return [f"{k}{colon()}{v}" for k, v in prose_settings(r)]


#: how the renderers name each language of a code line
LANGUAGE_NAMES = {"shell": "shell", "python": "Python", "json": "JSON", "yaml": "YAML", "toml": "TOML"}


def code_label(line: CodeLine) -> str:
    """What a code line is and where it runs, as the line above it says: ``flags of vllm serve:``,
    ``Python:`` (the call names itself), ``JSON, DeepSpeed config:``; empty for a line that is a
    shell command of its own (``$ export ...``). A place in words (``where``, English in JSON) is
    shown in the language in force; a program's name as it is."""
    if line.language == "shell":
        if line.where == "environment":
            return ""
        return _("flags of {program}:").format(program=_(line.where))
    name = LANGUAGE_NAMES.get(line.language, line.language)
    if line.language == "python":
        return _("{language}:").format(language=name)
    return _("{language}, {where}:").format(language=name, where=_(line.where))


def code_text(line: CodeLine) -> str:
    """The line as shown: a shell command of its own after ``$ ``, anything else as it is."""
    return "$ " + line.text if line.language == "shell" and line.where == "environment" else line.text


def shown_codes(r: Remedy, command: bool) -> list[CodeLine]:
    """The code lines to show under a remedy: with its whole ``command`` shown (``command``: True),
    the settings' lines only (the command carries the env and flags)."""
    lines = code_of(r)
    if command and r.command:
        return [line for line in lines if line.language != "shell"]
    return lines


def colon() -> str:
    """What joins a label to its text: ``": "`` in English, the full-width ``"："`` (no space) in
    Japanese (CONTRIBUTING.md, "Japanese style")."""
    return "：" if current_lang() == "ja" else ": "


def remedy_headline(r: Remedy, esc: Callable[[str], str] = str) -> str:
    """``N. Title _(fits, saves X)_``, the first line of a remedy in chat renderers (its code lines
    follow, each under its label)."""
    saves = _(", saves {size}").format(size=format_size(r.saves_bytes)) if r.saves_bytes else ""
    return f"{r.rank}. {esc(r.title)}" + f" _({fits_label(r)}{saves})_"


def fits_label(r: Remedy) -> str:
    return {True: _("fits"), False: _("not enough alone"), None: _("may help")}[r.fits]


def confidence_label(confidence: str) -> str:
    """``high confidence`` (``medium``, ``low``) in the language in force."""
    labels = {"high": _("high confidence"), "medium": _("medium confidence"), "low": _("low confidence")}
    return labels.get(confidence, confidence)


def where(f: Finding) -> str:
    loc = f.location
    span = f"{loc.line}" if loc.end_line == loc.line else f"{loc.line}-{loc.end_line}"
    return f"{loc.source}:{span}"


def product_name(product: str) -> str:
    """How the report shows a product id (``vllm-python`` -> ``vLLM (LLM class)``), in the language
    in force: its ``name`` in rules/products.toml; the id itself where the pack has no such product."""
    from oomdoctor.rulepack import default_pack

    try:
        known = default_pack().products.get(product)
    except Exception:  # a broken pack must not stop a report from rendering
        known = None
    return known.name_in(current_lang()) if known is not None else product


def occurrences_note(f: Finding) -> str:
    if f.occurrences <= 1:
        return ""
    if len(f.ranks) > 1:
        return _("{count}× on {n} ranks/workers").format(count=f.occurrences, n=len(f.ranks))
    return _("{count}×").format(count=f.occurrences)


def phase_text(phase: str) -> str:
    """A finding's phase as shown: its id (``kv-cache-alloc``), or "unknown" in words of the language."""
    return _("unknown") if phase == "unknown" else phase


def facts_of(ctx: Context) -> list[str]:
    """The run's facts worth a glance (engine and version, model, GPU, its memory, tensor parallelism)."""
    facts = [
        ctx.engine and f"{ctx.engine}{' ' + ctx.engine_version if ctx.engine_version else ''}",
        ctx.model,
        ctx.gpu_name,
        ctx.gpu_total_bytes and f"{format_size(ctx.gpu_total_bytes)} GPU",
        ctx.tensor_parallel_size and ctx.tensor_parallel_size > 1 and f"TP {ctx.tensor_parallel_size}",
    ]
    return [str(f) for f in facts if f]


def by_source(report: Report) -> list[tuple[str, list[Finding]]]:
    """The report's sources in order, each with its own findings (each source is a run of its own)."""
    return [(source, [f for f in report.findings if f.location.source == source]) for source in dict.fromkeys(report.sources)]


def failures_text(n: int) -> str:
    """``1 out-of-memory failure``, ``2 out-of-memory failures``."""
    return (_("{n} out-of-memory failure") if n == 1 else _("{n} out-of-memory failures")).format(n=n)


def warnings_text(n: int, memory: bool = False) -> str:
    """``0 warnings``, ``1 warning``; ``memory``: ``1 memory warning`` (when there is no failure)."""
    if memory:
        return (_("{n} memory warning") if n == 1 else _("{n} memory warnings")).format(n=n)
    return (_("{n} warning") if n == 1 else _("{n} warnings")).format(n=n)


def result_text(errors: int, warnings: int) -> str:
    """The result of a run in words: ``1 out-of-memory failure, 0 warnings``, ``no out-of-memory
    failure; 2 memory warnings``, ``no out-of-memory failure found``."""
    if errors:
        return _("{failures}, {warnings}").format(failures=failures_text(errors), warnings=warnings_text(warnings))
    if warnings:
        return _("no out-of-memory failure; {warnings}").format(warnings=warnings_text(warnings, memory=True))
    return _("no out-of-memory failure found")


def cut_lines_text(report: Report) -> str:
    """The note a report gives when lines were longer than the bound searched whole: a failure
    message past the bound was not seen, so "none found" covers only their first part. Empty
    when no line was cut."""
    n = report.summary.cut_lines
    if not n:
        return ""
    where = ", ".join(f"{c.source}:{c.line} ({format_size(c.bytes)})" for c in report.cut_lines[:3])
    more = n - min(len(report.cut_lines), 3)
    if more > 0:
        where += _(" and {n} more").format(n=more)
    bound = format_size(report.cut_lines[0].searched_bytes) if report.cut_lines else ""
    return _("Note: {n} line(s) longer than {bound} searched only in their first {bound}: {where}.").format(
        n=n, bound=bound, where=where
    )


#: below this many full-length requests at once, the KV cache is thin: a burst, or one long prompt
#: with another running, waits or is preempted
THIN_CONCURRENCY = 2.0
#: below this much memory outside the engine's budget, another process or a larger CUDA-graph
#: capture may not fit beside it
THIN_HEADROOM = 1 << 30


def healthy_facts(ctx: Context) -> tuple[list[tuple[str, str]], list[str]]:
    """What a run without an out-of-memory failure shows about its memory (label, value), and the
    warnings when the headroom is thin: weights, KV cache size and tokens, the requests of full
    length it holds at once, the memory left outside the engine's budget."""
    rows: list[tuple[str, str]] = []
    warnings: list[str] = []
    if ctx.weights_bytes:
        rows.append((_("weights"), format_size(ctx.weights_bytes)))
    if ctx.kv_cache_bytes or ctx.kv_cache_tokens:
        size = format_size(ctx.kv_cache_bytes) if ctx.kv_cache_bytes else ""
        tokens = _("{tokens} tokens").format(tokens=ctx.kv_cache_tokens) if ctx.kv_cache_tokens else ""
        rows.append((_("KV cache"), f"{size} ({tokens})" if size and tokens else size or tokens))
    concurrency = ctx.extra.get("max_concurrency")
    if not isinstance(concurrency, (int, float)) and ctx.kv_cache_tokens and ctx.max_model_len:
        concurrency = round(ctx.kv_cache_tokens / ctx.max_model_len, 2)
    if isinstance(concurrency, (int, float)) and ctx.max_model_len:
        rows.append((_("max concurrency"), _("{n:g} requests of {length} tokens at once").format(
            n=concurrency, length=ctx.max_model_len)))
        if concurrency < THIN_CONCURRENCY:
            warnings.append(_(
                "the KV cache holds {n:g} requests of full length ({length} tokens) at once: a second long request "
                "waits or is preempted"
            ).format(n=concurrency, length=ctx.max_model_len))
    if ctx.gpu_total_bytes and ctx.gpu_memory_utilization:
        left = round(ctx.gpu_total_bytes * (1 - ctx.gpu_memory_utilization))
        rows.append((_("headroom"), _("{size} outside the engine's budget ({total} × (1 − {utilization:g}))").format(
            size=format_size(left), total=format_size(ctx.gpu_total_bytes), utilization=ctx.gpu_memory_utilization)))
        if left < THIN_HEADROOM:
            warnings.append(_(
                "only {size} of the GPU is left outside the engine's budget: another process on this GPU, or a "
                "larger CUDA-graph capture, may not fit"
            ).format(size=format_size(left)))
    return rows, warnings

