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
    assert not errors(diagnose("pytorch/synthetic-healthy-memory-summary.log"))


def test_lightning_and_accelerate_detection() -> None:
    from tests.engines_util import diagnose_text

    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
        "15.77 GiB of which 4.38 MiB is free. Including non-PyTorch memory, this process has 15.76 GiB memory in use. "
        "Of the allocated memory 15.20 GiB is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated.\n"
    )
    lit = diagnose_text("LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]\nEpoch 0:  12%|█▏        | 120/1000 [00:30<03:40]\n" + oom)
    assert lit.context.engine == "lightning"
    assert only_error(lit).phase == "training"
    acc = diagnose_text("Distributed environment: MULTI_GPU  Backend: nccl\n" + oom)
    assert acc.context.engine == "accelerate"
