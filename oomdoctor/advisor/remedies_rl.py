"""Remedies for RL training with a colocated rollout engine (verl, OpenRLHF, TRL; vLLM sleep mode,
SGLang's torch_memory_saver): the engine's share of the GPU, in the framework's own setting."""

from __future__ import annotations

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
#: hand back a tenth of the GPU to the training side per step
STEP = 0.1
#: below this the engine's weights and a useful KV cache rarely fit
FLOOR = 0.2


@remedy("rl.rollout-gpu-memory-utilization")
def rollout_share(inp: AdviceInput) -> Remedy | None:
    cause = inp.finding.cause
    if cause is None or cause.id != "colocation":
        return None
    framework = str(inp.context.extra.get("rl_framework") or "")
    setting = ROLLOUT_SHARE_SETTING.get(framework, "gpu_memory_utilization")
    current = inp.context.extra.get("rollout_gpu_memory_utilization")
    if isinstance(current, (int, float)) and current - STEP >= FLOOR:
        value = f"{current - STEP:.2f}".rstrip("0").rstrip(".")
        why = remedy_text("rl.rollout-gpu-memory-utilization", "why_current", current=current, value=value, step=STEP)
        sources = {"current": "log (launch configuration)", "step": "assumed"}
    else:
        value = remedy_text("rl.rollout-gpu-memory-utilization", "value_unknown")
        why = remedy_text("rl.rollout-gpu-memory-utilization", "why")
        sources = {}
    return Remedy(
        id="rl.rollout-gpu-memory-utilization",
        title=remedy_text("rl.rollout-gpu-memory-utilization", "title", setting=setting),
        settings={setting: value},
        confidence="medium",
        why=why,
        sources=sources,
    )
