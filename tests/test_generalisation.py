"""Every fixture's failure, perturbed the ways real pastes perturb it, is still found.

The failure is the span of lines its golden report names (``location.line`` .. ``end_line``),
scanned on its own: unperturbed it gives the baseline, then each perturbation must still give a
finding of the same severity, and no number it reads may contradict the baseline's figure of the
same name (figures are exact or absent). Perturbations that keep every number and its words
together (an unknown prefix, re-quoting) must keep every numeric figure of a one-line failure too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

import oomdoctor
from oomdoctor.rulepack import default_pack
from tests.corpus import FIXTURES
from tests.sampling import in_sample, stratified

LOGS = sorted(FIXTURES.glob("*/*.log"))
PACK = default_pack()


def _failures() -> list[tuple[str, str, str]]:
    """(id, failure text, severity) for the first finding of each fixture's golden report."""
    out = []
    for log in LOGS:
        golden = json.loads(log.with_suffix(".expected.json").read_text())
        findings = [f for f in golden["findings"] if f["severity"] == "error"] or golden["findings"]
        # a stand-in (a rule with needs_phase: the failure's own line is cut) is told by the lines
        # around its span, the phase they show, by design: not by the span alone
        findings = [f for f in findings if PACK.rule(f["rule"]).rule.needs_phase is None]
        if not findings:
            continue
        f = findings[0]
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        span = lines[f["location"]["line"] - 1 : f["location"]["end_line"]]
        severity = f["severity"]
        alone = oomdoctor.diagnose("\n".join(span).encode("utf-8"), source="<span>").findings
        if severity == "warning" and not any(x.severity == "warning" for x in alone):
            # recovered by a line after the span (llama.cpp's "retrying without pipeline
            # parallelism"): the span alone is the failure, an error
            severity = "error"
        out.append((f"{log.parent.name}/{log.stem}", "\n".join(span), severity))
    return out


#: rules read from the upstream packages (issue 34) that no fixture shows yet: their match
#: examples, the upstream wording, are perturbed the same way as the fixtures' failures
UPSTREAM_RULES = (
    "onnxruntime.bfc-arena-alloc-failed",
    "onnxruntime.bfc-arena-extend-failed",
    "onnxruntime.cuda-failure-oom",
    "ctranslate2.cuda-oom",
    "ctranslate2.cublas-alloc-failed",
    "mlx.metal-malloc-too-large",
    "mlx.metal-resource-limit",
    "mlx.malloc-failed",
    "mlx.command-buffer-oom",
    "xla.tpu-hbm-exhausted",
    "xla.tpu-device-buffer-alloc-failed",
    "ggml.metal-buffer-alloc-failed",
    "ggml.sycl-alloc-failed",
    "host.torch-cpu-alloc-failed",
    "host.torch-mmap-failed",
    "host.numpy-array-alloc-failed",
    "host.windows-paging-file",
    "torch.cuda-malloc-async.recovered",
    "torch-memory-saver.cumemcreate-oom",
    "tf.cuda-malloc-async-failed",
    "host.subprocess-sigkill",
    "torch.mps-invalid-buffer-size",
    "torch.cudnn-oom-outside-allocator",
    "host.shm-file-write-failed",
    "sglang.profiled-tokens-negative",
    "exllamav2.autosplit-insufficient-vram",
    "exllamav2.gpu-split-insufficient",
    "exllamav2.job-exceeds-cache",
    "exllamav2.quantize-oom-moved",
    "itex.bfc-ran-out",
    "itex.eigen-allocator-oom",
    "openvino.gpu-exceeded-available",
    "openvino.gpu-exceeded-max-alloc",
    "openvino.gpu-buffer-alloc-failed",
    "onnxruntime.hip-failure-oom",
    "onnxruntime.allocation-failed",
    "onnxruntime.bfc-arena-no-free-block",
    "onnxruntime.bfc-arena-ran-out",
    "onnxruntime.dml-e-outofmemory",
    "torch.directml-not-enough-video-memory",
    "torch.directml-allocator-oom",
    "openvino.gpu-cl-out-of-resources",
)


def _rule_examples() -> list[tuple[str, str, str]]:
    """(id, example log, severity) for every match example of :data:`UPSTREAM_RULES`."""
    pack = default_pack()
    out = []
    for rule_id in UPSTREAM_RULES:
        rule = pack.rule(rule_id).rule
        for k, example in enumerate(rule.match):
            out.append((f"rule/{rule_id}#{k}", example.log, rule.severity))
    return out


FAILURES = _failures() + _rule_examples()


def _scan(text: str) -> list[Any]:
    return list(oomdoctor.diagnose(text.encode("utf-8"), source="<perturbed>").findings)


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _wrap(width: int) -> Callable[[str], str]:
    def wrap(text: str) -> str:
        flat = _one_line(text)
        return "\n".join(flat[i : i + width] for i in range(0, len(flat), width))

    wrap.__name__ = f"wrap{width}"
    return wrap


def _drop_first_sentence(text: str) -> str:
    """The message without its first sentence, when two more follow it (the second alone is
    often bare advice, "Try increasing ...", which names no failure and must not be found)."""
    flat = _one_line(text)
    ends = list(re.finditer(r"[.!?]\s+(?=[A-Z(])", flat))
    return flat[ends[0].end() :] if len(ends) >= 2 else flat


