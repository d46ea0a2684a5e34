"""Training remedies as settings (transformers TrainingArguments, DeepSpeed config). They answer only
for training failures (phase training or a training tool's log); both batch values come from the
log when it prints them ("Instantaneous batch size per device", "Gradient Accumulation steps")."""

from __future__ import annotations

import re

from oomdoctor.advisor._engine_util import as_int, engine_of, is_true, product_of, setting
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.remedies_weights import knob_remedy, resident_fills_card
from oomdoctor.advisor.training_frames import frame_stage, shows_training_state
from oomdoctor.report import Remedy

_TRAINING_TOOLS = ("transformers", "deepspeed", "accelerate", "lightning")
#: programs that only train (their logs' product): a failure in them is training whatever the phase says
_TRAINING_PRODUCTS = ("hf-trainer", "trl", "llama-factory", "axolotl", "deepspeed-chat", "torchtune")


#: frameworks whose training loops are not configured with these settings (they have their own)
_OTHER_FRAMEWORKS = ("jax", "tensorflow", "xla")


#: phases in which no backward pass or optimizer runs: a training tool's library (transformers'
#: ``generate``, DeepSpeed inference) failing there is not training, unless the program only trains
_NOT_TRAINING_PHASES = ("inference", "warmup", "kv-cache-alloc", "cudagraph-capture", "profiling", "startup-check")


def _training(inp: AdviceInput) -> bool:
    if engine_of(inp) in _OTHER_FRAMEWORKS or inp.finding.kind.startswith("xla."):
        return False
    if inp.finding.phase in _NOT_TRAINING_PHASES and product_of(inp) not in _TRAINING_PRODUCTS:
        return False
    return (inp.finding.phase == "training" or engine_of(inp) in _TRAINING_TOOLS
            or product_of(inp) in _TRAINING_PRODUCTS or shows_training_state(inp.context.extra))


def _is_deepspeed(inp: AdviceInput) -> bool:
    return (engine_of(inp) == "deepspeed" or setting(inp, "zero_stage") is not None
            or frame_stage(inp.context.extra) is not None)


@remedy("training.batch-accumulation")
def batch_accumulation(inp: AdviceInput) -> Remedy | None:
    if not _training(inp) or shows_training_state(inp.context.extra):
        return None
    per = as_int(setting(inp, "per_device_train_batch_size"))
    if not per or per < 2:
        return None
    gas = as_int(setting(inp, "gradient_accumulation_steps"))
    new = per // 2
    ds = _is_deepspeed(inp)
    batch_key = "train_micro_batch_size_per_gpu" if ds else "per_device_train_batch_size"
    settings = {batch_key: str(new)}
    if gas:
        settings["gradient_accumulation_steps"] = str(gas * 2)
        keep = f"{per} × {gas} = {new} × {gas * 2}" if per % 2 == 0 else f"{per} × {gas} ≈ {new} × {gas * 2}"
    else:
        settings["gradient_accumulation_steps"] = "2 × the current value"
        keep = None
    return Remedy(
        id="training.batch-accumulation",
        title=remedy_text("training.batch-accumulation", "title", batch=new),
        settings=settings,
        fits=None,
        confidence="medium",
        why=(
            remedy_text("training.batch-accumulation", "why", per=per, keep=keep)
            if keep
            else remedy_text("training.batch-accumulation", "why_doubling", per=per)
        ),
    )


def _maybe_training(inp: AdviceInput) -> bool:
    """A bare PyTorch failure with no phase: it may be training (a remedy says "if training")."""
    cause = inp.finding.cause
    return (inp.finding.phase == "unknown" and engine_of(inp) in (None, "pytorch", "python")
            and cause is not None and cause.id in ("activation-peak", "fragmentation"))


