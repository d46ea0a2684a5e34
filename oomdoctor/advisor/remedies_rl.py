"""Remedies for RL training with a colocated rollout engine (verl, OpenRLHF, TRL; vLLM sleep mode,
SGLang's torch_memory_saver): the engine's share of the GPU, in the framework's own setting, and the
training side's memory freed before the engine wakes."""

from __future__ import annotations

import math

from oomdoctor.advisor._engine_util import product_of
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.report import Remedy

#: the rollout engine's share of the GPU, as each framework's configuration names it
#: (verl: trainer config `actor_rollout_ref.rollout.gpu_memory_utilization`; OpenRLHF: the
#: `--vllm_gpu_memory_utilization` argument of its train_* scripts; TRL: `GRPOConfig.vllm_gpu_memory_utilization`;
#: otherwise vLLM's own `LLM(gpu_memory_utilization=...)`)
ROLLOUT_SHARE_SETTING = {
    "verl": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "openrlhf": "--vllm_gpu_memory_utilization",
    "trl": "vllm_gpu_memory_utilization",
    # ms-swift `swift rlhf --vllm_gpu_memory_utilization` (swift/llm/argument/rlhf_args.py, 3.x)
    "swift": "--vllm_gpu_memory_utilization",
}
#: the share is lowered in steps of this size (the granularity the frameworks' examples use)
STEP = 0.05
#: without the training side's figures, a tenth of the GPU per try (an assumption, said as one)
GUESS_STEP = 0.1
#: below this the engine's weights and a useful KV cache rarely fit
FLOOR = 0.2

#: the training side's parameters and optimizer state moved off the GPU while the rollout engine
#: generates, in each framework's own settings (all off by default):
#: verl 0.5.0 verl/trainer/config/_generated_ppo_trainer.yaml (actor_rollout_ref.actor.fsdp_config
#: param_offload / optimizer_offload, actor_rollout_ref.ref.fsdp_config.param_offload);
#: ms-swift 3.8.0 swift/trainers/arguments.py GRPOArgumentsMixin (offload_model, offload_optimizer);
#: OpenRLHF 0.8.5 openrlhf/cli/train_ppo_ray.py (--deepspeed_enable_sleep: "Enable sleep mode for
#: deepspeed when using --colocate_all_models")
OFFLOAD_SETTINGS = {
    "verl": {
        "actor_rollout_ref.actor.fsdp_config.param_offload": "True",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "True",
        "actor_rollout_ref.ref.fsdp_config.param_offload": "True",
    },
    "swift": {"--offload_model": "true", "--offload_optimizer": "true"},
    "openrlhf": {"--deepspeed_enable_sleep": ""},
}
#: the bare LLM class (the user's own training loop): the call that hands the freed blocks back
EMPTY_CACHE = "torch.cuda.empty_cache()"


#: the framework named by the report's product where no frame or command names it (a Ray actor's
#: process name in the prefix: rules/products.toml `processes`)
FRAMEWORK_OF_PRODUCT = {"verl": "verl", "openrlhf": "openrlhf", "ms-swift": "swift", "trl": "trl"}


def _framework(inp: AdviceInput) -> str:
    named = str(inp.context.extra.get("rl_framework") or "")
    return named or FRAMEWORK_OF_PRODUCT.get(product_of(inp) or "", "")


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _step_from_account(inp: AdviceInput) -> tuple[float, int, int, int] | None:
    """The share to hand back, from the training side's failed allocation: (request − free) of the
    GPU's capacity, rounded up to a STEP; None when the log does not state all three."""
    acc = inp.finding.account
    if acc is None:
        return None
    req, free, cap = acc.get("request"), acc.get("free"), acc.get("capacity")
    if not req or free is None or not cap or req <= free:
        return None
    need = (req - free) / cap
    return max(STEP, math.ceil(need / STEP - 1e-9) * STEP), req, free, cap


