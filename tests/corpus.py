"""Helpers to read the labelled fixtures and compare a report with its label, aspect by aspect.

A labelled case (``fixtures/<engine>/<id>.log`` + ``<id>.label.json``, copied from
``../shared/corpus/``) is checked on separate *aspects*, each a test of its own:

- ``clean`` (healthy logs): the error findings' kinds, expected ``[]``;
- ``kind``: the kind of the finding that answers the label (or of the first error finding);
- ``spurious``: kinds of error findings other than the labelled one, expected ``[]``;
- ``phase``: the phase of that finding;
- ``product``: the product of that finding (the program the user runs and configures);
- ``figure.<label key>``: each labelled number, looked up in the finding's figures, then the context;
- ``fix``: the flag/env/setting names of the top three remedies, which must name the fix that worked;
- ``value.<remedy id>``: hand-checked values a synthetic fixture's label lists under ``key_values``,
  each with its arithmetic (``{"remedy": id, "values": {flag: value}, "arithmetic": "..."}``).

Where the tool knowingly differs from a label, the difference is recorded in
:data:`DIVERGENCES_FILE` with the tool's current value, so the test asserts that value instead of
skipping the case. ``pytest --update-divergences`` rewrites that file from the current tool (it
keeps the written reasons of entries that stay); review its diff like code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oomdoctor.report import Report

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
DIVERGENCES_FILE = Path(__file__).resolve().parent / "corpus_divergences.json"

#: label key -> report figure name (shared/corpus/README.md)
LABEL_FIGURES = {
    "requested": "requested_bytes",
    "total": "total_bytes",
    "free": "free_bytes",
    "allocated_by_pytorch": "allocated_bytes",
    "reserved_by_pytorch": "reserved_bytes",
    "reserved_unallocated": "reserved_unallocated_bytes",
    "non_pytorch": "non_pytorch_bytes",
    "in_use": "in_use_bytes",
    "private_pools": "private_pool_bytes",
    "allowed": "allowed_bytes",
    "kv_cache_needed": "kv_cache_needed_bytes",
    "kv_cache_available": "kv_cache_available_bytes",
    "desired": "desired_bytes",
    "mps_allocated": "mps_allocated_bytes",
    "other_allocations": "other_allocations_bytes",
    "max_allowed": "max_allowed_bytes",
    "dummy_requests": "num_dummy_requests",
    "gpu_index": "gpu_index",
    "max_seq_len": "max_seq_len",
    "kv_cache_tokens": "kv_cache_tokens",
    "estimated_max_model_len": "estimated_max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "prefill_tokens": "prefill_tokens",
    "other_processes": "other_processes",
}

#: label keys outside the corpus README's table -> the name the report uses for the same number
#: (a figure of the finding, else a field of the context). Keys not listed here are looked up as
#: ``<key>_bytes`` and ``<key>``. Add a name here when the tool starts to carry a labelled number.
LABEL_ALIASES = {
    "model_weights": "weights_bytes",
    "gpu_blocks": "num_gpu_blocks",
    "buffer_size": "buffer_bytes",
    "shm_segment_size": "segment_bytes",
    "cumulative_preemptions": "preemptions",
    "retracted_reqs": "retracted_requests",
    "usage_fraction": "memory_usage_fraction",
    "threshold": "memory_usage_threshold",
    "usable": "budget_bytes",
    "decode_tokens": "requested_tokens",
    "evictable_size": "evictable_tokens",
    "final_n_batch": "n_batch",  # llama.cpp's last "n_batch = N" before the failure
    "non_torch": "non_torch_bytes",
    "activation_peak": "activation_peak_bytes",
    "currently_allocated": "allocated_bytes",
    "device_limit": "total_bytes",
    "kv_cache_reserved": "kv_cache_available_bytes",
    # Ray's memory monitor: "memory used=W) was running was U / T (F), ... threshold of H"
    "task_memory_used": "worker_memory_used_bytes",
    "node_used": "node_memory_used_bytes",
    "node_total": "node_memory_total_bytes",
    "node_memory_fraction": "memory_usage_fraction",
    "kill_threshold": "memory_usage_threshold",
    "needed": "requested_bytes",  # old ggml: "not enough space in the context's memory pool (needed N, ..."
    "n_ctx": "max_model_len",  # llama.cpp's context length, the context's max_model_len
    "cuda_graph_estimate": "cudagraph_bytes",  # vLLM's "Estimated CUDA graph memory: X GiB total"
}

PHASE_ALIASES = {"serving": "inference", None: "unknown", "-": "unknown"}

#: a label kind is also answered by these report kinds (as in shared/tools/evaluate.py)
KIND_ALSO = {"torch.cuda-oom": {"vllm.weights.not-enough-memory"}}

#: aspects a golden must not contradict (all of them: figures, kind, phase, the named fix)
ASPECT_WORDS = {
    "clean": "error findings on a healthy log",
    "kind": "kind",
    "spurious": "extra error findings",
    "phase": "phase",
    "fix": "top-three remedies (the fix that worked)",
    "product": "product",
}


def describe(aspect: str) -> str:
    """An aspect in words, for messages."""
    if aspect.startswith("value."):
        return f"hand-checked value of {aspect.removeprefix('value.')}"
    if aspect.startswith("figure."):
        return f"figure {aspect.removeprefix('figure.')}"
    return ASPECT_WORDS.get(aspect, aspect)


def label_value(v: Any) -> Any:
    if isinstance(v, dict) and "bytes" in v:
        return v["bytes"]
    if isinstance(v, list):
        out = []
        for item in v:
            if isinstance(item, dict):
                out.append({LABEL_FIGURES.get(k, k): label_value(x) for k, x in item.items()})
            else:
                out.append(item)
        return out
    return v


def expected_figures(label: dict[str, Any]) -> dict[str, Any]:
    """The figures a finding must carry, from the label's numbers (mapped keys only)."""
    out = {}
    for k, v in label.get("numbers", {}).items():
        if k in LABEL_FIGURES:
            out[LABEL_FIGURES[k]] = label_value(v)
    return out


