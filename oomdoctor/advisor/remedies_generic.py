"""Remedies that apply to any PyTorch-based failure."""

from __future__ import annotations

from oomdoctor.advisor._engine_util import one_request, product_of
from oomdoctor.advisor.account import other_processes, process_held
from oomdoctor.advisor.cause import (
    FRAGMENTATION_SHARE,
    OTHERS_SHARE,
    POOL_ENGINES,
    SEGMENT_ROUNDING,
    engine_for,
)
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.remedies_vllm import v0_engine
from oomdoctor.advisor.run_steps import list_gpu_processes, list_processes_by_gpu
from oomdoctor.advisor.siblings import ranks_share_gpu, sibling_bytes, sibling_pids
from oomdoctor.advisor.training_frames import shows_training_state
from oomdoctor.advisor.values import ceil_to, floor_to, fmt_fraction
from oomdoctor.report import Remedy

GIB = 2**30
#: max_split_size_mb never below this (MiB): smaller values split almost every block
MAX_SPLIT_FLOOR_MB = 128


def legacy_allocator(inp: AdviceInput) -> bool:
    """PyTorch before 2.1: its message advises max_split_size_mb; expandable_segments does not exist."""
    msg = inp.finding.message
    return inp.finding.rule.endswith(".legacy") or ("max_split_size_mb" in msg and "expandable_segments" not in msg)


def alloc_conf_var(inp: AdviceInput) -> str:
    """The allocator's settings variable in the message's own spelling: a ROCm build of PyTorch
    (hipified) advises PYTORCH_HIP_ALLOC_CONF, every other build PYTORCH_CUDA_ALLOC_CONF."""
    return "PYTORCH_HIP_ALLOC_CONF" if "PYTORCH_HIP_ALLOC_CONF" in inp.finding.message else "PYTORCH_CUDA_ALLOC_CONF"


def _spare(inp: AdviceInput) -> int | None:
    spare = inp.fig("reserved_unallocated_bytes")
    if spare is None:
        reserved, allocated = inp.fig("reserved_bytes"), inp.fig("allocated_bytes")
        if reserved is not None and allocated is not None:
            spare = reserved - allocated
    return spare


#: in a serving engine's OOM (its pool pre-allocated, the rest of the card small steps' activations),
#: reserved-but-unallocated memory from this share of the card up, covering the request, is fragmentation
#: worth reclaiming: the engine's next steps ask for the same sizes, so the pages won back serve them too.
#: Below it (vLLM on 80 GB: 351 MiB of slack, fresh-061) it is the ordinary tail of live segments.
ENGINE_SLACK_SHARE = 0.02


def _engine_oom(inp: AdviceInput) -> bool:
    """A PyTorch OOM inside a serving engine that pre-allocates its pool (vLLM, SGLang, TGI, TensorRT-LLM)."""
    return inp.finding.kind.startswith("torch.") and engine_for(inp.finding, inp.context) in POOL_ENGINES


def _slack_matters(inp: AdviceInput, spare: int) -> bool:
    """Reserved-but-unallocated memory is worth reclaiming: the cause is the allocator (fragmentation,
    or a driver fault that expandable segments' cuMemMap path may avoid), or the slack is at least
    FRAGMENTATION_SHARE of the card (ENGINE_SLACK_SHARE in a serving engine's OOM, where the slack
    covers the request with the free memory). Below that it is the ordinary tail of live segments:
    reclaiming it lets this request through and the next one fail."""
    cause = inp.finding.cause
    if cause is not None and cause.id in ("fragmentation", "driver-fault"):
        return True
    total = inp.fig("total_bytes") or inp.context.gpu_total_bytes
    if total is None:
        return spare >= GIB  # the card's size unknown: only a slack of a GiB or more is worth reclaiming
    if _engine_oom(inp) and spare >= ENGINE_SLACK_SHARE * total and _covers(inp, spare):
        return True
    return spare >= FRAGMENTATION_SHARE * total


def _covers(inp: AdviceInput, spare: int) -> bool:
    """The slack, with what the driver still had free, covers the request: had it not been stranded
    in segments that still hold live blocks, the allocation would have succeeded."""
    req, free = inp.fig("requested_bytes"), inp.fig("free_bytes") or 0
    return req is not None and spare + free >= req


