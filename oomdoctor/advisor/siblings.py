"""Other processes on the failing GPU that are this job's own ranks, not strangers to stop.

PyTorch lists every process holding memory on the failing GPU ("Process 451 has 1.16 GiB memory
in use"). A launcher (torchrun, mpirun, TensorRT-LLM's MPI workers, Ray) starts a job's ranks one
after another, so their PIDs are close together. When a multi-rank job fails and several listed
processes have PIDs that close — a run no wider than :data:`PID_SPAN_PER_PROCESS` times their
number — they are the job's other ranks on the same GPU: the device mapping put every rank on one
GPU (each rank should see and select its own), and stopping "the other processes" would stop the
job itself.
"""

from __future__ import annotations

from typing import Any

from oomdoctor.advisor.account import other_processes
from oomdoctor.report import Context, Finding

#: at least this many listed processes must look like siblings
MIN_SIBLINGS = 2
#: a run of PIDs counts as spawned together when its width is at most this many PIDs per process
#: (a launcher's helper threads and processes take a few PIDs between ranks)
PID_SPAN_PER_PROCESS = 2
#: with no rank label and no parallel size in the log, a run of at least this many PIDs spawned
#: together, each holding the same memory (one CUDA context apiece), is still the job's own ranks:
#: strangers do not come in a contiguous, identical batch
MIN_UNLABELLED_SIBLINGS = 4


def _multi_rank(finding: Finding, context: Context) -> bool:
    """The failing line carries a rank label, or the run is tensor/pipeline parallel."""
    parallel = (context.tensor_parallel_size or 1) * (context.pipeline_parallel_size or 1)
    return bool(finding.ranks) or parallel > 1


def _pid(proc: dict[str, object]) -> int | None:
    pid = proc.get("pid")
    return pid if isinstance(pid, int) else None


def _listed_others(fig: dict[str, Any]) -> list[dict[str, Any]]:
    """The listed processes less the failing one. Ranks of one job often hold the same memory, so
    only one entry equal to this process's "in use" is taken for it (account.other_processes drops
    every such entry, which would drop the siblings too)."""
    procs = [p for p in fig.get("other_processes") or [] if isinstance(p, dict)]
    own = fig.get("in_use_bytes")
    if own is None:
        return other_processes(fig)
    same = next((i for i, p in enumerate(procs) if p.get("in_use_bytes") == own), None)
    return procs if same is None else procs[:same] + procs[same + 1 :]


def sibling_pids(finding: Finding, context: Context) -> list[int]:
    """The PIDs of the listed processes that look like this job's other ranks (the largest run of
    PIDs spawned together), or ``[]``."""
    labelled = _multi_rank(finding, context)
    others = _listed_others(finding.figures)
    pids = sorted(p for p in (_pid(proc) for proc in others) if p is not None)
    best: list[int] = []
    for i in range(len(pids)):
        j = i
        while j + 1 < len(pids) and pids[j + 1] - pids[i] <= PID_SPAN_PER_PROCESS * (j + 2 - i):
            j += 1
        if j - i + 1 > len(best):
            best = pids[i : j + 1]
    if labelled:
        return best if len(best) >= MIN_SIBLINGS else []
    members = set(best)
    held = {p.get("in_use_bytes") for p in others if _pid(p) in members}
    return best if len(best) >= MIN_UNLABELLED_SIBLINGS and len(held) == 1 else []


def sibling_bytes(finding: Finding, pids: list[int]) -> int:
    """What the sibling ranks ``pids`` hold on the failing GPU."""
    wanted = set(pids)
    return sum(int(p.get("in_use_bytes") or 0) for p in _listed_others(finding.figures) if _pid(p) in wanted)


def ranks_share_gpu(finding: Finding, context: Context) -> bool:
    """The cause is the job's ranks placed on one GPU (the cause was named from the siblings)."""
    return finding.cause is not None and finding.cause.id == "placement" and bool(sibling_pids(finding, context))