def labelled_cases() -> list[Path]:
    return sorted(FIXTURES.glob("*/*.label.json"))


def log_for(label_path: Path) -> Path:
    return label_path.with_name(label_path.name.replace(".label.json", ".log"))


def label_for(log: Path) -> Path:
    return log.with_name(log.name[: -len(".log")] + ".label.json")


def case_id(label_path: Path) -> str:
    return label_path.name.replace(".label.json", "")


@cache
def load_label(label_path: Path) -> dict[str, Any]:
    return json.loads(label_path.read_text())


@cache
def fixture_report(log: Path) -> Report:
    """A fixture log's report, diagnosed once per test process: several modules build their
    parameters from every fixture's report at collection time, and each xdist worker collects."""
    import oomdoctor

    return oomdoctor.diagnose(log.read_bytes(), source=f"{log.parent.name}/{log.name}")


@cache
def report_for(log: Path) -> dict[str, Any]:
    """The JSON report of a fixture log, as a plain dict (so new report fields change nothing here)."""
    return json.loads(fixture_report(log).model_dump_json())


# --- aspects ----------------------------------------------------------------------------------


def fix_is_labelled(label: Mapping[str, Any]) -> bool:
    """Does the label name a fix to find among the top three remedies (as evaluate.py scores it)?"""
    return bool(
        label.get("fix_match")
        or (label.get("fix_flags") and label.get("fix_confidence") in ("confirmed", "suggested"))
    )


def aspects(label: Mapping[str, Any]) -> list[str]:
    """The aspects on which a report is compared with this label, in a stable order."""
    if label["kind"] == "not-oom":
        return ["clean"]
    out = ["kind", "spurious", "phase"]
    if label.get("product"):
        out.append("product")
    out += [f"figure.{k}" for k in label.get("numbers", {})]
    if fix_is_labelled(label):
        out.append("fix")
    out += [f"value.{kv['remedy']}" for kv in label.get("key_values", [])]
    return out


def _ok_kinds(label: Mapping[str, Any]) -> set[str]:
    return {label["kind"], *KIND_ALSO.get(label["kind"], set())}


def _pool(label: Mapping[str, Any], report: Mapping[str, Any]) -> tuple[list[dict], list[dict]]:
    """(error findings, those of the labelled kind). A recovered failure also counts warnings."""
    severities = ("error", "warning") if label.get("severity") == "warning" else ("error",)
    errors = [f for f in report.get("findings", []) if f.get("severity") in severities]
    same = [f for f in errors if f.get("kind") in _ok_kinds(label)]
    return errors, same


