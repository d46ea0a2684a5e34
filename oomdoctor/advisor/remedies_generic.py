"""Remedies that apply to any PyTorch-based failure."""

from __future__ import annotations

from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.report import Remedy
from oomdoctor.units import format_size


@remedy("torch.expandable-segments")
def expandable_segments(inp: AdviceInput) -> Remedy | None:
    if inp.context.expandable_segments:
        return None
    spare, req = inp.fig("reserved_unallocated_bytes"), inp.fig("requested_bytes")
    if spare is None:
        reserved, allocated = inp.fig("reserved_bytes"), inp.fig("allocated_bytes")
        if reserved is not None and allocated is not None:
            spare = reserved - allocated
    if spare is None or req is None:
        return None
    # fragmentation matters when the cached-but-free memory is a sizeable share of the request
    if spare < req / 4:
        return None
    fits = spare >= req
    return Remedy(
        id="torch.expandable-segments",
        title="Let the caching allocator grow segments instead of fragmenting",
        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        saves_bytes=spare,
        fits=fits if fits else None,
        confidence="high" if fits else "medium",
        why=(
            f"{format_size(spare)} is reserved by PyTorch but unallocated, against a request of {format_size(req)}: "
            "fragmentation is part of the problem."
        ),
        tradeoff=(
            "None in most workloads; not supported on every platform (ROCm before 6.2, Windows)."
            + (" vLLM 0.8–0.20 refuses it together with sleep mode (its cumem allocator)."
               if (inp.context.engine == "vllm" or inp.finding.engine == "vllm") else "")
        ),
        sources={"fragmentation": "message", "requested": "message"},
    )


@remedy("gpu.free-other-processes")
def free_other_processes(inp: AdviceInput) -> Remedy | None:
    others = list(inp.fig("other_processes") or [])
    own = inp.fig("in_use_bytes")
    if own is not None:
        # recent PyTorch lists every process, the failing one included
        others = [p for p in others if int(p.get("in_use_bytes", 0)) != own]
    else:
        allocated = inp.fig("allocated_bytes")
        if len(others) == 1 and allocated and int(others[0].get("in_use_bytes", 0)) >= allocated:
            return None  # the one process listed holds at least what PyTorch allocated: it is this one
    if not others:
        return None
    held = sum(int(p.get("in_use_bytes", 0)) for p in others)
    pids = ", ".join(str(p.get("pid")) for p in others[:8]) + (" ..." if len(others) > 8 else "")
    req = inp.fig("requested_bytes")
    free = inp.fig("free_bytes") or 0
    gpu = inp.fig("gpu_index")
    return Remedy(
        id="gpu.free-other-processes",
        title=(
            f"Free GPU {gpu} from the other processes (or move to an idle GPU with CUDA_VISIBLE_DEVICES)"
            if gpu is not None
            else "Free the GPU from the other processes (or move to an idle GPU with CUDA_VISIBLE_DEVICES)"
        ),
        # no env value: which GPU is idle is not in the log, and a placeholder is not a value
        saves_bytes=held,
        fits=(free + held >= req) if req else None,
        confidence="high",
        why=f"{len(others)} other process(es) hold {format_size(held)} on this GPU (pid {pids}).",
        tradeoff="Stops or moves the other work.",
        sources={"other processes": "message"},
    )


@remedy("torch.reduce-batch")
def reduce_batch(inp: AdviceInput) -> Remedy | None:
    if inp.context.engine == "vllm" or inp.finding.engine == "vllm":
        return None  # vLLM batches itself: vllm.max-num-seqs / vllm.max-num-batched-tokens say how
    req = inp.fig("requested_bytes")
    return Remedy(
        id="torch.reduce-batch",
        title="Halve the batch size",
        settings={"batch_size": "half of the current value"},
        saves_bytes=None,
        fits=None,
        confidence="low",
        why="Activations grow with the batch" + (f"; the failing request was {format_size(req)}." if req else "."),
        tradeoff="Fewer samples per step; keep the effective batch with gradient accumulation when training.",
    )


@remedy("torch.mps-high-watermark")
def mps_high_watermark(inp: AdviceInput) -> Remedy | None:
    """Apple MPS: the allocator's upper limit (``max allowed``) refused the request.

    The value is the one PyTorch's own message prints (``PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0``
    disables the limit); oomdoctor adds how far over the limit the request went:
    MPS allocated + other allocations + requested − max allowed.
    """
    allocated, other = inp.fig("mps_allocated_bytes"), inp.fig("other_allocations_bytes")
    limit, req = inp.fig("max_allowed_bytes"), inp.fig("requested_bytes")
    if None in (allocated, other, limit, req):
        return None
    over = allocated + other + req - limit
    return Remedy(
        id="torch.mps-high-watermark",
        title="Lift the MPS allocator's upper limit",
        env={"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0"},
        fits=None,
        confidence="medium",
        why=(
            f"{format_size(allocated)} allocated + {format_size(other)} other + {format_size(req)} requested "
            f"is {format_size(over)} over the {format_size(limit)} limit; the value is the one PyTorch's message gives."
        ),
        tradeoff="No upper limit: macOS may swap heavily or the system may become unresponsive (PyTorch's warning).",
        sources={"figures": "message", "value": "message"},
    )
