"""PyTorch-family behaviour beyond the per-rule examples: context rules, ranks, near misses,
chunking, and the traceback formats that carry phase evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import Scanner
from tests.corpus import expected_figures

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PACK = default_pack()
TORCH_CONTEXTS = [c for c in PACK.contexts if c.source.endswith("pytorch.toml")]


def _context_value(ctx: object, name: str) -> object:
    extra = getattr(ctx, "extra", {})
    return getattr(ctx, name) if hasattr(ctx, name) else extra.get(name)


@pytest.mark.parametrize(
    ("rule_id", "example"),
    [(c.rule.id, ex) for c in TORCH_CONTEXTS for ex in c.rule.match],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_context_examples(rule_id: str, example: dict[str, object]) -> None:
    report = oomdoctor.diagnose(str(example["log"]).encode() + b"\n")
    values = example["values"]
    assert isinstance(values, dict)
    got = {k: _context_value(report.context, k) for k in values}
    assert got == values, rule_id
    assert not report.findings


def test_two_ranks_one_finding() -> None:
    report = oomdoctor.diagnose((FIXTURES / "deepspeed/synthetic-zero3-ranks.log").read_bytes())
    assert [(f.rule, f.occurrences, f.ranks, f.phase) for f in report.findings] == [
        ("torch.cuda-oom", 2, ["rank1", "rank0"], "training")
    ]
    assert report.findings[0].figures["gpu_index"] == 1


def test_near_misses_give_no_error() -> None:
    report = oomdoctor.diagnose((FIXTURES / "pytorch/synthetic-near-miss.log").read_bytes())
    # "CUDA out of memory -- halving the batch to 16 and retrying": recovered from, so a warning
    assert [(f.rule, f.severity, f.location.line) for f in report.findings] == [
        ("generic.oom-recovered", "warning", 4)
    ]
    assert report.context.expandable_segments is True


def test_memory_summary_is_not_a_second_error() -> None:
    report = oomdoctor.diagnose((FIXTURES / "pytorch/synthetic-memory-summary.log").read_bytes())
    assert [f.rule for f in report.findings] == ["torch.cuda-oom.legacy"]


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_wrapped_message_figures_do_not_depend_on_chunks(chunk: int) -> None:
    data = (FIXTURES / "pytorch/synthetic-terminal-wrap.log").read_bytes()
    scanner = Scanner(PACK, source="wrap.log")
    for i in range(0, len(data), chunk):
        scanner.feed(data[i : i + chunk])
    (f,) = scanner.close().findings
    label = json.loads((FIXTURES / "pytorch/synthetic-terminal-wrap.label.json").read_text())
    assert f.figures == expected_figures(label)
    assert f.phase == "training"


def test_ipython_7_frames_give_the_phase() -> None:
    log = b"""---------------------------------------------------------------------------
OutOfMemoryError                          Traceback (most recent call last)
<ipython-input-7-3f1c> in <module>
----> 1 trainer.train()
~/conda/lib/python3.9/site-packages/transformers/trainer.py in train(self, resume_from_checkpoint)
   1315         return inner_training_loop(
OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB (GPU 0; 14.76 GiB total capacity; 13.52 GiB already allocated; 11.75 MiB free; 13.78 GiB reserved in total by PyTorch)
"""
    (f,) = oomdoctor.diagnose(log).findings
    assert (f.kind, f.phase, f.figures["requested_bytes"]) == ("torch.cuda-oom", "training", 67108864)


def test_ggml_runtime_oom_is_not_torch() -> None:
    log = b"""CUDA error: out of memory
  current device: 0, in function ggml_backend_cuda_buffer_type_alloc_buffer at ggml-cuda.cu:1081
"""
    assert not [f for f in oomdoctor.diagnose(log).findings if f.engine == "pytorch"]
