"""Traceback frames that name training state (issue 13 point 9): a ZeRO optimizer frame or an
optimizer step makes the cause training state and the remedies ZeRO sharding / offload / 8-bit Adam."""

from __future__ import annotations

from pathlib import Path

from oomdoctor.report import Finding
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import Scanner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "deepspeed"


def _finding(log: str) -> Finding:
    scanner = Scanner(default_pack(), source="<test>")
    scanner.feed(log.encode("utf-8"))
    report = scanner.close()
    assert len(report.findings) == 1
    return report.findings[0]


def _remedies(f: Finding) -> dict[str, dict[str, str]]:
    return {r.id: r.settings for r in f.remedies}


def test_real_zero3_init_oom_is_the_pinned_offload_buffer() -> None:
    """DeepSpeed issue log (DreamBooth, GTX 1070, WSL2): the OOM is in stage3.py's
    _create_param_groups_fp16_flat_cpu_memory, which pins host buffers for the CPU offload already in
    use: host memory (the expert reading), not more ZeRO sharding."""
    f = _finding((FIXTURES / "other-067.log").read_text())
    assert f.cause is not None and f.cause.id == "host-ram"
    assert f.remedies[0].id == "training.offload-pin-memory-off"
    remedies = _remedies(f)
    assert "training.deepspeed-zero" not in remedies
    assert "training.optim-8bit" not in remedies  # DeepSpeed builds its own optimizer from the config


_ZERO12 = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/train.py", line 88, in <module>
[rank0]:     engine.step()
[rank0]:   File "/opt/conda/lib/python3.11/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 1822, in step
[rank0]:     self._optimizer_step(i)
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free. Of the allocated memory 76.30 GiB is allocated by PyTorch, and 0.90 GiB is reserved by PyTorch but unallocated.
"""


def test_cut_prefix_zero12_frame_proposes_stage3() -> None:
    f = _finding(_ZERO12.replace("[rank0]:   File", "nk0]:   File"))
    assert f.cause is not None and f.cause.id == "training-state"
    assert "ZeRO stage 1 or 2" in f.cause.summary
    assert _remedies(f)["training.deepspeed-zero"] == {"zero_optimization.stage": "3"}


_ADAMW = """\
[default3]:Traceback (most recent call last):
[default3]:  File "/usr/local/lib/python3.10/dist-packages/torch/optim/adamw.py", line 173, in step
[default3]:    self._init_group(
[default3]:  File "/usr/local/lib/python3.10/dist-packages/torch/optim/adamw.py", line 125, in _init_group
[default3]:    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
[default3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 3 has a total capacity of 39.39 GiB of which 1.02 GiB is free. Of the allocated memory 36.80 GiB is allocated by PyTorch, and 0.51 GiB is reserved by PyTorch but unallocated.
"""


def test_adamw_state_allocation_is_training_state() -> None:
    f = _finding(_ADAMW)
    assert f.cause is not None and f.cause.id == "training-state"
    remedies = _remedies(f)
    assert remedies["training.optim-8bit"] == {"optim": "adamw_bnb_8bit"}
    assert "training.deepspeed-zero" not in remedies  # no ZeRO stage to raise without DeepSpeed


def test_plain_forward_oom_stays_activation_peak() -> None:
    log = _ADAMW.replace("torch/optim/adamw.py", "torch/nn/modules/linear.py").replace(
        '    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)', "    return F.linear(x)"
    ).replace("self._init_group(", "out = self.fc(x)")
    f = _finding(log)
    assert f.cause is not None and f.cause.id != "training-state"
