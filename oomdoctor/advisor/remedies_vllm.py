"""vLLM remedies computed from the failing message's figures and the log's context.

Formulas follow ``research/vllm-memory-model.md`` §0 (one-screen model) and §7 (caveats).
"""

from __future__ import annotations

from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.values import (
    BLOCK_SIZE,
    MAX_UTILIZATION,
    UTILIZATION_MARGIN,
    ceil_to,
    floor_to,
    fmt_fraction,
    round_down,
)
from oomdoctor.report import Remedy
from oomdoctor.units import format_size


def _block_size(inp: AdviceInput) -> int:
    return inp.context.block_size or BLOCK_SIZE


def _total(inp: AdviceInput) -> int | None:
    return inp.fig("total_bytes") or inp.context.gpu_total_bytes


def _utilization(inp: AdviceInput) -> float | None:
    return inp.fig("gpu_memory_utilization") or inp.context.gpu_memory_utilization


def _bytes_per_token(inp: AdviceInput) -> float | None:
    needed = inp.fig("kv_cache_needed_bytes")
    max_len = inp.fig("max_seq_len")
    if needed and max_len:
        return float(needed) / float(max_len)
    ctx = inp.context
    if ctx.kv_cache_bytes and ctx.kv_cache_tokens:
        return ctx.kv_cache_bytes / ctx.kv_cache_tokens
    return None


