"""Training stacks: tool detection, the training phase, batch settings read from the log."""

from __future__ import annotations

from tests.engines_util import diagnose, errors, only_error


def test_trainer_log_is_transformers_training() -> None:
    r = diagnose("transformers/synthetic-trainer-oom.log")
    f = only_error(r)
    assert (f.kind, f.engine, f.phase) == ("torch.cuda-oom", "transformers", "training")
    assert r.context.extra["per_device_train_batch_size"] == 8
    assert r.context.extra["gradient_accumulation_steps"] == 4


def test_deepspeed_config_dump() -> None:
    r = diagnose("deepspeed/synthetic-zero2-oom.log")
    f = only_error(r)
    assert (f.engine, f.phase) == ("deepspeed", "training")
    assert r.context.extra["zero_stage"] == 2
    assert r.context.extra["per_device_train_batch_size"] == 4
    assert r.context.extra["gradient_accumulation_steps"] == 2


def test_healthy_estimates_and_summaries() -> None:
    assert not errors(diagnose("deepspeed/synthetic-healthy-estimate.log"))
    assert not errors(diagnose("pytorch/synthetic-memory-summary.log"))