@remedy("rl.rollout-gpu-memory-utilization")
def rollout_share(inp: AdviceInput) -> Remedy | None:
    cause = inp.finding.cause
    if cause is None or cause.id != "colocation":
        return None
    framework = _framework(inp)
    setting = ROLLOUT_SHARE_SETTING.get(framework, "gpu_memory_utilization")
    current = inp.context.extra.get("rollout_gpu_memory_utilization")
    sized = _step_from_account(inp)
    rid = "rl.rollout-gpu-memory-utilization"
    sources: dict[str, str] = {}
    if sized is not None:
        step, req, free, cap = sized
        sources = {"request": "message", "free": "message", "capacity": "message"}
        if isinstance(current, (int, float)) and current - step >= FLOOR:
            value = _fmt(current - step)
            why = remedy_text("rl.rollout-gpu-memory-utilization", "why_sized_current", current=current, value=value, step=_fmt(step),
                              request=req, free=free, total=cap)
            sources["current"] = "log (launch configuration)"
        else:
            value = remedy_text("rl.rollout-gpu-memory-utilization", "value_sized", step=_fmt(step))
            why = remedy_text("rl.rollout-gpu-memory-utilization", "why_sized", step=_fmt(step), request=req, free=free, total=cap)
    elif isinstance(current, (int, float)) and current - GUESS_STEP >= FLOOR:
        value = _fmt(current - GUESS_STEP)
        why = remedy_text("rl.rollout-gpu-memory-utilization", "why_current", current=current, value=value, step=GUESS_STEP)
        sources = {"current": "log (launch configuration)", "step": "assumed"}
    else:
        # the log states no figure of the training side and no current share: no value to compute
        value = remedy_text("rl.rollout-gpu-memory-utilization", "value_unknown")
        why = remedy_text("rl.rollout-gpu-memory-utilization", "why")
    return Remedy(
        id=rid,
        title=remedy_text("rl.rollout-gpu-memory-utilization", "title", setting=setting),
        settings={setting: value},
        confidence="medium",
        why=why,
        sources=sources,
    )


@remedy("rl.free-training-memory")
def free_training_memory(inp: AdviceInput) -> Remedy | None:
    """Waking the rollout engine (vLLM sleep mode's cumem pool, SGLang's torch_memory_saver) failed:
    the training side still held what the engine had released. Its parameters and optimizer state
    leave the GPU, and PyTorch's cache is emptied, before the engine takes its pool back."""
    cause = inp.finding.cause
    if cause is None or cause.id != "colocation" or not inp.context.extra.get("colocation_frame"):
        return None  # a training-side allocation failed: the trainer needs its state there
    if inp.context.extra.get("training_offload"):
        return None  # the log shows the framework's offload already on
    rid = "rl.free-training-memory"
    framework = _framework(inp)
    settings = OFFLOAD_SETTINGS.get(framework)
    if framework == "openrlhf":
        # its DeepSpeed sleep acts only with --colocate_all_models, which the log may not show
        colocated = bool(inp.context.extra.get("colocate_all_models"))
        return Remedy(id=rid, title=remedy_text("rl.free-training-memory", "title_framework", framework="OpenRLHF"),
                      settings=dict(settings or {}) | ({} if colocated else {"--colocate_all_models": ""}),
                      confidence="medium" if colocated else "low", why=remedy_text("rl.free-training-memory", "why_openrlhf"))
    if settings is not None:
        name = {"verl": "verl", "swift": "ms-swift"}[framework]
        return Remedy(id=rid, title=remedy_text("rl.free-training-memory", "title_framework", framework=name), settings=dict(settings),
                      confidence="medium", why=remedy_text("rl.free-training-memory", "why_" + framework))
    if framework:
        return None  # TRL: its colocated engine's sleep is its own setting, not verified here
    return Remedy(id=rid, title=remedy_text("rl.free-training-memory", "title"), settings={EMPTY_CACHE: remedy_text("rl.free-training-memory", "setting")},
                  confidence="medium", why=remedy_text("rl.free-training-memory", "why"))
