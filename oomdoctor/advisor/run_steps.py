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