@remedy("training.gradient-checkpointing")
def gradient_checkpointing(inp: AdviceInput) -> Remedy | None:
    sure = _training(inp)
    if not (sure or _maybe_training(inp)) or is_true(setting(inp, "gradient_checkpointing")):
        return None
    if shows_training_state(inp.context.extra):
        # the failing frame allocates training state (DDP's gradient buckets before any forward pass,
        # a ZeRO partition, the optimizer step's states): recomputing activations frees none of it
        return None
    return Remedy(
        id="training.gradient-checkpointing",
        title=remedy_text("training.gradient-checkpointing", "title" if sure else "title_maybe"),
        settings={"gradient_checkpointing": "true"},
        fits=None,
        confidence="medium" if sure else "low",
        why=remedy_text("training.gradient-checkpointing", "why"),
    )


@remedy("training.bf16")
def bf16(inp: AdviceInput) -> Remedy | None:
    if not _training(inp) or is_true(setting(inp, "bf16")) or is_true(setting(inp, "fp16")):
        return None
    return Remedy(
        id="training.bf16",
        title=remedy_text("training.bf16", "title"),
        # DeepSpeed's config takes {"bf16": {"enabled": true}} (runtime/constants.py BFLOAT16)
        settings={("bf16.enabled" if product_of(inp) == "deepspeed" else "bf16"): "true"},
        fits=None,
        confidence="low",
        why=remedy_text("training.bf16", "why"),
    )


@remedy("training.optim-8bit")
def optim_8bit(inp: AdviceInput) -> Remedy | None:
    optim = str(setting(inp, "optim") or "")
    if not _training(inp) or "8bit" in optim or _is_deepspeed(inp):
        return None
    return Remedy(
        id="training.optim-8bit",
        title=remedy_text("training.optim-8bit", "title"),
        settings={"optim": "adamw_bnb_8bit"},
        fits=None,
        confidence="low",
        why=remedy_text("training.optim-8bit", "why"),
    )


def _next_stage(target: int, why: str, **values: object) -> Remedy:
    """ZeRO stage ``target`` (the next one), for the reason the ``why`` template words."""
    return Remedy(
        id="training.deepspeed-zero",
        title=remedy_text("training.deepspeed-zero", "title_next", next=target),
        settings={"zero_optimization.stage": str(target)},
        fits=None,
        confidence="medium",
        why=remedy_text("training.deepspeed-zero", why, **values),
        tradeoff=remedy_text("training.deepspeed-zero", "cost_next"),
    )


@remedy("training.deepspeed-zero")
def deepspeed_zero(inp: AdviceInput) -> Remedy | None:
    if not _training(inp) or not _is_deepspeed(inp) or inp.context.extra.get("pinned_frame"):
        return None  # (pinning the CPU offload's buffers failed: the offload is already there)
    stage = as_int(setting(inp, "zero_stage"))
    named = frame_stage(inp.context.extra)
    if stage is None and named == "3":
        stage = 3
    elif stage is None and named == "1 or 2":
        # stage_1_and_2.py runs both; stage 3 shards the parameters that both keep whole
        return _next_stage(3, "why_next_1_or_2")
    if stage is None and (frame := inp.context.extra.get("ds_placement_frame")):
        # the engine moved the whole model to the device: ZeRO-3 with zero.Init partitions it instead
        return _next_stage(3, "why_placement", frame=frame)
    if stage is None:
        return None
    if stage < 3:
        return _next_stage(stage + 1, f"why_next_{stage}", stage=stage, next=stage + 1)
    return Remedy(
        id="training.deepspeed-zero",
        title=remedy_text("training.deepspeed-zero", "title_offload"),
        settings={"zero_optimization.offload_optimizer.device": "cpu", "zero_optimization.offload_param.device": "cpu"},
        fits=None,
        confidence="medium",
        why=remedy_text("training.deepspeed-zero", "why_offload"),
        tradeoff=remedy_text("training.deepspeed-zero", "cost_offload"),
    )


#: products configured through transformers' TrainingArguments
_TRAINER_PRODUCTS = ("hf-trainer", "transformers", "trl", "llama-factory")


