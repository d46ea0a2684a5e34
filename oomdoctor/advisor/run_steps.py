"""Shell commands a remedy asks the user to run by hand (:class:`~oomdoctor.report.RunStep`).

They are not launch commands: they look before anything is changed. Each label is translated.
"""

from __future__ import annotations

from oomdoctor.i18n import _
from oomdoctor.report import RunStep

#: nvidia-smi's per-process query (every CUDA process on every GPU, with the memory it holds)
NVIDIA_SMI_COMPUTE_APPS = "nvidia-smi --query-compute-apps=pid,used_memory --format=csv"


def list_gpu_processes() -> RunStep:
    """The processes holding GPU memory, with their pids and sizes (nvidia-smi)."""
    return RunStep(label=_("list the processes holding GPU memory:"), command=NVIDIA_SMI_COMPUTE_APPS)


#: the same query with the GPU each process is on (a job whose ranks all landed on one GPU shows it)
NVIDIA_SMI_APPS_BY_GPU = "nvidia-smi --query-compute-apps=pid,gpu_bus_id,used_memory --format=csv"


def list_processes_by_gpu() -> RunStep:
    """The processes holding GPU memory, with the GPU (bus id) each one is on (nvidia-smi)."""
    return RunStep(label=_("list which GPU each process is on:"), command=NVIDIA_SMI_APPS_BY_GPU)


#: ROCm's view of each GPU's memory (rocm-smi has no per-process memory query in every release)
ROCM_SMI_VRAM = "rocm-smi --showmeminfo vram"


def look_outside_allocator(rocm: bool = False) -> RunStep:
    """Before a budget is cut: who holds the memory PyTorch's allocator does not (nvidia-smi's
    per-process query; rocm-smi's memory view on ROCm)."""
    return RunStep(label=_("first, see who holds the memory outside PyTorch's allocator:"),
                   command=ROCM_SMI_VRAM if rocm else NVIDIA_SMI_COMPUTE_APPS)