def _norm(k: str) -> str:
    return str(k).strip().lstrip("-").replace("_", "-").lower()


def remedy_keys(remedy: Mapping[str, Any], *, values: bool = True) -> set[str]:
    """Normalised flag/env/setting names of a remedy (and ``name=value`` when ``values``)."""
    keys = set()
    for field in ("flags", "env", "settings"):
        for k, v in (remedy.get(field) or {}).items():
            keys.add(_norm(k))
            if values and v not in (None, ""):
                keys.add(_norm(f"{k}={v}"))
    return keys


def _fix_tokens(label: Mapping[str, Any]) -> list[str]:
    if label.get("fix_match"):
        return [_norm(t) for t in label["fix_match"]]
    out = []
    for flag in label.get("fix_flags") or []:
        flag = flag.strip()
        if "=" in flag and not flag.startswith("-"):
            flag = flag.split("=", 1)[0]
        else:
            flag = flag.split()[0].split("=")[0]
        out.append(_norm(flag))
    return out


def _top3(pool: list[dict]) -> list[dict]:
    return [r for f in pool for r in sorted(f.get("remedies") or [], key=lambda r: r.get("rank", 99))[:3]]


def fix_found(label: Mapping[str, Any], report: Mapping[str, Any]) -> bool:
    """Is the labelled fix among the top three remedies? Short tokens match exactly, longer ones as substrings."""
    errors, same = _pool(label, report)
    keys: set[str] = set()
    for r in _top3(same or errors):
        keys |= remedy_keys(r)
    return any(any((k == t) if len(t) <= 2 else (t in k) for k in keys) for t in _fix_tokens(label))


def _figure_names(key: str) -> list[str]:
    if key in LABEL_FIGURES:
        return [LABEL_FIGURES[key]]
    names = [LABEL_ALIASES[key]] if key in LABEL_ALIASES else []
    return [*names, f"{key}_bytes", key]


