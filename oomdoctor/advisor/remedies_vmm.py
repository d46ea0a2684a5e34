"""PyTorch's virtual-memory allocator path failing: "CUDA driver error: out of memory".

c10's driver-API check (torch/include/c10/cuda/driver_api.h C10_CUDA_DRIVER_CHECK, torch 2.1 on)
prints "CUDA driver error: " + cuGetErrorString. In libc10_cuda the driver API is the caching
allocator's expandable segments (ExpandableSegment: cuMemAddressReserve, cuMemCreate, cuMemMap,
cuMemSetAccess; torch 2.14.1's libc10_cuda.so holds the message next to ~ExpandableSegment): a
driver OOM there is the virtual-memory path failing (WSL2, some drivers and containers limit it)
where plain cudaMalloc may not. Turning the segments off is the zero-cost test.
"""

from __future__ import annotations

from oomdoctor.advisor.cause import driver_api_oom
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.remedies_generic import alloc_conf_var
from oomdoctor.report import Remedy


@remedy("torch.expandable-segments-off")
def expandable_segments_off(inp: AdviceInput) -> Remedy | None:
    if not driver_api_oom(inp.finding):
        return None
    return Remedy(
        id="torch.expandable-segments-off",
        title=remedy_text("torch.expandable-segments-off", "title"),
        env={alloc_conf_var(inp): "expandable_segments:False"},
        fits=None,
        confidence="medium",
        why=remedy_text("torch.expandable-segments-off", "why"),
    )