def _prefix(text: str) -> str:
    return "\n".join(f"web-7f9c-x2 | stderr F [svc/api] {line}" for line in text.splitlines())


#: hosted consoles' and cloud exports' prefixes (tests/test_reader.py has their sources)
CONSOLES = {
    "aws-logs-tail": "2024-05-01T10:00:00.123000+00:00 ecs/vllm/1a2b3c4d ",
    "sagemaker": "[1,mpirank:0,algo-1]<stdout>:",
    "runpod": "2024-05-01T10:00:00.123456789Z ERROR  | sync-5e1c2f7a-u1 | ",
    "modal": "2024-05-01 12:00:00+02:00 fu-Ab3dE5gH7jK9mN1pQ3 ta-01HX7Y8Z9ABCDEF ",
}


def _console(name: str) -> Callable[[str], str]:
    def prefix(text: str) -> str:
        return "\n".join(CONSOLES[name] + line for line in text.splitlines())

    prefix.__name__ = f"_console_{name}"
    return prefix


def _requote(text: str) -> str:
    flat = _one_line(text).replace("\\", "\\\\").replace('"', '\\"')
    return f'job failed: error="{flat}"'


def _upper(text: str) -> str:
    return text.upper()


def _lower(text: str) -> str:
    return text.lower()


PERTURBATIONS: list[Callable[[str], str]] = [
    _drop_first_sentence,
    _wrap(60),
    _wrap(80),
    _wrap(100),
    _prefix,
    *(_console(name) for name in CONSOLES),
    _requote,
    _upper,
    _lower,
]
#: perturbations that keep every number and its words together
KEEPS_FIGURES = {"_prefix", "_requote", *(f"_console_{name}" for name in CONSOLES)}


def _values(findings: list[Any]) -> dict[str, list[float]]:
    """Every numeric figure value read, by name."""
    out: dict[str, list[float]] = {}
    for f in findings:
        for k, v in f.figures.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(k, []).append(v)
    return out


def _close(a: float, b: float) -> bool:
    """The same value, allowing for the precision it was printed with (a size printed in MiB with
    two decimals by one message and in bytes by the next one about the same failure)."""
    return abs(a - b) <= max(1e-9, abs(b) * 5e-4)


#: failures a perturbation still hides. Strict: a fix shows as a failure here, to be removed.
KNOWN_MISSES: set[tuple[str, str]] = set()


#: the default run checks each failure under this many perturbations (tests/sampling.py); the
#: other pairs of the grid are marked ``slow``
PER_FAILURE = 2


def _grid() -> list[object]:
    params = []
    for i, (case, text, severity) in enumerate(FAILURES):
        for j, perturb in enumerate(PERTURBATIONS):
            name = perturb.__name__.strip("_")
            sampled = in_sample(i, j, len(PERTURBATIONS), PER_FAILURE)
            params.append(pytest.param(case, text, severity, perturb, id=f"{case}-{name}",
                                       marks=[] if sampled else [pytest.mark.slow]))
    return params


def test_the_sample_takes_every_failure_and_every_perturbation() -> None:
    pairs = stratified(FAILURES, PERTURBATIONS, PER_FAILURE)
    assert {case for (case, _, _), _ in pairs} == {case for case, _, _ in FAILURES}
    assert {p.__name__ for _, p in pairs} == {p.__name__ for p in PERTURBATIONS}


@cache
def _wanted(text: str, severity: str) -> tuple[list[Any], dict[str, list[float]]]:
    """The span's own findings of ``severity``, and every figure value the span says, message by
    message (several ranks may print their own figures)."""
    base = [f for f in _scan(text) if f.severity == severity]
    want = _values(base)
    for line in text.splitlines():
        for k, vs in _values(_scan(line)).items():
            want.setdefault(k, []).extend(vs)
    return base, want


@pytest.mark.parametrize(("case", "text", "severity", "perturb"), _grid())
def test_perturbed_failure_is_still_found(
    case: str, text: str, severity: str, perturb: Callable[[str], str], request: pytest.FixtureRequest
) -> None:
    name = perturb.__name__.strip("_")
    if (case, name) in KNOWN_MISSES:
        request.applymarker(pytest.mark.xfail(strict=True, reason="a known miss (see KNOWN_MISSES)"))
    base, want = _wanted(text, severity)
    assert base, f"{case}: the failure span alone is not found"
    perturbed = perturb(text)
    got = [f for f in _scan(perturbed) if f.severity == severity]
    assert got, f"{case}: not found after {name}:\n{perturbed[:600]}"
    seen = _values(got)
    wrong = {
        k: (v, want[k]) for k, vs in seen.items() if k in want for v in vs if not any(_close(v, w) for w in want[k])
    }
    assert not wrong, f"{case}: {name} read figures that contradict the original: {wrong}"
    if perturb.__name__ in KEEPS_FIGURES and "\n" not in text.strip():
        # (a message of several lines may be read by its line structure, which these undo)
        lost = sorted(set(_values(base)) - set(seen))
        assert not lost, f"{case}: {name} lost figures {lost}"
