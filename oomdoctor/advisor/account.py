"""The memory account: the ledger of the failing device, read from the finding's figures and the context.

Each entry has its bytes, its provenance (``stated`` by the log, ``derived`` from stated figures by a
named formula, ``assumed`` from a default) and the log line it came from when the figure is the
finding's own. The cause (:mod:`oomdoctor.advisor.cause`) and the property tests read this ledger; the
remedies must not contradict it.

Entry names: ``capacity``, ``cap``, ``free``, ``other-processes``, ``outside-pytorch``, ``this-process``,
``allocated``, ``reserved``, ``fragmentation``, ``weights``, ``kv-cache``, ``kv-needed``, ``kv-available``,
``cudagraphs``, ``activations``, ``request``, ``shortfall``, ``weight-tensor`` (the request is one
weight tensor of the model: :mod:`~oomdoctor.advisor.weight_tensors`); host: ``rss``, ``anon-rss``, ``file-rss``,
``shmem-rss``, ``limit``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from oomdoctor.advisor._engine_util import checkpoint_quantized
from oomdoctor.advisor.catalog import DTYPE_BYTES, find_gpu, find_model
from oomdoctor.report import Account, AccountEntry, Context, Finding, Provenance

#: engines whose logs name the GPU but not its size, and print the weight buffer per device
_GGML_ENGINES = ("llama.cpp", "ggml", "ollama")


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    return None


def allocator_held(fig: dict[str, Any]) -> int | None:
    """What PyTorch's caching allocator holds on the device: reserved, else allocated + reserved-unallocated."""
    reserved = _int(fig.get("reserved_bytes"))
    if reserved is not None:
        return reserved
    allocated, spare = _int(fig.get("allocated_bytes")), _int(fig.get("reserved_unallocated_bytes"))
    if allocated is None:
        return None
    return allocated + (spare or 0)


def process_held(fig: dict[str, Any]) -> Any:
    """What this process holds on the device: the message's "this process has N in use", else what
    its caching allocator holds (:func:`allocator_held`)."""
    return fig.get("in_use_bytes") or allocator_held(fig)


def own_in_use_contradicted(fig: dict[str, Any]) -> bool:
    """The message's "this process has N in use" is less than its own allocator holds.

    Inside a container (a PID namespace) NVML cannot see the process, and PyTorch prints
    "this process has 0 bytes memory in use" beside tens of GiB "allocated by PyTorch". What the
    allocator reserved is memory of this process: the allocator's figures win.
    """
    own, held = _int(fig.get("in_use_bytes")), allocator_held(fig)
    return own is not None and held is not None and own < held


def other_processes(fig: dict[str, Any]) -> list[dict[str, Any]]:
    """The processes a message lists, without the failing one (recent PyTorch lists it too).

    The failing process is the one whose "in use" equals this process's; when that figure is
    missing or contradicted, it is the largest listed process holding at least what the caching
    allocator holds (the same process seen through a container's PID namespace).
    """
    procs = [p for p in fig.get("other_processes") or [] if isinstance(p, dict)]
    own = _int(fig.get("in_use_bytes"))
    if own is not None and not own_in_use_contradicted(fig):
        return [p for p in procs if _int(p.get("in_use_bytes")) != own]
    held = allocator_held(fig)
    if not procs or not held:
        return procs
    largest = max(procs, key=lambda p: _int(p.get("in_use_bytes")) or 0)
    if (_int(largest.get("in_use_bytes")) or 0) >= held:
        return [p for p in procs if p is not largest]
    return procs


#: memory outside PyTorch's caching allocator is worth naming from this size up, and from this share
#: of the card: below both it is a CUDA context (300-600 MiB), the cuBLAS/cuDNN workspaces and the
#: driver's own reservations, which every process has
UNACCOUNTED_BYTES = 2 * 2**30
UNACCOUNTED_SHARE = 0.05
#: on a small card (below UNACCOUNTED_BYTES / this share, 8 GiB) the absolute floor would hide what
#: matters: from this share of the card up, memory outside the allocator is worth naming whatever its
#: size (0.71 of a 1.96 GiB card is more than a quarter of it: a display, a context, another process)
UNACCOUNTED_SMALL_CARD_SHARE = 0.25