def kv_capacity_tokens(inp: AdviceInput) -> tuple[int, str] | None:
    """Tokens the KV cache can hold, and which figure said so."""
    est = inp.fig("estimated_max_model_len")
    if est:
        return int(est), f"vLLM's own estimate of the maximum model length ({est})"
    tokens = inp.fig("kv_cache_tokens")
    if tokens:
        return int(tokens), f"the KV cache capacity the message states ({tokens} tokens)"
    needed, avail, max_len = (
        inp.fig("kv_cache_needed_bytes"),
        inp.fig("kv_cache_available_bytes"),
        inp.fig("max_seq_len"),
    )
    if needed and avail is not None and max_len and avail > 0:
        cap = int(max_len * avail // needed)
        return cap, (
            f"{max_len} tokens need {format_size(needed)} and {format_size(avail)} is available, "
            f"so {max_len} × {format_size(avail)} / {format_size(needed)} = {cap} tokens fit"
        )
    if inp.context.kv_cache_tokens:
        t = inp.context.kv_cache_tokens
        return t, f"the log's 'GPU KV cache size: {t} tokens'"
    return None


@remedy("vllm.max-model-len")
def max_model_len(inp: AdviceInput) -> Remedy | None:
    cap = kv_capacity_tokens(inp)
    if cap is None:
        return None
    tokens, why = cap
    bs = _block_size(inp)
    value = round_down(tokens, bs)
    if value <= 0:
        return None
    max_len = inp.fig("max_seq_len") or inp.context.max_model_len
    if max_len and value >= max_len:
        return None
    bpt = _bytes_per_token(inp)
    saves = int((max_len - value) * bpt) if (bpt and max_len) else None
    return Remedy(
        id="vllm.max-model-len",
        title=f"Limit the context to {value} tokens",
        flags={"--max-model-len": str(value)},
        saves_bytes=saves,
        fits=True,
        confidence="high",
        why=f"From {why}, rounded down to a multiple of the {bs}-token block size.",
        tradeoff=(
            f"Requests longer than {value} tokens (prompt + output) are rejected"
            + (f"; the model supports {max_len}." if max_len else ".")
        ),
        sources={"capacity": "message"},
    )


@remedy("vllm.gpu-memory-utilization.raise-for-kv")
def raise_utilization_for_kv(inp: AdviceInput) -> Remedy | None:
    needed, avail = inp.fig("kv_cache_needed_bytes"), inp.fig("kv_cache_available_bytes")
    total, util = _total(inp), _utilization(inp)
    if not (needed and avail is not None and total and util):
        return None
    missing = needed - avail
    target = ceil_to(util + missing / total, 2)
    free = inp.fig("free_bytes")
    cap = MAX_UTILIZATION if not free else min(MAX_UTILIZATION, floor_to(free / total, 2))
    if target <= util:
        return None
    fits = target <= cap
    return Remedy(
        id="vllm.gpu-memory-utilization.raise-for-kv",
        title=f"Give vLLM a larger share of the GPU ({fmt_fraction(target)})",
        flags={"--gpu-memory-utilization": fmt_fraction(target)},
        saves_bytes=None,
        fits=fits,
        confidence="medium" if fits else "low",
        why=(
            f"The KV cache lacks {format_size(missing)}: {fmt_fraction(util)} + {format_size(missing)} / "
            f"{format_size(total)} = {fmt_fraction(target)}"
            + ("" if fits else f", above the safe ceiling of {fmt_fraction(cap)}")
            + "."
        ),
        tradeoff="Less memory left for other processes on this GPU and for CUDA graphs.",
    )


@remedy("vllm.kv-cache-dtype-fp8")
def kv_cache_fp8(inp: AdviceInput) -> Remedy | None:
    ctx = inp.context
    if ctx.kv_cache_dtype and ctx.kv_cache_dtype.startswith("fp8"):
        return None
    needed, avail = inp.fig("kv_cache_needed_bytes"), inp.fig("kv_cache_available_bytes")
    cap = kv_capacity_tokens(inp)
    max_len = inp.fig("max_seq_len")
    if needed and avail is not None:
        fits = avail >= needed / 2
        saves = needed // 2
        why = f"fp8 halves the {format_size(needed)} needed to {format_size(needed // 2)}; {format_size(avail)} is available."
    elif cap and max_len:
        fits = cap[0] * 2 >= max_len
        saves = None
        why = f"fp8 doubles the KV capacity from {cap[0]} to about {cap[0] * 2} tokens; {max_len} are needed."
    else:
        return None
    return Remedy(
        id="vllm.kv-cache-dtype-fp8",
        title="Store the KV cache in fp8",
        flags={"--kv-cache-dtype": "fp8"},
        saves_bytes=saves,
        fits=fits,
        confidence="medium",
        why=why,
        tradeoff="Slight accuracy loss; needs a GPU and attention backend with fp8 KV support (Ada/Hopper or newer).",
    )


@remedy("vllm.gpu-memory-utilization.fit-free")
def utilization_fit_free(inp: AdviceInput) -> Remedy | None:
    free, total = inp.fig("free_bytes"), _total(inp)
    if not (free and total):
        return None
    value = floor_to(free / total - UTILIZATION_MARGIN, 2)
    if value <= 0:
        return None
    util = _utilization(inp)
    saves = int((util - value) * total) if util else None
    return Remedy(
        id="vllm.gpu-memory-utilization.fit-free",
        title=f"Ask for no more than the free memory ({fmt_fraction(value)})",
        flags={"--gpu-memory-utilization": fmt_fraction(value)},
        saves_bytes=saves,
        fits=True,
        confidence="high",
        why=(
            f"{format_size(free)} of {format_size(total)} is free: {format_size(free)} / {format_size(total)} = "
            f"{free / total:.4f}, minus a {UTILIZATION_MARGIN:.2f} margin, rounded down."
        ),
        tradeoff="A smaller budget means a smaller KV cache: fewer concurrent sequences, maybe a shorter max length.",
    )


@remedy("vllm.enforce-eager")
def enforce_eager(inp: AdviceInput) -> Remedy | None:
    if inp.context.enforce_eager:
        return None
    graph = inp.context.cudagraph_bytes
    req = inp.fig("requested_bytes")
    return Remedy(
        id="vllm.enforce-eager",
        title="Skip CUDA-graph capture",
        flags={"--enforce-eager": ""},
        saves_bytes=graph,
        fits=True if (graph and req and graph >= req) else None,
        confidence="high" if inp.finding.phase == "cudagraph-capture" else "medium",
        why=(
            "The failure happened while capturing CUDA graphs, whose memory sits on top of the KV budget"
            + (f" ({format_size(graph)} in this log)." if graph else ".")
        ),
        tradeoff="Slower decoding, most of all at small batch sizes (often 10-30%).",
    )


@remedy("vllm.max-num-seqs")
def max_num_seqs(inp: AdviceInput) -> Remedy | None:
    dummy = inp.fig("num_dummy_requests") or inp.context.max_num_seqs
    if not dummy or dummy <= 1:
        return None
    value = max(1, dummy // 2)
    return Remedy(
        id="vllm.max-num-seqs",
        title=f"Run fewer sequences at once ({value})",
        flags={"--max-num-seqs": str(value)},
        fits=None,
        confidence="medium",
        why=f"The warm-up ran {dummy} dummy requests at once; half as many halves the sampler's logits buffer.",
        tradeoff="Lower peak throughput under heavy concurrency.",
    )


@remedy("vllm.max-num-batched-tokens")
def max_num_batched_tokens(inp: AdviceInput) -> Remedy | None:
    cur = inp.context.max_num_batched_tokens
    if not cur or cur <= 512:
        return None
    value = max(512, round_down(cur // 2, 256))
    return Remedy(
        id="vllm.max-num-batched-tokens",
        title=f"Profile with a smaller batch ({value} tokens)",
        flags={"--max-num-batched-tokens": str(value)},
        fits=None,
        confidence="medium",
        why=f"The activation peak grows with the tokens per step ({cur} in this run); half of it roughly halves the peak.",
        tradeoff="Long prompts are prefilled in more, smaller chunks (slightly higher time to first token).",
    )


@remedy("vllm.gpu-memory-utilization.lower")
def lower_utilization(inp: AdviceInput) -> Remedy | None:
    util, total, req = _utilization(inp), _total(inp), inp.fig("requested_bytes")
    if not (util and total and req):
        return None
    value = floor_to(util - req / total, 2)
    if value >= util:
        value = round(util - 0.01, 2)
    if value <= 0.1:
        return None
    return Remedy(
        id="vllm.gpu-memory-utilization.lower",
        title=f"Leave room outside vLLM's budget ({fmt_fraction(value)})",
        flags={"--gpu-memory-utilization": fmt_fraction(value)},
        saves_bytes=int((util - value) * total),
        fits=True,
        confidence="medium",
        why=(
            f"{format_size(req)} could not be allocated outside the {fmt_fraction(util)} × {format_size(total)} budget; "
            f"{fmt_fraction(util)} − {format_size(req)} / {format_size(total)} = {fmt_fraction(value)}."
        ),
        tradeoff="A smaller KV cache: fewer concurrent sequences.",
    )


# -- model-size levers (refined by the memory model; values need the weights figure) -----------


def _weights(inp: AdviceInput) -> int | None:
    return inp.context.weights_bytes


@remedy("vllm.tensor-parallel-size")
def tensor_parallel(inp: AdviceInput) -> Remedy | None:
    gpus = inp.hints.get("gpus") or (str(inp.context.gpu_count) if inp.context.gpu_count else None)
    if not gpus or not gpus.isdigit() or int(gpus) < 2:
        return None
    tp = inp.context.tensor_parallel_size or 1
    n = int(gpus)
    value = tp * 2
    if value > n:
        return None
    return Remedy(
        id="vllm.tensor-parallel-size",
        title=f"Shard the model over {value} GPUs",
        flags={"--tensor-parallel-size": str(value)},
        fits=None,
        confidence="medium",
        why=f"{n} GPUs are available; weights and KV cache per GPU shrink by about {value // tp}×.",
        tradeoff="Uses more GPUs; inter-GPU communication costs some latency.",
    )


@remedy("vllm.cpu-offload-gb")
def cpu_offload(inp: AdviceInput) -> Remedy | None:
    req = inp.fig("requested_bytes")
    if not req:
        return None
    gib = max(1, -(-req // 2**30))
    return Remedy(
        id="vllm.cpu-offload-gb",
        title=f"Offload {gib} GiB of weights to CPU memory",
        flags={"--cpu-offload-gb": str(gib)},
        saves_bytes=gib * 2**30,
        fits=None,
        confidence="low",
        why=f"At least {format_size(req)} more is needed on the GPU; rounded up to whole GiB.",
        tradeoff="Much slower: offloaded weights cross PCIe on every forward pass.",
    )


@remedy("vllm.quantization")
def quantization(inp: AdviceInput) -> Remedy | None:
    if inp.context.quantization:
        return None
    w = _weights(inp)
    return Remedy(
        id="vllm.quantization",
        title="Quantize the weights on the fly (fp8)",
        flags={"--quantization": "fp8"},
        saves_bytes=w // 2 if w else None,
        fits=None,
        confidence="low",
        why="fp8 weights take half the memory of bf16/fp16" + (f" ({format_size(w)} → {format_size(w // 2)})." if w else "."),
        tradeoff="Needs an fp8-capable GPU (compute capability ≥ 8.9 for fast kernels); small quality loss.",
    )


@remedy("vllm.swap-space")
def swap_space(inp: AdviceInput) -> Remedy | None:
    return Remedy(
        id="vllm.swap-space",
        title="Reserve less CPU swap space per GPU",
        flags={"--swap-space": "1"},
        fits=None,
        confidence="low",
        why="Each worker pins --swap-space GiB of host memory (default 4); on a small host this adds up.",
        tradeoff="Preempted sequences are recomputed instead of swapped (V0 engine).",
    )