@remedy("torch.expandable-segments")
def expandable_segments(inp: AdviceInput) -> Remedy | None:
    if inp.context.expandable_segments or legacy_allocator(inp):
        return None
    spare, req = _spare(inp), inp.fig("requested_bytes")
    if spare is None or req is None or not _slack_matters(inp, spare):
        return None
    # fragmentation matters when the cached-but-free memory is a sizeable share of the request
    if spare < req / 4:
        return None
    free = inp.fig("free_bytes")
    if free is not None and free >= req:
        # the driver had the memory: the cache is not what stood in the way, but expandable segments
        # allocate through another path (cuMemCreate/cuMemMap), which may avoid the one that failed
        return Remedy(
            id="torch.expandable-segments",
            title=remedy_text("torch.expandable-segments", "title_path"),
            env={alloc_conf_var(inp): "expandable_segments:True"},
            saves_bytes=None,
            fits=None,
            confidence="low",
            why=remedy_text("torch.expandable-segments", "why_path", free=free, request=req),
            sources={"free": "message", "requested": "message"},
        )
    # the slack alone covers the request, or with the driver's free memory beside it (pages of a
    # segment that expandable segments unmap and map again where the request needs them)
    fits = spare >= req or (_engine_oom(inp) and _covers(inp, spare))
    return Remedy(
        id="torch.expandable-segments",
        title=remedy_text("torch.expandable-segments", "title"),
        env={alloc_conf_var(inp): "expandable_segments:True"},
        saves_bytes=spare,
        fits=fits if fits else None,
        confidence="high" if spare >= req else "medium",
        why=remedy_text("torch.expandable-segments", "why", spare=spare, request=req),
        tradeoff=remedy_text(
            "torch.expandable-segments",
            "cost_vllm" if (inp.context.engine == "vllm" or inp.finding.engine == "vllm") else "cost",
        ),
        sources={"fragmentation": "message", "requested": "message"},
    )


@remedy("torch.max-split-size")
def max_split_size(inp: AdviceInput) -> Remedy | None:
    """PyTorch before 2.1 (the message advises ``max_split_size_mb``): stop splitting large cached blocks.

    Value: the request in MiB rounded up to a power of two, at least :data:`MAX_SPLIT_FLOOR_MB`.
    """
    if not legacy_allocator(inp):
        return None
    spare, req = _spare(inp), inp.fig("requested_bytes")
    if spare is None or req is None or spare < req / 4 or not _slack_matters(inp, spare):
        return None
    mib = max(MAX_SPLIT_FLOOR_MB, 1 << max(0, (int(req) - 1).bit_length() - 20))
    return Remedy(
        id="torch.max-split-size",
        title=remedy_text("torch.max-split-size", "title", mib=mib),
        env={alloc_conf_var(inp): f"max_split_size_mb:{mib}"},
        saves_bytes=None,
        fits=None,
        confidence="medium",
        why=remedy_text("torch.max-split-size", "why", spare=spare, request=req, mib=mib, floor=MAX_SPLIT_FLOOR_MB),
        sources={"fragmentation": "message", "requested": "message"},
    )


@remedy("torch.memory-fraction")
def memory_fraction(inp: AdviceInput) -> Remedy | None:
    """PyTorch's "N allowed": the process capped itself with ``set_per_process_memory_fraction``.

    Value: (this process + request) / capacity, rounded up, plus 0.01; never above (this process + free) / capacity.
    """
    allowed, total, req = inp.fig("allowed_bytes"), inp.fig("total_bytes"), inp.fig("requested_bytes")
    held = process_held(inp.figures)
    free = inp.fig("free_bytes")
    if None in (allowed, total, req, held, free) or not total:
        return None
    if held + req + SEGMENT_ROUNDING <= allowed:
        return None  # the cap does not bind: held + requested, rounded up to a segment, is within it
    value = ceil_to((held + req) / total + 0.01, 2)
    ceiling = floor_to((held + free) / total, 2)
    fits: bool | None = value <= ceiling
    if value > 1 or value <= allowed / total:
        return None
    return Remedy(
        id="torch.memory-fraction",
        title=remedy_text("torch.memory-fraction", "title", fraction=fmt_fraction(value)),
        settings={"torch.cuda.set_per_process_memory_fraction": fmt_fraction(value)},
        saves_bytes=int(value * total) - int(allowed),
        fits=fits,
        confidence="high" if fits else "low",
        why=remedy_text(
            "torch.memory-fraction", "why", allowed=allowed, free=free, held=held, request=req, total=total,
            value=fmt_fraction(value),
        ),
        sources={"cap": "message", "held": "message", "requested": "message", "free": "message"},
    )


#: programs whose own code picks each rank's GPU (torch.cuda.set_device): plain PyTorch and the
#: training libraries that run in the user's process
_SETS_ITS_DEVICE = ("pytorch", "transformers", "hf-trainer", "accelerate", "deepspeed", "lightning")