@remedy("training.dataloader-workers")
def dataloader_workers(inp: AdviceInput) -> Remedy | None:
    if inp.finding.phase != "training" and engine_of(inp) not in _TRAINING_TOOLS:
        return None
    cur = as_int(setting(inp, "dataloader_num_workers", "num_workers"))
    value = cur // 2 if cur and cur > 1 else 0
    return Remedy(
        id="training.dataloader-workers",
        title=remedy_text("training.dataloader-workers", "title", workers=value),
        # TrainingArguments' name; elsewhere torch.utils.data.DataLoader(num_workers=...)
        settings={("dataloader_num_workers" if product_of(inp) in _TRAINER_PRODUCTS
                   else "num_workers"): str(value)},
        fits=None,
        confidence="low",
        why=remedy_text("training.dataloader-workers", "why_now" if cur else "why", current=cur),
    )


#: product -> (kind, knob, value): how the program shards weights, gradients and optimizer states
#: across the data-parallel GPUs (ZeRO-3 / FSDP)
#: - hf-trainer, transformers, trl: TrainingArguments `fsdp` (transformers 4.40 training_args.py,
#:   FSDPOption "full_shard" and "auto_wrap"); TRL's trainers take the same TrainingArguments
#: - accelerate: `accelerate launch --use_fsdp` (accelerate 0.30 commands/launch.py)
#: - llama-factory: `deepspeed: examples/deepspeed/ds_z3_config.json` (LLaMA-Factory's README and
#:   the config file it ships)
#: - axolotl: `deepspeed: deepspeed_configs/zero3.json` (the configs axolotl ships)
#: - deepspeed-chat: `--zero_stage 3` (DeepSpeedExamples applications/DeepSpeed-Chat training main.py)
#: - torchtune: the `full_finetune_distributed` recipe (FSDP), launched with `tune run --nproc_per_node`
SHARD: dict[str, tuple[str, str, str]] = {
    "hf-trainer": ("setting", "TrainingArguments(fsdp=...)", '"full_shard auto_wrap"'),
    "transformers": ("setting", "TrainingArguments(fsdp=...)", '"full_shard auto_wrap"'),
    "trl": ("setting", "TrainingArguments(fsdp=...)", '"full_shard auto_wrap"'),
    "accelerate": ("flag", "--use_fsdp", ""),
    "llama-factory": ("setting", "deepspeed", "examples/deepspeed/ds_z3_config.json"),
    "axolotl": ("setting", "deepspeed", "deepspeed_configs/zero3.json"),
    "deepspeed-chat": ("flag", "--zero_stage", "3"),
    "torchtune": ("setting", "recipe", "full_finetune_distributed"),
}

#: product -> (kind, knob, value): how the program trains low-rank adapters instead of every weight
#: - hf-trainer, transformers, trl: peft's `get_peft_model(model, LoraConfig(...))` (peft 0.10)
#: - llama-factory: `finetuning_type: lora` (src/llamafactory/hparams/finetuning_args.py)
#: - axolotl: `adapter: lora` (axolotl config reference)
#: - deepspeed-chat: `--lora_dim 128 --only_optimize_lora` (DeepSpeed-Chat training main.py)
#: - torchtune: the `lora_finetune_*` recipes
LORA: dict[str, tuple[str, str, str]] = {
    "hf-trainer": ("setting", "get_peft_model(model, ...)", "LoraConfig(r=16)"),
    "transformers": ("setting", "get_peft_model(model, ...)", "LoraConfig(r=16)"),
    "trl": ("setting", "peft_config", "LoraConfig(r=16)"),
    "llama-factory": ("setting", "finetuning_type", "lora"),
    "axolotl": ("setting", "adapter", "lora"),
    "deepspeed-chat": ("flag", "--only_optimize_lora --lora_dim", "128"),
    "torchtune": ("setting", "recipe", "lora_finetune_single_device"),
}