class Unaccounted(NamedTuple):
    """Memory the PyTorch message's figures leave outside its allocator: ``gap`` = total − free −
    (allocated + reserved-unallocated), and what of it the message's process lines place."""

    gap: int
    #: this process's own non-PyTorch memory ("this process has N in use" − what its allocator holds);
    #: None where that figure is missing or contradicted (a container's PID namespace: "0 bytes")
    own: int | None
    #: the other processes the message lists (None: it lists none)
    others: int | None
    #: the message's "this process has N in use" is less than its allocator holds: not a fact
    hidden: bool


def unaccounted(fig: dict[str, Any]) -> Unaccounted | None:
    """The memory held outside PyTorch's allocator, when it is more than :data:`UNACCOUNTED_SHARE` of
    the card and either more than :data:`UNACCOUNTED_BYTES` or at least
    :data:`UNACCOUNTED_SMALL_CARD_SHARE` of it (None below that, or where a figure is missing)."""
    total, free, held = _int(fig.get("total_bytes")), _int(fig.get("free_bytes")), allocator_held(fig)
    if total is None or free is None or held is None:
        return None
    gap = total - free - held
    if gap <= UNACCOUNTED_SHARE * total or (gap <= UNACCOUNTED_BYTES and gap < UNACCOUNTED_SMALL_CARD_SHARE * total):
        return None
    hidden = own_in_use_contradicted(fig)
    in_use = _int(fig.get("in_use_bytes"))
    own = None if (hidden or in_use is None) else max(0, in_use - held)
    listed = other_processes(fig)
    others = sum(_int(p.get("in_use_bytes")) or 0 for p in listed) if listed else None
    return Unaccounted(gap, own, others, hidden)


class _Ledger:
    def __init__(self, line: int) -> None:
        self.entries: list[AccountEntry] = []
        self.line = line

    def add(self, name: str, value: int | None, source: Provenance, *, stated_here: bool = True,
            note: str = "", tokens: bool = False) -> None:
        if value is None or any(e.name == name for e in self.entries):
            return
        line = self.line if (source == "stated" and stated_here) else None
        size = {"tokens": int(value)} if tokens else {"bytes": int(value)}
        self.entries.append(AccountEntry(name=name, source=source, line=line, note=note, **size))

    def get(self, name: str) -> int | None:
        for e in self.entries:
            if e.name == name and e.bytes is not None:
                return e.bytes
        return None


