"""A PyTorch out-of-memory error while vLLM builds its model: the weights over the engine's budget.

vLLM creates the model's parameters on the GPU under ``with set_default_torch_dtype(...)``,
``with target_device:`` (vllm 0.10.1 model_executor/model_loader/base_loader.py
``BaseModelLoader.load_model``; 0.6.6 model_loader/loader.py the same), so an allocation that fails
there (its traceback ends in torch/utils/_device.py's ``__torch_function__``, or in a
``create_weights``/``load_weights``/model-loader frame; phase weights-load) is a weight; so is one
vLLM rewraps as "Failed to create unquantized linear weights: CUDA out of memory ..." (a linear.py log line
of a build outside the 0.11.1-0.34.0 releases, which let the error through unwrapped). PyTorch's "allocated" figure is then the model built so far. When that and the
request already exceed ``gpu_memory_utilization × total`` (0.9 by default; 0.92 from 0.20), the
weights alone exceed the budget the KV cache must also fit in: lowering the utilization cannot help
(the budget does not bind while the weights load) and raising it leaves no KV cache; what is
missing is at least ``allocated + requested − budget`` (more weights may follow the failing one).
"""

from __future__ import annotations

from dataclasses import dataclass

from oomdoctor.advisor._engine_util import as_int
from oomdoctor.advisor.memory_model import default_utilization, parse_version
from oomdoctor.report import Context, Finding


@dataclass(frozen=True)
class WeightsOverBudget:
    """The model built so far and the failing request, against vLLM's budget (bytes)."""

    built: int
    request: int
    budget: int
    utilization: float
    total: int

    @property
    def over(self) -> int:
        """Bytes above the budget: at least this much of the weights must leave the GPU."""
        return self.built + self.request - self.budget


def weights_over_budget(finding: Finding, context: Context) -> WeightsOverBudget | None:
    """The figures when ``finding`` is a PyTorch OOM while vLLM builds its model and the model built so
    far plus the request exceed ``gpu_memory_utilization × total``; else None."""
    engine = finding.engine if finding.engine == "vllm" else context.engine
    if engine != "vllm" or finding.phase != "weights-load":
        return None
    if not (finding.kind.startswith("torch.") or finding.kind == "vllm.weights.not-enough-memory"):
        return None  # a PyTorch OOM, or vLLM's own weights failure carrying PyTorch's figures ("Failed
        # to create unquantized linear weights: CUDA out of memory ..."); its other wording has none
    fig = finding.figures
    built, request = as_int(fig.get("allocated_bytes")), as_int(fig.get("requested_bytes"))
    total = as_int(fig.get("total_bytes")) or as_int(context.gpu_total_bytes)
    if not built or not request or not total:
        return None
    stated = fig.get("gpu_memory_utilization") or context.gpu_memory_utilization
    util = float(stated) if stated else default_utilization(parse_version(context.engine_version))
    budget = int(total * util)
    if built + request <= budget:
        return None
    return WeightsOverBudget(built, request, budget, util, int(total))