#: a program the log does not name (plain PyTorch) shards with DeepSpeed ZeRO-3 (its config's
#: ``zero_optimization.stage``, deepspeed 0.14 runtime/zero/config.py) or PyTorch's FSDP
SHARD_UNNAMED = ("zero_optimization.stage", "3")
#: a plain PyTorch DistributedDataParallel program shards by wrapping the model in FSDP instead
#: (torch 2.1 torch/distributed/fsdp/fully_sharded_data_parallel.py: ``FullyShardedDataParallel``,
#: default ``sharding_strategy`` FULL_SHARD: parameters, gradients and optimizer states)
SHARD_DDP = ("torch.distributed.fsdp.FullyShardedDataParallel", "model, in place of DistributedDataParallel(model)")
#: ZeRO-Offload on one GPU (deepspeed 0.14 runtime/zero/config.py: ``offload_optimizer`` "Valid for ZeRO
#: stage 1, 2, 3", device ``cpu`` in zero/offload_config.py): sharding over one rank divides nothing,
#: moving the optimizer states and step to host memory is what frees the GPU
OFFLOAD_ONE_GPU = {"zero_optimization.stage": "2", "zero_optimization.offload_optimizer.device": "cpu"}


#: the device a PyTorch CUDA OOM names: "(GPU 3; 79.15 GiB total capacity" (torch < 2.1) or "GPU 3 has
#: a total capacity of" (torch >= 2.1, c10/cuda/CUDACachingAllocator.cpp)
_GPU_NAMED = re.compile(r"\bGPU (\d+)(?:;| has a total capacity)")
#: two ranks writing the same message at once, their pieces interleaved on one line
#: ("torch.cudatorch.cuda..OutOfMemoryErrorOutOfMemoryError: : CUDA out of memory")
_INTERLEAVED = re.compile(r"(?:torch\.cuda){2}|(?:(?:torch\.(?:cuda\.)?)?OutOfMemoryError){2}")


def messages_of_several_ranks(message: str) -> bool:
    """Whether one finding's text is several ranks' messages: it names more than one GPU index, or
    two copies of the message were written into each other."""
    return len(set(_GPU_NAMED.findall(message))) > 1 or bool(_INTERLEAVED.search(message))


def several_gpus(inp: AdviceInput) -> bool:
    """The log shows more than one GPU or rank: a rank label on the failing line, tensor/pipeline
    parallelism, a GPU count above one, DistributedDataParallel's reducer frame, a launcher that
    runs ranks (DeepSpeed, accelerate), or the failing text itself: two ranks' messages on one
    line, naming two GPUs. A bare PyTorch message shows none of them."""
    ctx = inp.context
    parallel = (ctx.tensor_parallel_size or 1) * (ctx.pipeline_parallel_size or 1)
    return (bool(inp.finding.ranks) or parallel > 1 or (ctx.gpu_count or 0) > 1
            or bool(ctx.extra.get("gradient_frame")) or engine_of(inp) in ("deepspeed", "accelerate")
            or messages_of_several_ranks(inp.finding.message))


def _unnamed_program(inp: AdviceInput) -> bool:
    """A plain PyTorch program: no product named and no DeepSpeed (whose config has its own knobs)."""
    return product_of(inp) in (None, "pytorch") and not _is_deepspeed(inp)


def _unnamed_shard(inp: AdviceInput) -> Remedy | None:
    """Sharding for a program the log does not name. ZeRO-3 / FSDP divide the training state by the
    number of ranks, so they are offered only where the log shows several; one GPU (or one the log
    does not count) gets ZeRO-Offload instead (:func:`zero_offload`)."""
    if several_gpus(inp) and (_training(inp) or (_maybe_training(inp) and resident_fills_card(inp))):
        if inp.context.extra.get("gradient_frame"):
            knob, value = SHARD_DDP
            return Remedy(
                id="training.shard-state",
                title=remedy_text("training.shard-state", "title_ddp"),
                settings={knob: value},
                fits=None,
                confidence="medium",
                why=remedy_text("training.shard-state", "why_ddp"),
            )
        knob, value = SHARD_UNNAMED
        sure = _training(inp)
        return Remedy(
            id="training.shard-state",
            title=remedy_text("training.shard-state", "title_unnamed" if sure else "title_maybe"),
            settings={knob: value},
            fits=None,
            confidence="medium" if sure else "low",
            why=remedy_text("training.shard-state", "why" if sure else "why_maybe"),
        )
    return None