def _gpu(led: _Ledger, fig: dict[str, Any], ctx: Context, engine: str) -> None:
    total = _int(fig.get("total_bytes"))
    led.add("capacity", total, "stated")
    if total is None:
        led.add("capacity", ctx.gpu_total_bytes, "stated", stated_here=False, note="from the log's context")
    if engine in _GGML_ENGINES:
        # llama.cpp names the device ("Device 0: NVIDIA A100 80GB PCIe") but never its size
        spec = find_gpu(ctx.gpu_name) if led.get("capacity") is None else None
        if spec is not None:
            led.add("capacity", spec.memory_bytes, "assumed", note=f"the catalog's {spec.name}")
        led.add("weights", _int(ctx.extra.get("llama_gpu_weights_bytes")), "stated", stated_here=False,
                note="the first GPU's weight buffer")
    cap = _int(fig.get("allowed_bytes")) or _int(fig.get("max_allowed_bytes"))
    led.add("cap", cap, "stated", note="per-process limit")
    capacity = led.get("capacity")
    util = fig.get("gpu_memory_utilization") or ctx.gpu_memory_utilization
    if cap is None and capacity and engine == "vllm" and isinstance(util, (int, float)):
        led.add("cap", int(capacity * float(util)), "derived", note=f"capacity × gpu_memory_utilization {util}")
    free = _int(fig.get("free_bytes"))
    led.add("free", free, "stated")
    own = _int(fig.get("in_use_bytes"))
    if own_in_use_contradicted(fig):
        # the account must add up: this process holds at least what its own allocator holds
        own = allocator_held(fig)
        led.add("this-process", own, "derived",
                note="allocated + reserved-unallocated: the message's own \"this process has "
                     f"{_int(fig.get('in_use_bytes'))} bytes in use\" contradicts the allocator's figures "
                     "(a container's PID namespace hides the process from NVML)")
    led.add("this-process", own, "stated")
    allocated = _int(fig.get("allocated_bytes"))
    led.add("allocated", allocated, "stated")
    led.add("allocated", _int(fig.get("mps_allocated_bytes")), "stated", note="MPS allocated")
    spare = _int(fig.get("reserved_unallocated_bytes"))
    reserved = _int(fig.get("reserved_bytes"))
    led.add("reserved", reserved, "stated")
    if reserved is None and allocated is not None and spare is not None:
        led.add("reserved", allocated + spare, "derived", note="allocated + reserved-but-unallocated")
    led.add("fragmentation", spare, "stated", note="reserved by PyTorch but unallocated")
    if spare is None and reserved is not None and allocated is not None and reserved >= allocated:
        led.add("fragmentation", reserved - allocated, "derived", note="reserved − allocated")
    others = other_processes(fig)
    if others:
        led.add("other-processes", sum(_int(p.get("in_use_bytes")) or 0 for p in others), "stated",
                note="pid " + ", ".join(str(p.get("pid")) for p in others[:8]))
    if capacity is not None and free is not None and led.get("other-processes") is None:
        if fig.get("desired_bytes") is not None and capacity > free:
            # vLLM's start-up check runs before the engine allocates: what is not free is held by others
            led.add("other-processes", capacity - free, "derived", note="capacity − free at start-up")
        elif own is not None and own_in_use_contradicted(fig):
            # the process NVML could not see is this one: who holds the rest (this process outside its
            # allocator, or another process) the message cannot say
            rest = capacity - free - own
            if rest > 0:
                led.add("outside-pytorch", rest, "derived",
                        note="capacity − free − reserved by PyTorch: this process's CUDA context and non-PyTorch "
                             "allocations, or other processes (the message's own figure for this process is hidden)")
        elif own is not None:
            rest = capacity - free - own
            if rest > 0:
                led.add("other-processes", rest, "derived", note="capacity − free − this process")
        else:
            held = led.get("reserved")
            if held is not None and capacity - free - held > 0:
                led.add("outside-pytorch", capacity - free - held, "derived",
                        note="capacity − free − reserved by PyTorch: other processes and this process's CUDA context")
    held = led.get("reserved")
    if own is not None and held is not None and led.get("outside-pytorch") is None and own - held > 0:
        led.add("outside-pytorch", own - held, "derived",
                note="this process − reserved by PyTorch: its CUDA context and what another allocator holds")
    weights = _int(fig.get("weights_bytes"))
    led.add("weights", weights, "stated")
    led.add("weights", ctx.weights_bytes, "stated", stated_here=False)
    led.add("kv-cache", _int(fig.get("kv_cache_bytes")), "stated")
    led.add("kv-cache", ctx.kv_cache_bytes, "stated", stated_here=False)
    led.add("kv-needed", _int(fig.get("kv_cache_needed_bytes")), "stated")
    led.add("kv-available", _int(fig.get("kv_cache_available_bytes")), "stated")
    led.add("cudagraphs", _int(fig.get("cudagraph_bytes")), "stated")
    led.add("cudagraphs", ctx.cudagraph_bytes, "stated", stated_here=False)
    led.add("activations", _int(fig.get("activation_peak_bytes")), "stated")
    led.add("activations", ctx.activation_peak_bytes, "stated", stated_here=False)
    request = (_int(fig.get("requested_bytes")) or _int(fig.get("desired_bytes")) or _int(fig.get("buffer_bytes"))
               or _int(fig.get("segment_bytes")))
    led.add("request", request, "stated")
    led.add("request", tensor_bytes(fig), "derived", note="tensor shape × dtype size")
    _tokens(led, fig, ctx)
    needed, avail = led.get("kv-needed"), led.get("kv-available")
    if needed is not None and avail is not None and needed > avail:
        led.add("shortfall", needed - avail, "derived", note="KV needed − KV available")
    if request is not None and free is not None and request > free:
        led.add("shortfall", request - free, "derived", note="request − free")


