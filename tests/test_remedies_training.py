"""Training remedies as settings; both batch values from the log."""

from __future__ import annotations

from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location
from tests.engines_util import diagnose, only_error


def _inp(report_rel: str) -> AdviceInput:
    r = diagnose(report_rel)
    return AdviceInput(only_error(r), r.context)


def test_batch_halved_accumulation_doubled_from_the_log() -> None:
    got = calculator("training.batch-accumulation")(_inp("transformers/synthetic-trainer-oom.log"))
    assert got is not None
    assert got.settings == {"per_device_train_batch_size": "4", "gradient_accumulation_steps": "8"}


def test_deepspeed_keys_and_next_zero_stage() -> None:
    inp = _inp("deepspeed/synthetic-zero2-oom.log")
    got = calculator("training.batch-accumulation")(inp)
    assert got is not None
    assert got.settings == {"train_micro_batch_size_per_gpu": "2", "gradient_accumulation_steps": "4"}
    zero = calculator("training.deepspeed-zero")(inp)
    assert zero is not None and zero.settings == {"zero_optimization.stage": "3"}
    assert calculator("training.optim-8bit")(inp) is None


def test_training_settings_and_silence_outside_training() -> None:
    inp = _inp("transformers/synthetic-trainer-oom.log")
    gc_ = calculator("training.gradient-checkpointing")(inp)
    assert gc_ is not None and gc_.settings == {"gradient_checkpointing": "true"}
    assert calculator("training.optim-8bit")(inp).settings == {"optim": "adamw_bnb_8bit"}  # type: ignore[union-attr]
    f = Finding(
        rule="torch.cuda-oom", kind="torch.cuda-oom", engine="pytorch", severity="error", title="t", message="m",
        location=Location(line=1, end_line=1), phase="inference",
    )
    serving = AdviceInput(f, Context(engine="vllm", extra={"per_device_train_batch_size": 8}))
    for rid in ("training.batch-accumulation", "training.gradient-checkpointing", "training.bf16"):
        assert calculator(rid)(serving) is None