def _figure(label: Mapping[str, Any], report: Mapping[str, Any], key: str) -> Any:
    errors, same = _pool(label, report)
    context = report.get("context") or {}
    for name in _figure_names(key):
        for f in same or errors:
            if name in (f.get("figures") or {}):
                return f["figures"][name]
    for name in _figure_names(key):
        if context.get(name) is not None:
            return context[name]
        if (context.get("extra") or {}).get(name) is not None:
            return context["extra"][name]
    # a value the user typed on the launch line (e.g. SGLang's --page-size): the command's own text
    typed = (context.get("launch_args") or {}).get(key)
    return _number(typed) if typed is not None else None


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def observe(label: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's value of every aspect of this label (JSON values)."""
    errors, same = _pool(label, report)
    out: dict[str, Any] = {}
    if label["kind"] == "not-oom":
        out["clean"] = sorted({f["kind"] for f in errors})
        return out
    chosen = same[0] if same else (errors[0] if errors else None)
    out["kind"] = label["kind"] if same else (chosen["kind"] if chosen else None)
    # findings beyond the one that answers the label (a wrong kind is the "kind" aspect's)
    answered = _ok_kinds(label) | ({chosen["kind"]} if chosen and not same else set())
    out["spurious"] = sorted({f["kind"] for f in errors if f["kind"] not in answered})
    out["phase"] = chosen.get("phase") if chosen else None
    if label.get("product"):
        out["product"] = chosen.get("product") if chosen else None
    for key in label.get("numbers", {}):
        out[f"figure.{key}"] = _figure(label, report, key)
    if fix_is_labelled(label):
        # the names only (values move with every advisor change); whether it hits is fix_found's
        names: set[str] = set()
        for r in _top3(same or errors):
            names |= remedy_keys(r, values=False)
        out["fix"] = {"hit": fix_found(label, report), "top3": sorted(names)}
    for kv in label.get("key_values", []):
        out[f"value.{kv['remedy']}"] = _remedy_values(same or errors, kv["remedy"], kv["values"])
    return out


def _remedy_values(pool: list[dict], remedy_id: str, keys: Mapping[str, Any]) -> dict[str, Any] | None:
    """The values the remedy ``remedy_id`` gives to ``keys`` (None when no finding offers it)."""
    for f in pool:
        for r in f.get("remedies") or []:
            if r.get("id") == remedy_id:
                changes = {**(r.get("flags") or {}), **(r.get("env") or {}), **(r.get("settings") or {})}
                return {k: changes.get(k) for k in keys}
    return None


def wanted(label: Mapping[str, Any], aspect: str) -> Any:
    """What the label says for an aspect (for messages)."""
    if aspect in ("clean", "spurious"):
        return []
    if aspect in ("kind", "product"):
        return label[aspect]
    if aspect == "phase":
        want = PHASE_ALIASES.get(label.get("phase"), label.get("phase"))
        return want if label.get("phase_evidence", True) is not False else f"{want} or unknown"
    if aspect == "fix":
        return f"one of {_fix_tokens(label)} in the top three"
    if aspect.startswith("value."):
        return next(kv["values"] for kv in label["key_values"] if f"value.{kv['remedy']}" == aspect)
    return label_value(label["numbers"][aspect.removeprefix("figure.")])


def agrees(label: Mapping[str, Any], aspect: str, value: Any) -> bool:
    """Does the tool's value of ``aspect`` match the label?"""
    if aspect in ("clean", "spurious"):
        return value == []
    if aspect in ("kind", "product"):
        return value == label[aspect]
    if aspect == "phase":
        want = PHASE_ALIASES.get(label.get("phase"), label.get("phase"))
        # without phase evidence in the excerpt, "unknown" is the honest answer (corpus README)
        return value == want or (label.get("phase_evidence", True) is False and value == "unknown")
    if aspect == "fix":
        return bool(value["hit"])
    return bool(value == wanted(label, aspect))


def disagreements(label: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, Any]:
    """aspect -> the tool's value, for each aspect where the report contradicts the label."""
    seen = observe(label, report)
    return {a: seen[a] for a in aspects(label) if not agrees(label, a, seen[a])}


# --- the known-divergence file ----------------------------------------------------------------


def load_divergences(path: Path = DIVERGENCES_FILE) -> dict[str, dict[str, dict[str, Any]]]:
    """case id -> aspect -> {"label", "tool", "reason"}."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def unrecorded(case: str, label: Mapping[str, Any], report: Mapping[str, Any],
               recorded: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Disagreements of a report with its label that the divergence file does not hold as they are."""
    known = recorded.get(case, {})
    return {a: v for a, v in disagreements(label, report).items() if a not in known or known[a]["tool"] != v}


_DOC = (
    "Known divergences of the tool from the corpus labels (tests/test_corpus.py asserts each "
    "'tool' value). Rewritten by: python -m pytest tests/test_corpus.py --update-divergences "
    "(reasons of entries that stay are kept; a new entry has reason null, and "
    "tests/test_corpus.py fails until someone writes what the tool and the label each read)."
)


def rewrite_divergences(path: Path = DIVERGENCES_FILE) -> list[str]:
    """Rewrite the divergence file from the current tool; return a summary of what moved."""
    old = load_divergences(path)
    new: dict[str, dict[str, dict[str, Any]]] = {}
    for lp in labelled_cases():
        label = load_label(lp)
        report = report_for(log_for(lp))
        for aspect, value in disagreements(label, report).items():
            prev = old.get(case_id(lp), {}).get(aspect)
            reason = prev.get("reason") if prev else None
            new.setdefault(case_id(lp), {})[aspect] = {
                "label": wanted(label, aspect),
                "tool": value,
                "reason": reason,
            }
    lines = []
    for case in sorted(set(old) | set(new)):
        for aspect in sorted(set(old.get(case, {})) | set(new.get(case, {}))):
            a, b = old.get(case, {}).get(aspect), new.get(case, {}).get(aspect)
            if a and not b:
                lines.append(f"resolved  {case} {aspect} (now agrees with the label)")
            elif b and not a:
                lines.append(f"NEW       {case} {aspect}: label {b['label']!r}, tool {b['tool']!r}")
            elif a and b and a["tool"] != b["tool"]:
                lines.append(f"changed   {case} {aspect}: tool {a['tool']!r} -> {b['tool']!r}")
    path.write_text(json.dumps({"_doc": _DOC, **new}, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    return lines