@remedy("training.shard-state")
def shard_state(inp: AdviceInput) -> Remedy | None:
    """ZeRO-3 / FSDP in the program's own setting (a DeepSpeed config has training.deepspeed-zero).

    A plain PyTorch program (no product named) gets ZeRO-3 / FSDP only where the log shows several
    GPUs or ranks (:func:`several_gpus`), FSDP in place of DistributedDataParallel where DDP's
    reducer failed; on one GPU, :func:`zero_offload` instead."""
    if _unnamed_program(inp):
        return _unnamed_shard(inp)
    if not _training(inp) or (_is_deepspeed(inp) and product_of(inp) not in SHARD):
        return None
    if inp.finding.cause is not None and inp.finding.cause.id == "activation-peak":
        return None  # a named training program's activations have its batch and checkpointing knobs
    placing = inp.finding.cause is not None and inp.finding.cause.id == "placement"
    return knob_remedy("training.shard-state", SHARD, inp, "why_placement" if placing else "why")


@remedy("training.zero-offload")
def zero_offload(inp: AdviceInput) -> Remedy | None:
    """ZeRO-Offload for a program the log does not name, on one GPU (or one the log does not count):
    sharding divides nothing there, moving the optimizer states to host memory does."""
    if not _unnamed_program(inp) or several_gpus(inp):
        return None
    sure = _training(inp)
    if (
        (sure or _maybe_training(inp))
        and resident_fills_card(inp)
        and inp.finding.kind.startswith(("torch.cuda", "torch.hip"))
    ):
        # (DeepSpeed's CUDA and ROCm builds; an XPU or MPS run has no such offload to turn on).
        # ZeRO-Offload was built for one GPU (deepspeed's "ZeRO-Offload" tutorial trains on a single
        # V100), so a bare message that may be training gets it too, titled "if this is training"
        return Remedy(
            id="training.zero-offload",
            title=remedy_text("training.zero-offload", "title" if sure else "title_maybe"),
            settings=dict(OFFLOAD_ONE_GPU),
            fits=None,
            confidence="low",
            why=remedy_text("training.zero-offload", "why"),
        )
    return None


@remedy("training.lora")
def lora(inp: AdviceInput) -> Remedy | None:
    """Train low-rank adapters: gradients and optimizer states only for the adapters."""
    if is_true(setting(inp, "lora")) or str(setting(inp, "finetuning_type") or "") in ("lora", "qlora"):
        return None
    if not _training(inp):
        return None
    return knob_remedy("training.lora", LORA, inp)


@remedy("training.offload-pin-memory-off")
def offload_pin_memory_off(inp: AdviceInput) -> Remedy | None:
    """DeepSpeed pinning host memory for CPU offload failed (the frame says so): turn pinning off in
    both offload sections (DeepSpeed config ``offload_param.pin_memory`` / ``offload_optimizer.pin_memory``)."""
    if not inp.context.extra.get("pinned_frame"):
        return None
    return Remedy(
        id="training.offload-pin-memory-off",
        title=remedy_text("training.offload-pin-memory-off", "title"),
        settings={"zero_optimization.offload_param.pin_memory": "false",
                  "zero_optimization.offload_optimizer.pin_memory": "false"},
        fits=None,
        confidence="medium",
        why=remedy_text("training.offload-pin-memory-off", "why"),
    )