#: bytes per element of the dtypes TensorFlow names in "OOM when allocating tensor ... and type T"
#: (tensorflow/core/framework/types.proto: DT_FLOAT is 32-bit, DT_HALF 16-bit, ...)
TF_DTYPE_BYTES = {
    "float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1, "uint8": 1, "bool": 1, "int16": 2,
    "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "complex64": 8, "complex128": 16,
}  # fmt: skip


def tensor_bytes(fig: dict[str, Any]) -> int | None:
    """The size of the tensor a TensorFlow OOM names: the product of its shape × its dtype's size."""
    shape, dtype = fig.get("tensor_shape"), fig.get("tensor_dtype")
    size = TF_DTYPE_BYTES.get(str(dtype)) if dtype is not None else None
    if not isinstance(shape, list) or not shape or size is None:
        return None
    out = size
    for dim in shape:
        out *= int(dim)
    return out


def _tokens(led: _Ledger, fig: dict[str, Any], ctx: Context) -> None:
    """KV caches counted in tokens: what it holds, what one sequence may need, what was asked."""
    held = _int(fig.get("kv_cache_tokens")) or _int(fig.get("estimated_max_model_len")) or _int(fig.get("available_tokens"))
    led.add("kv-tokens", held, "stated", tokens=True)
    led.add("kv-tokens", ctx.kv_cache_tokens, "stated", stated_here=False, tokens=True)
    led.add("max-len-tokens", _int(fig.get("max_seq_len")) or _int(fig.get("max_total_tokens")), "stated", tokens=True)
    led.add("request-tokens", _int(fig.get("requested_tokens")) or _int(fig.get("prefill_tokens")), "stated", tokens=True)


def _host(led: _Ledger, fig: dict[str, Any]) -> None:
    parts = [_int(fig.get(k)) for k in ("anon_rss_bytes", "file_rss_bytes", "shmem_rss_bytes")]
    if any(p is not None for p in parts):
        led.add("rss", sum(p or 0 for p in parts), "derived", note="anon + file + shmem of the killed process")
    led.add("anon-rss", parts[0], "stated")
    led.add("file-rss", parts[1], "stated")
    led.add("shmem-rss", parts[2], "stated")
    led.add("limit", _int(fig.get("limit_bytes")), "stated")
    led.add("capacity", _int(fig.get("host_total_bytes")), "stated")


def account_for(finding: Finding, context: Context) -> Account:
    """The memory ledger of ``finding``'s device (GPU or host), from what the log states."""
    led = _Ledger(finding.location.line)
    fig = finding.figures
    engine = finding.engine if finding.engine not in ("", "pytorch") else (context.engine or finding.engine)
    if finding.kind.startswith(("host.", "ray.")) or any(k in fig for k in ("anon_rss_bytes", "host_total_bytes")):
        _host(led, fig)
    else:
        _gpu(led, fig, context, engine)
        _catalog_weights(led, context, engine)
    return Account(entries=led.entries)


#: serving engines that load the named model whole onto each GPU of its tensor-parallel group
_SERVING_ENGINES = ("vllm", "sglang", "tgi")


def _catalog_weights(led: _Ledger, ctx: Context, engine: str) -> None:
    """A serving engine's weights per GPU when the log does not state them: the catalog's parameter
    count × the checkpoint's bytes per parameter, over the tensor-parallel size. Only for an
    unquantized checkpoint (the catalog counts every parameter at one width)."""
    if led.get("weights") is not None or engine not in _SERVING_ENGINES or checkpoint_quantized(ctx):
        return
    geo = find_model(ctx.model)
    if geo is None:
        return
    total = geo.weight_bytes(DTYPE_BYTES.get(str(ctx.dtype)))
    if not total:
        return
    tp = ctx.tensor_parallel_size or 1
    led.add("weights", -(-total // tp), "assumed",  # rounded up, as fit and memory_model.facts do
            note=f"the catalog's {geo.name}: parameters × bytes per parameter" + (f" / tensor parallel {tp}" if tp > 1 else ""))
