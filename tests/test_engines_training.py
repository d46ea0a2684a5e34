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


def test_a_library_frame_is_the_folder_the_file_is_in_not_an_env_named_after_it() -> None:
    """other-067: a conda env named "diffusers" running DeepSpeed is a DeepSpeed frame, not diffusers'."""
    import oomdoctor

    frames = (
        '  File "/home/n/anaconda3/envs/{env}/lib/python3.9/site-packages/deepspeed/runtime/engine.py", line 1446, in _configure_zero_optimizer\n'
        "RuntimeError: CUDA error: out of memory\n"
    )
    for env in ("diffusers", "transformers"):
        f = only_error(oomdoctor.diagnose(frames.format(env=env).encode(), source="<env>"))
        assert f.engine == "deepspeed", env
    # the library's own files still name it, installed or from a source checkout
    src = '  File "/home/me/src/diffusers/src/diffusers/models/unet_2d_condition.py", line 900, in forward\nRuntimeError: CUDA error: out of memory\n'
    assert only_error(oomdoctor.diagnose(src.encode(), source="<src>")).engine == "diffusers"
