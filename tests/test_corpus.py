"""Real logs from public bug reports: kind, phase and every figure exactly as labelled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oomdoctor
from tests.corpus import PHASE_ALIASES, expected_figures, labelled_cases, log_for

CASES = labelled_cases()

#: Cases where the label says more than the log shows. Each is checked strictly: if the tool
#: starts to agree, the entry must go. Reasons are what the log itself holds.
KNOWN_DIVERGENCES = {
    "other-011": "phase: label says training; the 2-line excerpt holds no frame or progress line",
    "other-013": "phase: label says training; the 1-line excerpt holds no phase evidence",
    "other-063": "phase: label says training; the 1-line excerpt holds no phase evidence",
    "other-053": "phase: label says inference; the excerpt holds no phase evidence",
    "other-062": "phase: label says inference; the 1-line excerpt holds no phase evidence",
    "other-039": "phase: label says inference; the XLA excerpt holds no phase evidence",
    "other-041": "phase: label says training; TF session.run frames are shared by training and inference",
    "other-045": "phase: label says training; the raylet message is identical to vllm-044's (serving)",
    "vllm-044": "phase: label says serving; the raylet message is identical to other-045's (training)",
    "other-081": "phase: label says weights-load; the dmesg excerpt holds no phase evidence",
    "other-017": "phase: TGI raises 'Not enough memory to handle N prefill tokens' only in warmup(), "
    "and the log says 'Method Warmup encountered an error'; the label says inference",
    "other-021": "phase: SGLang raises this while sizing the KV pool at start-up; the label says inference",
    "other-026": "kind: a plain PyTorch OOM with no TensorRT-LLM text in the excerpt; label says trtllm.oom",
    "vllm-041": "kind: the excerpt lost the error line; only CUDA_LAUNCH_BLOCKING hints remain",
}


def _id(p: Path) -> str:
    return p.name.replace(".label.json", "")


def _params() -> list[object]:
    out: list[object] = []
    for p in CASES:
        reason = KNOWN_DIVERGENCES.get(_id(p))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        out.append(pytest.param(p, id=_id(p), marks=marks))
    return out


@pytest.mark.parametrize("label_path", _params())
def test_corpus_case(label_path: Path) -> None:
    label = json.loads(label_path.read_text())
    report = oomdoctor.diagnose(log_for(label_path).read_bytes(), source=log_for(label_path).name)
    errors = [f for f in report.findings if f.severity == "error"]
    if label["kind"] == "not-oom":
        assert not errors, f"healthy log produced {[f.rule for f in errors]}"
        return
    assert errors, "no error finding"
    kinds = [f.kind for f in errors]
    assert label["kind"] in kinds, f"expected {label['kind']}, got {kinds}"
    f = next(f for f in errors if f.kind == label["kind"])
    want_phase = PHASE_ALIASES.get(label["phase"], label["phase"])
    assert f.phase == want_phase
    want = expected_figures(label)
    context = report.context.model_dump()
    # a labelled number the message does not state (e.g. utilization from the command line)
    # must then be in the run context
    got = {k: f.figures[k] if k in f.figures else context.get(k) for k in want}
    assert got == want