@remedy("gpu.rank-devices")
def rank_devices(inp: AdviceInput) -> Remedy | None:
    """The job's ranks share the failing GPU (siblings.py): give each rank its own device."""
    if not ranks_share_gpu(inp.finding, inp.context):
        return None
    pids = sibling_pids(inp.finding, inp.context)
    held = sibling_bytes(inp.finding, pids)
    req, free = inp.fig("requested_bytes"), inp.fig("free_bytes") or 0
    gpu = inp.fig("gpu_index")
    # a PyTorch program selects its rank's device itself; an engine (vLLM, SGLang, TGI, TensorRT-LLM)
    # maps its workers, and the launcher's mapping is the knob there
    own = product_of(inp) in _SETS_ITS_DEVICE
    env: dict[str, str] = {}
    settings = {"torch.cuda.set_device": remedy_text("gpu.rank-devices", "set_device")} if own else {}
    why = remedy_text("gpu.rank-devices", "why", count=len(pids), pids=f"{pids[0]}–{pids[-1]}", held=held,
                      gpu="?" if gpu is None else gpu)
    if product_of(inp) == "trtllm":
        # TensorRT-LLM starts one MPI rank per GPU of its world (tp_size × pp_size) and each rank takes
        # the device of its rank among those visible: the GPUs exposed and tp_size are the knobs
        ranks = len(pids) + 1  # the listed siblings and this process ("this process has ...")
        hinted = inp.hints.get("gpus")
        gpus = int(hinted) if hinted and hinted.isdigit() else inp.context.gpu_count
        world = ranks if not gpus or gpus >= ranks else 1 << (gpus.bit_length() - 1)
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(world))}
        settings = {"tp_size": str(max(1, world // (inp.context.pipeline_parallel_size or 1)))}
        why = remedy_text("gpu.rank-devices", "why_trtllm", count=len(pids), pids=f"{pids[0]}–{pids[-1]}", held=held,
                          gpu="?" if gpu is None else gpu, ranks=ranks, world=world,
                          visible=env["CUDA_VISIBLE_DEVICES"])
    return Remedy(
        id="gpu.rank-devices",
        title=remedy_text("gpu.rank-devices", "title", gpu="?" if gpu is None else gpu),
        env=env,
        settings=settings,
        run=[list_processes_by_gpu()],
        saves_bytes=held,
        fits=(free + held >= req) if req else None,
        confidence="high",
        why=why,
        sources={"sibling ranks": "message"},
    )


@remedy("gpu.free-other-processes")
def free_other_processes(inp: AdviceInput) -> Remedy | None:
    if ranks_share_gpu(inp.finding, inp.context):
        return None  # the other processes are this job's own ranks: stopping them stops the job
    others = other_processes(inp.figures)
    req = inp.fig("requested_bytes")
    free = inp.fig("free_bytes") or 0
    gpu = inp.fig("gpu_index")
    if not others:
        return _free_unlisted(inp)
    held = sum(int(p.get("in_use_bytes", 0)) for p in others)
    total = inp.fig("total_bytes")
    cause = inp.finding.cause
    if total and held < FRAGMENTATION_SHARE * total and (cause is None or cause.id != "other-processes"):
        # a few percent of the card (a desktop, another CUDA context): freeing it lets this request
        # through and the next one fail, as with the allocator's ordinary slack
        return None
    pids = ", ".join(str(p.get("pid")) for p in others[:8]) + (" ..." if len(others) > 8 else "")
    return Remedy(
        id="gpu.free-other-processes",
        title=(
            remedy_text("gpu.free-other-processes", "title_gpu", gpu=gpu)
            if gpu is not None
            else remedy_text("gpu.free-other-processes", "title")
        ),
        # no env value: which GPU is idle is not in the log, and a placeholder is not a value
        saves_bytes=held,
        fits=(free + held >= req) if req else None,
        confidence="high",
        why=remedy_text("gpu.free-other-processes", "why", count=len(others), held=held, pids=pids),
        sources={"other processes": "message"},
    )


def _look_first(title: str, why: str) -> Remedy:
    """Other processes' memory to look at with the device's tool, no size promised."""
    return Remedy(
        id="gpu.free-other-processes",
        title=remedy_text("gpu.free-other-processes", title),
        run=[list_gpu_processes()],
        confidence="low",
        why=remedy_text("gpu.free-other-processes", why),
    )


def _free_unlisted(inp: AdviceInput) -> Remedy | None:
    """The account shows memory held outside this process without naming the processes."""
    cause = inp.finding.cause
    if inp.finding.kind == "vllm.kv-cache.no-blocks" and cause is not None and cause.id == "kv-budget-exhausted":
        # V0's budget (total × utilization − the profiled peak, which counts every process's memory)
        # shrinks with what other processes hold; V1 counts only its own increase and refuses to start
        # when the free memory is below its budget, so other processes never end in "no cache blocks"
        return _look_first("title_check", "why_noblocks") if v0_engine(inp) else None
    if cause is None or cause.id != "other-processes" or inp.finding.account is None:
        return None
    acc = inp.finding.account
    total, free, req = acc.get("capacity"), acc.get("free"), acc.get("request")
    others, outside = acc.get("other-processes"), acc.get("outside-pytorch")
    # the process figures place the memory in other processes, or only outside PyTorch's allocator
    # (another process, or this one's CUDA context and non-PyTorch pools: the log cannot tell)
    elsewhere = others is not None and total is not None and others >= OTHERS_SHARE * total
    held = others if elsewhere or outside is None else outside
    why_key = "why_held" if elsewhere or outside is None else "why_outside"
    if held is None or total is None:
        # the cause was read from where it failed, not from sizes: say how to look, promise nothing
        return _look_first("title", "why_unsized")
    gpu = inp.fig("gpu_index")
    return Remedy(
        id="gpu.free-other-processes",
        title=(
            remedy_text("gpu.free-other-processes", "title_held_gpu", gpu=gpu, held=held)
            if gpu is not None
            else remedy_text("gpu.free-other-processes", "title_held", held=held)
        ),
        run=[list_gpu_processes()],
        saves_bytes=held,
        fits=(free or 0) + held >= req if req else None,
        # a small share held elsewhere: sizing this process to the free memory is the cheaper change
        # (memory outside PyTorch's allocator may be this process's own: who holds it is not known)
        confidence="high" if (req and held >= OTHERS_SHARE * total and why_key == "why_held") else "medium",
        why=(
            remedy_text("gpu.free-other-processes", why_key + "_free", held=held, total=total, free=free)
            if free is not None
            else remedy_text("gpu.free-other-processes", why_key, held=held, total=total)
        ),
        sources={"held": "derived from the message (capacity − free − this process)"},
    )


#: engines that batch by themselves (their own knobs say how) or have their own batch remedy
_OWN_BATCHING = ("vllm", "sglang", "tgi", "tensorrt-llm", "llama.cpp", "ollama", "ggml", "jax", "tensorflow", "xla")


#: the batch-size key of each product that names it (TrainingArguments, DeepSpeed's config,
#: axolotl's YAML, a diffusers pipeline call); any other program's batch is its own variable
BATCH_KEY = {
    "hf-trainer": "per_device_train_batch_size", "trl": "per_device_train_batch_size",
    "llama-factory": "per_device_train_batch_size", "axolotl": "micro_batch_size",
    "deepspeed": "train_micro_batch_size_per_gpu", "diffusers": "num_images_per_prompt",
}


#: programs that generate one prompt at a time (text-generation-webui's chat and its API): no batch knob
_ONE_PROMPT_PRODUCTS = ("text-generation-webui",)


@remedy("torch.reduce-batch")
def reduce_batch(inp: AdviceInput) -> Remedy | None:
    engines = {inp.context.engine, inp.finding.engine}
    if engines & set(_OWN_BATCHING):
        return None  # a server batches by itself (max-num-seqs, max-running-requests, ...); XLA has xla.reduce-batch
    if shows_training_state(inp.context.extra):
        return None  # the failing frame allocates optimizer state, ZeRO partitions or DDP buckets: no batch in them
    if product_of(inp) in _ONE_PROMPT_PRODUCTS:
        return None  # a chat UI generates one prompt at a time: it has no batch size to lower
    if product_of(inp) == "sd-webui-forge":
        return None  # Forge's batch is a field of its page: forge.resolution-batch speaks it
    if one_request(inp):
        return None  # one image per request (an interrogator, captioner, tagger): no batch to halve
    req = inp.fig("requested_bytes")
    return Remedy(
        id="torch.reduce-batch",
        title=remedy_text("torch.reduce-batch", "title"),
        settings={BATCH_KEY.get(product_of(inp) or "", "batch_size"):
                  remedy_text("torch.reduce-batch", "setting")},
        saves_bytes=None,
        fits=None,
        confidence="low",
        why=remedy_text("torch.reduce-batch", "why_request", request=req) if req else remedy_text("torch.reduce-batch", "why"),
    )


#: PyTorch's MPS allocator (torch 2.5.1 wheel, include/ATen/mps/MPSAllocator.h): the limit ("max
#: allowed") is PYTORCH_MPS_HIGH_WATERMARK_RATIO x the device's recommendedMaxWorkingSetSize, by default
#: 1.7 x; a ratio above 2.0 ("the allowed upper bound") is refused, and 0.0 disables the limit
MPS_DEFAULT_HIGH_RATIO = 1.7
MPS_HIGH_RATIO_BOUND = 2.0
#: room asked above what failed: the next step allocates again, and a limit a few MiB above the
#: failure fails on the next request (MPSAllocator.mm checks ratio <= the bound: 2.0 itself is allowed)
MPS_HEADROOM = 0.05


def mps_ratio_for(needed: int, limit: int) -> float | None:
    """The high-watermark ratio, in 0.1 steps, above the default that lets ``needed`` bytes and
    :data:`MPS_HEADROOM` more through a ``limit`` set at the default ratio; the bound itself where
    only the headroom does not fit under it; None when ``needed`` alone is above the bound."""

    def step(want: float) -> float:
        ratio = MPS_DEFAULT_HIGH_RATIO * want / limit
        return round(max(MPS_DEFAULT_HIGH_RATIO, floor_to(ratio, 1)) + 0.1, 1)

    if step(needed) > MPS_HIGH_RATIO_BOUND:
        return None
    return min(step(needed * (1 + MPS_HEADROOM)), MPS_HIGH_RATIO_BOUND)


@remedy("torch.mps-high-watermark")
def mps_high_watermark(inp: AdviceInput) -> Remedy | None:
    """Apple MPS: the allocator's upper limit (``max allowed``) refused the request.

    Value: the ratio that lets MPS allocated + other allocations + requested through, assuming the
    limit is at PyTorch's default ratio (1.7 x the recommended working set): 1.7 x needed / max allowed,
    up to the next 0.1 (at least 1.8). Above PyTorch's bound of 2.0 only the message's own 0.0
    (no limit at all) is left, with its warning.
    """
    allocated, other = inp.fig("mps_allocated_bytes"), inp.fig("other_allocations_bytes")
    limit, req = inp.fig("max_allowed_bytes"), inp.fig("requested_bytes")
    if None in (allocated, other, limit, req) or not limit:
        return None
    needed = allocated + other + req
    over = needed - limit
    value = mps_ratio_for(needed, limit)
    texts = dict(allocated=allocated, other=other, request=req, over=max(over, 0), limit=limit,
                 recommended=int(limit / MPS_DEFAULT_HIGH_RATIO))
    if value is None:
        return Remedy(
            id="torch.mps-high-watermark",
            title=remedy_text("torch.mps-high-watermark", "title_off"),
            env={"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0"},
            fits=None,
            confidence="low",
            why=remedy_text("torch.mps-high-watermark", "why_off", **texts),
            tradeoff=remedy_text("torch.mps-high-watermark", "cost_off"),
            sources={"figures": "message", "value": "message"},
        )
    return Remedy(
        id="torch.mps-high-watermark",
        title=remedy_text("torch.mps-high-watermark", "title", ratio=f"{value:.1f}"),
        env={"PYTORCH_MPS_HIGH_WATERMARK_RATIO": f"{value:.1f}"},
        saves_bytes=None,
        fits=None,
        confidence="medium",
        why=remedy_text("torch.mps-high-watermark", "why" if over > 0 else "why_at_limit", ratio=f"{value:.1f}",
                        new_limit=int(limit * value / MPS_DEFAULT_HIGH_RATIO), **texts),
        sources={"figures": "message", "default ratio": "PyTorch MPSAllocator.h"},
    )


#: Intel Extension for PyTorch's single-block limit on devices without 2D block arrays
#: (csrc/gpu/runtime/CachingDeviceAllocator.cpp kStatefulLimit, "larger than 4GB")
XPU_BLOCK_LIMIT = "4 GB"


@remedy("xpu.split-allocation")
def xpu_split_allocation(inp: AdviceInput) -> Remedy | None:
    """IPEX refused a block over its 4 GB limit: only a smaller tensor (or a platform without the
    limit) gets through; no memory setting moves the limit."""
    if inp.finding.rule != "ipex.xpu-allocation-size-cap":
        return None
    return Remedy(
        id="xpu.split-allocation",
        title=remedy_text("xpu.split-allocation", "title", limit=XPU_BLOCK_LIMIT),
        fits=None,
        confidence="high",
        why=remedy_text("xpu.split-allocation", "why", limit=XPU_BLOCK_LIMIT, request=inp.fig("requested_bytes")),
    )
