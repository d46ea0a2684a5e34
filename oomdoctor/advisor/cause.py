"""Name the cause of a failure from its memory account, kind, phase and engine.

The vocabulary is :data:`oomdoctor.advisor.prescription.CAUSES`; the words of each cause and the
remedies it calls for are data (``rules/advice/causes.toml``). This module only decides which cause
the account shows, and collects the evidence: the account entries the decision read.
"""

from __future__ import annotations

from typing import Any

import regex

from oomdoctor.advisor.account import Unaccounted, unaccounted
from oomdoctor.advisor.kv_pages import page_shortfall
from oomdoctor.advisor.prescription import summary
from oomdoctor.advisor.remedies_tgi import small_warmup_prefill
from oomdoctor.advisor.sglang_fit import weights_leave_no_room
from oomdoctor.advisor.siblings import sibling_bytes, sibling_pids
from oomdoctor.advisor.training_frames import frame_stage, shows_training_state
from oomdoctor.advisor.vllm_weights_budget import weights_over_budget
from oomdoctor.i18n import _, join_sentences
from oomdoctor.report import Account, Cause, Context, Finding
from oomdoctor.units import format_size

GiB = 2**30
#: memory held outside the process counts as the cause when it is at least this share of the GPU
OTHERS_SHARE = 0.25
#: "the GPU is full" when this process holds at least this share of it
FULL_SHARE = 0.8
#: CUDA graphs count as the cause of a KV-budget failure when their estimate is at least this share
GRAPHS_SHARE = 0.25
_TRAINING_TOOLS = ("transformers", "deepspeed", "accelerate", "lightning")
#: reserved-but-unallocated memory counts as fragmentation only from this share of the GPU up. The
#: caching allocator (c10/cuda/CUDACachingAllocator.cpp, PyTorch 1.x-2.x) frees every cached block it
#: can (release_cached_blocks) before it reports an OOM, so what stays "reserved but unallocated" is
#: the free tail of segments that still hold live blocks: 20 MiB small-pool segments and large
#: segments rounded to 2 MiB. A few percent of the card is that ordinary slack; defragmenting it
#: would let this request through and the next one fail, so on a full card the cause is capacity.
FRAGMENTATION_SHARE = 0.05
#: the caching allocator rounds a large-pool request up to a 20 MiB segment (kLargeBuffer): a cap
#: binds once what is held plus the request comes within this of it
SEGMENT_ROUNDING = 20 * 2**20
#: engines that pre-allocate a pool (the KV cache) to a share of the GPU and then run outside it
POOL_ENGINES = ("vllm", "sglang", "tgi", "tensorrt-llm")
#: an XLA allocation under this size fails because JAX's pre-allocated pool is full (75 % of the GPU by
#: default: jax 0.4 docs "GPU memory allocation", XLA_PYTHON_CLIENT_MEM_FRACTION), not because one
#: step's buffers are large: no batch worth tuning asks for less
XLA_SMALL_REQUEST = 512 * 2**20
#: no single device has more memory than this (MI355X: 288 GB): a larger request is not a tuning matter
LARGEST_DEVICE = 288 * GiB
#: one host allocation at least this large is more than most machines' whole RAM (workstations and
#: cloud GPU hosts below 8 GPUs commonly have 16-64 GiB per GPU): the request, not the host, is wrong
HOST_SINGLE_LARGE = 64 * GiB


def engine_for(finding: Finding, context: Context) -> str | None:
    """The tool that printed the log: the finding's engine when specific, else the context's."""
    eng = finding.engine
    if eng and eng not in ("pytorch", "python", "ggml", "xla", "host", "nccl"):
        return eng
    return context.engine or eng


def _evidence(account: Account, *names: str) -> list[str]:
    out = []
    for e in account.entries:
        if e.name in names:
            where = f", line {e.line}" if e.line is not None else ""
            size = format_size(e.bytes) if e.bytes is not None else f"{e.tokens} tokens"
            # (the weight tensor a request is names itself: it is the phase's evidence)
            named = f": {e.note}" if e.name == "weight-tensor" and e.note else ""
            out.append(f"{e.name} {size} ({e.source}{where}){named}")
    return out


def _allocation_kind(kind: str) -> bool:
    """A failure of one allocation (PyTorch's allocator, XLA's BFC, ggml's buffer), not an engine's budget check."""
    return kind.startswith(("torch.", "xla.", "ggml.", "trtllm.", "tgi.oom", "generic."))


def _pick(finding: Finding, context: Context, account: Account) -> tuple[str, list[str]]:
    """(cause id, names of the account entries that decided it)."""
    kind, phase, fig = finding.kind, finding.phase, finding.figures
    rule = finding.rule
    engine = engine_for(finding, context)
    a = account.get
    # -- host memory -------------------------------------------------------------------------
    if kind.startswith("host.shm") or "shm" in rule or "bus-error" in rule:
        return "shared-memory", []
    if kind.startswith(("host.", "ray.")) or kind == "ollama.system-memory-insufficient":
        text = f"{fig.get('constraint', '')} {fig.get('scope', '')} {fig.get('memcg', '')} {finding.message}"
        if "CONSTRAINT_MEMCG" in text or "cgroup" in text.lower() or kind == "host.exit-137" or "OOMKilled" in text:
            return "container-limit", ["rss", "limit"]
        if kind == "host.exit-137" or fig.get("exit_code") == 137 or fig.get("reason") or fig.get("status"):
            return "container-limit", ["rss", "limit"]
        return "host-ram", ["rss"]
    if context.extra.get("pinned_frame") and kind.startswith("torch."):
        return "host-ram", []  # DeepSpeed pinning host memory for CPU offload (the frame says so)
    if "pinned" in rule or fig.get("buffer_type") == "CPU" or _host_allocator(finding):
        return "host-ram", ["request"]  # a host buffer (pinned memory, llama.cpp's CPU buffer, PyTorch's CPU allocator)
    # -- llama.cpp retried the compute buffers with one copy instead of pipeline parallelism's ------
    if kind.startswith("ggml.") and finding.severity == "warning" and context.extra.get("oom_retried") \
            and ggml_compute_buffer(finding):
        return "pipeline-parallel-fallback", ["request"]
    # -- RL colocation: training and a rollout engine take turns on one GPU -----------------------
    if context.extra.get("colocation_frame"):
        return "colocation", ["capacity", "this-process", "free", "request"]
    # -- one allocation no GPU could hold ------------------------------------------------------
    free, req = a("free"), a("request")
    capacity = a("capacity")
    if rule == "ipex.xpu-allocation-size-cap":
        # IPEX refuses any block over 4 GB on a device without 2D block arrays, before it looks at
        # free memory: the platform's limit, not the memory's
        return "driver-fault", ["request", "capacity"]
    if driver_api_oom(finding):
        # c10's driver-API check ("CUDA driver error: out of memory"): in the caching allocator, the
        # expandable segments' virtual-memory calls (remedies_vmm.py), not a lack of memory as such
        return "driver-fault", []
    if tf_bogus_pool(finding, context, req):
        # TensorFlow's allocator reserves its pool from the memory the device reports (other-037:
        # 127.99 TiB, then a tenth less at each failure): no tensor is that large, the driver
        # reported a bogus size (ROCm on an unsupported card, a broken device binding)
        return "driver-fault", ["request"]
    if req is not None and _allocation_kind(kind) and (
        (capacity is not None and req > capacity) or req > LARGEST_DEVICE
    ):
        return "oversized-request", ["request", "capacity"]
    # -- caps ----------------------------------------------------------------------------------
    allowed = fig.get("allowed_bytes")
    if allowed is not None and capacity is not None and allowed >= capacity:
        allowed = None  # a fraction of 1.0: the cap is the whole GPU and binds nothing of its own
    if allowed is not None:
        held = a("this-process") if a("this-process") is not None else a("reserved")
        binds = held is None or req is None or held + req + SEGMENT_ROUNDING > allowed
        # PyTorch prints "allowed" only when a per-process fraction is set: with the GPU's own free
        # memory enough for the request, the fraction is what refused it
        if binds or free is None or req is None or free >= req:
            return "memory-cap", ["cap", "this-process", "request", "free"]
    if fig.get("max_allowed_bytes") is not None:
        # MPS's "max allowed" is the allocator's high watermark, by default a multiple of the
        # machine's recommended working set: the device's limit, not a cap the user chose
        # The message names no holder: MPS allocated near the limit outside training is read as the
        # weights (the usual case on a Mac), and unless the log shows them loading the summary says
        # that this is the reading, not what the message shows (review D row 22)
        if phase != "training" and _mps_full(finding):
            return "weights-exceed-device", ["allocated", "cap", "request"]
        return "activation-peak", ["allocated", "cap", "request"]
    # -- the memory is there, the allocation failed --------------------------------------------
    if kind.startswith("torch.") and _memory_was_free(free, req, capacity):
        # the driver's own free figure covers the request after the allocator released its cache:
        # neither capacity nor fragmentation (ROCm/XPU limits, unified-memory APUs, WSL2, drivers)
        return "driver-fault", ["free", "request", "capacity"]
    # -- other processes -----------------------------------------------------------------------
    others = a("other-processes")
    outside_held = a("outside-pytorch")
    if context.extra.get("rl_framework") and kind.startswith("torch.") and capacity and any(
        h is not None and h >= OTHERS_SHARE * capacity for h in (others, outside_held)
    ):
        # an RL trainer whose rollout engine shares the GPU: the memory outside the trainer's
        # allocator is the colocated engine's, not a stranger's
        return "colocation", ["capacity", "other-processes", "outside-pytorch", "this-process", "free", "request"]
    siblings = sibling_pids(finding, context)
    if siblings and capacity and sibling_bytes(finding, siblings) >= OTHERS_SHARE * capacity:
        # the "other processes" are this job's own ranks (PIDs spawned together): every rank was
        # placed on one GPU, a device mapping to fix, not processes to stop
        return "placement", ["capacity", "other-processes", "free", "request"]
    if others is not None and capacity and others >= OTHERS_SHARE * capacity:
        return "other-processes", ["capacity", "other-processes", "this-process", "free", "request"]
    outside = a("outside-pytorch")
    if outside is not None and capacity and outside >= OTHERS_SHARE * capacity and outside >= 2 * GiB:
        return "other-processes", ["capacity", "outside-pytorch", "free", "request"]
    startup = kind == "vllm.startup.free-memory-below-target"
    if startup and fig.get("external_weights_bytes") is None:
        return "other-processes", ["capacity", "other-processes", "free", "request"]
    if rule in ("sglang.memory-unbalanced", "vllm.startup.memory-profiling-error", "vllm.v1.profiling.free-memory-grew"):
        return "other-processes", []
    # -- engine budgets ------------------------------------------------------------------------
    if rule == "tgi.prefill-tokens" and small_warmup_prefill(fig):
        # TGI's warm-up failed below the launcher's default prefill budget: the weights fill the GPU
        return "weights-exceed-device", ["capacity", "weights", "cap"]
    if kind == "vllm.weights.not-enough-memory" or rule == "sglang.weights-leave-no-kv" or startup:
        return "weights-exceed-device", ["capacity", "weights", "cap"]
    if kind == "vllm.kv-cache.max-len-exceeds":
        return "kv-cache-too-small", ["kv-needed", "kv-available", "kv-tokens", "max-len-tokens"]
    if rule in ("sglang.not-enough-memory", "sglang.profiled-tokens-negative") and weights_leave_no_room(context):
        # the weights leave less than SGLang's own reserve and a minimal pool (sglang_fit)
        return "weights-exceed-device", ["capacity", "weights", "cap"]
    if kind == "vllm.kv-cache.no-blocks" or rule in ("sglang.not-enough-memory", "sglang.profiled-tokens-negative"):
        graphs = a("cudagraphs")
        if (graphs is not None and capacity is None and graphs >= 16 * GiB) or (
            graphs is not None and capacity and graphs >= GRAPHS_SHARE * capacity
        ):
            return "cudagraph-capture", ["cudagraphs", "capacity"]
        return "kv-budget-exhausted", ["cap", "weights", "kv-cache", "cudagraphs", "activations"]
    if rule == "sglang.kv-pool-exhausted" and page_shortfall(fig, context) is not None:
        # the pool had the tokens asked for, but --page-size > 1 hands them out in whole pages
        return "kv-page-granularity", ["kv-tokens", "request-tokens"]
    if rule in ("llama.server-kv-cache-full", "llama.server-kv-cache-retry"):
        # llama.cpp's server: a request's tokens found no free cell in the KV cache (n_ctx, shared by
        # the -np slots), even one at a time: the cache is too small for the request
        return "kv-cache-too-small", ["kv-cache"]
    if kind == "vllm.kv-cache.preemption":
        # V0's scheduler found no free KV block for a running sequence and preempted it: the cache
        # is too small for the load (a warning, throughput only: core/scheduler.py _preempt)
        return "kv-budget-exhausted", ["kv-cache"]
    if rule in ("sglang.kv-pool-exhausted", "sglang.req-slots-exhausted", "sglang.kv-pool-retract"):
        return "kv-budget-exhausted", ["kv-cache"]
    if phase == "cudagraph-capture" or "cuda-graph" in rule or "cudagraph" in rule:
        return "cudagraph-capture", ["cudagraphs", "free", "request"]
    if "sampler" in rule:
        return "sampler-warmup", ["free", "request"]
    if phase == "kv-cache-alloc" and kind.startswith("torch.") and engine in ("vllm", "sglang") and capacity is None:
        # the engine sized the KV cache to fit its budget after profiling; the allocation failing
        # means the budget counted on memory that something outside its profile holds
        return "other-processes", ["capacity", "other-processes", "free", "request"]
    # -- allocator -----------------------------------------------------------------------------
    spare = a("fragmentation")
    if spare is not None and req is not None and spare >= req and (
        (capacity is not None and spare >= FRAGMENTATION_SHARE * capacity) or (capacity is None and spare >= GiB)
    ):
        return "fragmentation", ["fragmentation", "request", "capacity"]
    # -- a buffer after the weights filled the card (llama.cpp's compute or KV buffer) -----------
    weights = a("weights")
    if (
        kind.startswith("ggml.") and phase != "weights-load" and weights is not None and capacity
        and weights >= FULL_SHARE * capacity
    ):
        return "weights-exceed-device", ["capacity", "weights", "request"]
    # -- the KV cache itself ------------------------------------------------------------------
    if phase == "kv-cache-alloc" and (
        rule == "llama.kv-cache-failed"
        or (kind.startswith("ggml.") and "kv cache" in finding.message.lower())
        or kind.startswith("vllm-rs.")
        or (kind.startswith("torch.") and engine in ("vllm", "sglang"))
    ):
        # the failing allocation is the cache (sized from the budget, or from n_ctx), not an activation
        return "kv-cache-exceeds-free", ["capacity", "this-process", "free", "request", "kv-cache"]
    if kind.startswith("trtllm.") and "kv cache" in str(fig.get("component") or "").lower():
        # TensorRT-LLM names the executor component it could not create: the KV cache pool
        return "kv-cache-exceeds-free", ["capacity", "free"]
    # -- what was running ----------------------------------------------------------------------
    if kind.startswith("torch.") and (context.extra.get("ds_placement_frame") or context.extra.get("module_to_frame")) and not shows_training_state(context.extra):
        # DeepSpeed moving (or broadcasting) the whole model to each rank at start-up, or
        # nn.Module.to() moving it: the model placed whole, before any batch or optimizer state exists
        return "placement", ["capacity", "request", "free"]
    if optimizer_step_frame(finding, context) and req is None:
        # a CUDA runtime call failing in the optimizer step, not the caching allocator: optimizer
        # states are tensors the allocator would have refused with a size ("Tried to allocate"); a
        # bare runtime OOM there is pinned host buffers (CPU offload), NCCL or a kernel's resources
        return "driver-fault", []
    if kind.startswith("torch.") and shows_training_state(context.extra):
        # the traceback is in a ZeRO optimizer or the optimizer step: training state, not activations
        return "training-state", []
    if phase == "weights-load":
        # ExLlamaV2 splits the layers over every GPU itself (auto-split, gpu_split): what does not
        # fit is the weights (and cache) on all of them, not a placement to change
        if engine in ("vllm", "sglang", "llama.cpp", "ollama", "exllamav2") or kind.startswith(
            ("ggml.", "vllm.", "sglang.", "exllamav2.")
        ):
            return "weights-exceed-device", ["capacity", "weights", "request", "free"]
        return "placement", ["capacity", "request", "free"]
    if (
        engine in POOL_ENGINES and kind.startswith("torch.") and weights is not None and capacity
        and weights >= capacity
    ):
        # the model the log names is larger than the GPU before any KV cache or activation
        return "weights-exceed-device", ["capacity", "weights", "request"]
    if (
        engine in POOL_ENGINES
        and (
            (phase in ("inference", "unknown") and "warmup" not in finding.message.lower())
            # vLLM's warm-up (compile_or_warm_up_model) runs after its pool was sized
            or (phase == "warmup" and engine == "vllm" and "warmup" not in finding.message.lower())
            # vLLM's DeepGEMM kernel warm-up named by its frame, whatever phase the excerpt shows
            or context.extra.get("deep_gemm_frame")
        )
        and kind.startswith(("torch.", "tgi.oom", "trtllm."))
    ):
        # a serving engine pre-allocated its pool (KV cache) to a share of the GPU; an allocation
        # outside the pool (an activation, a sampler or compile buffer; vLLM's kernel warm-up,
        # compile_or_warm_up_model, which runs after the pool was sized, unlike TGI's warmup(),
        # which sizes the pool from what its prefill left) found too little left
        return "engine-headroom", ["capacity", "this-process", "cap", "free", "request"]
    if (
        kind.startswith("xla.") and engine in ("jax", "xla") and req is not None and req < XLA_SMALL_REQUEST
        and not fig.get("tensor_shape")
    ):
        # JAX serves every buffer from the pool it pre-allocated at start-up: a request this small
        # failing means the pool is full or was cut short, not that this step's buffers are large
        return "memory-cap", ["request"]
    if kind.startswith("xla.") and _tf_initializer(finding.message):
        # TensorFlow failed creating a variable (its initializer op), before any step ran: no batch's
        # activations exist yet, so the GPU was nearly full before this program's first step
        return "other-processes", ["request"]
    if bare_runtime_oom(finding, context):
        # c10's runtime check with no size: a CUDA call outside the caching allocator (which raises
        # OutOfMemoryError with "Tried to allocate"): the log does not show that a batch's activations failed
        return "unknown", []
    if phase == "training" or engine in _TRAINING_TOOLS:
        if fig.get("zero_stage") is not None or context.extra.get("zero_stage") is not None:
            return "training-state", []
        return "activation-peak", ["this-process", "capacity", "request"]
    if kind.startswith("torch.") and req is None and _context_init(finding.message):
        # the CUDA context itself could not be created: the GPU was full before this program allocated
        return "other-processes", []
    if kind.startswith("torch.") and req is None and "THCStorage" in finding.message:
        return "activation-peak", []  # (Lua)Torch/PyTorch < 0.4 allocating a tensor's storage
    if req is not None or phase in ("inference", "warmup", "profiling") or fig.get("tensor_shape"):
        # (a TensorFlow OOM names the tensor it was allocating: an op's output, an activation)
        return "activation-peak", ["this-process", "allocated", "capacity", "request", "free"]
    return "unknown", []


#: where old (Lua)Torch and PyTorch < 1.0 create the CUDA context and its first buffers: cutorch's
#: init.c (cutorch_getState, THCudaInit) and THC's THCGeneral (THCudaInit / THCState setup)
_CONTEXT_INIT = regex.compile(r"\bfile=\S*(?:cutorch/init\.c|THCGeneral\.cp*)\b|\bat \S*THCGeneral\.cp*:\d+")


#: a TensorFlow graph node that initializes a variable (or an optimizer's slot variable): TF 1.x
#: names it in the OOM message's node line, ``[[Node: embeddings/Adam/Initializer/zeros = ...]]`` or
#: ``[[{{node dense/kernel/Initializer/random_uniform}}]]`` (tf.Variable's initial_value op is
#: created under the ``Initializer`` name scope: tensorflow/python/ops/variables.py, 1.x)
_TF_INITIALIZER = regex.compile(r"\[\[(?:Node: |\{\{node )([\w./-]*/Initializer/[\w./-]*)")


def _mps_full(finding: Finding) -> bool:
    """MPS's own allocations fill most of its limit ("max allowed", the high watermark)."""
    mps, limit = finding.figures.get("mps_allocated_bytes"), finding.figures.get("max_allowed_bytes")
    return isinstance(mps, int) and isinstance(limit, int) and mps >= FULL_SHARE * limit


def _mps_unshown(finding: Finding) -> dict[str, int | None]:
    """An MPS failure near the limit whose log shows no phase: what holds the memory is not shown."""
    fig = finding.figures
    if finding.phase in ("training", "weights-load") or not _mps_full(finding):
        return {"mps_held": None, "mps_other": None, "mps_limit": None}
    return {"mps_held": fig["mps_allocated_bytes"], "mps_other": fig.get("other_allocations_bytes"),
            "mps_limit": fig["max_allowed_bytes"]}


def _ray_monitor(finding: Finding) -> dict[str, str | None]:
    """Ray's memory monitor killed the workers (its raylet lines): the threshold it printed, else an
    empty string for the summary that names the default."""
    if not (finding.rule.startswith("ray.") and finding.kind == "host.oom-killed"):
        return {"ray_threshold": None, "ray_monitor": None}
    thr = finding.figures.get("memory_usage_threshold")
    if isinstance(thr, (int, float)):
        return {"ray_threshold": f"{thr:g}", "ray_monitor": None}
    return {"ray_threshold": None, "ray_monitor": ""}


def driver_api_oom(finding: Finding) -> bool:
    """c10's driver-API check failed ("CUDA driver error: out of memory", torch 2.1 on): in the caching
    allocator that is the expandable segments' virtual-memory path (remedies_vmm.py)."""
    return finding.rule == "torch.cuda-runtime-oom" and finding.figures.get("api") == "driver"


#: the unnamed programs (plain PyTorch) whose bare runtime OOM is read as a call outside the allocator
_UNNAMED_PRODUCTS = (None, "pytorch")


def bare_runtime_oom(finding: Finding, context: Context) -> bool:
    """c10's "CUDA error: out of memory" (C10_CUDA_CHECK on a runtime call: torch c10/cuda/CUDAException.h)
    in a program the log does not name, with no size: the caching allocator would have raised
    OutOfMemoryError with "Tried to allocate N", so the call that failed is outside it (creating the
    context, a cuBLAS/cuDNN workspace, a kernel, host-pinned memory) or the GPU is held by another
    process. Not THC's storage allocation ("at .../THCStorage.cu": a tensor's storage), the context's
    creation (named apart), the driver-API check or a failing frame that names the step."""
    if finding.rule != "torch.cuda-runtime-oom" or finding.product not in _UNNAMED_PRODUCTS:
        return False
    if context.engine not in (None, "pytorch", "python") or context.product not in _UNNAMED_PRODUCTS:
        return False
    fig, message = finding.figures, finding.message
    if fig.get("requested_bytes") is not None or fig.get("api") == "driver":
        return False
    return "THCStorage" not in message and not _context_init(message) and not optimizer_step_frame(finding, context)


def optimizer_step_frame(finding: Finding, context: Context) -> str | None:
    """The optimizer-step frame of a bare CUDA runtime OOM (no size: not the caching allocator)."""
    return context.extra.get("optimizer_frame") if finding.rule == "torch.cuda-runtime-oom" else None


def ggml_compute_buffer(finding: Finding) -> bool:
    """The failing ggml allocation is a compute buffer (ggml_gallocr_reserve_n reserving the graph,
    "failed to allocate compute buffers"), not the KV cache or the weights, whichever step ran it."""
    text = finding.message.lower()
    return "kv cache" not in text and ("gallocr" in text or "compute" in text or "graph_reserve" in text)


def ggml_kv_update(finding: Finding) -> bool:
    """The failing ggml compute buffer is the KV cache's update graph (K-shift or defragmentation):
    llama_kv_cache_update_impl's "failed to allocate compute buffers" (b4xxx), llama_kv_self_update,
    or "failed to allocate compute graph for K-shift" (src/llama-kv-cache.cpp, b5640 to b7698 as bundled in
    node-llama-cpp 3.10.0 to 3.15.0)."""
    text = finding.message.lower()
    return "kv_cache_update" in text or "kv_self_update" in text or "for k-shift" in text


#: from this many tokens a context is "long": llama.cpp's full training context of a modern model
#: (32768 and up), against the 4096 tokens its -c defaulted to up to b7347
LONG_CTX = 32768


def ggml_fa_on(context: Context) -> bool:
    """The log shows flash attention on (``flash_attn = 1``/``true``, or ``auto`` resolved to enabled)."""
    return str(context.extra.get("llama_flash_attn") or "").lower() in ("1", "true", "on", "enabled", "yes")


def ggml_fa_off(context: Context) -> bool:
    """The log shows flash attention off (``flash_attn = 0``/``false``/``disabled``, or ``auto``
    resolved to disabled); unknown (no line, ``auto`` unresolved) is neither on nor off."""
    return str(context.extra.get("llama_flash_attn") or "").lower() in ("0", "false", "off", "disabled", "no")


def ggml_ctx_is_train(context: Context) -> int | None:
    """n_ctx when it equals the model's training context (print_info's ``n_ctx_train``) and is long
    (LONG_CTX and up): what llama.cpp creates for ``-c 0`` / ``n_ctx=0`` in any build
    (src/llama-context.cpp), and when -c is not given in builds from b7698 (common/common.h
    ``n_ctx = 0; // context size, 0 == context the model was trained with``; still ``4096`` at
    b7347: the releases bundled in node-llama-cpp 3.15.0 and 3.14.5)."""
    n_ctx, train = context.max_model_len, context.extra.get("llama_n_ctx_train")
    return n_ctx if isinstance(n_ctx, int) and n_ctx == train and n_ctx >= LONG_CTX else None


def _ggml_attention(finding: Finding, context: Context, req: int | None) -> dict[str, Any]:
    """llama.cpp's compute buffer that failed (not ollama's, whose context is num_ctx): without
    flash attention it holds the attention scores of n_ctx × n_ubatch per head, so it grows with the
    context (``attn_buffer``, ``attn_ctx``); the context, when it is the model's whole training
    context (``train_ctx``)."""
    engine = engine_for(finding, context)
    none = {"attn_buffer": None, "attn_ctx": None, "train_ctx": None, "attn_ubatch": None, "kv_shift": None}
    if engine not in ("llama.cpp", "ggml") or not ggml_compute_buffer(finding) or req is None \
            or finding.phase == "weights-load":
        return none
    if ggml_kv_update(finding):
        return {**none, "kv_shift": req}
    fa = ggml_fa_on(context)
    return {
        "kv_shift": None,
        "attn_buffer": None if fa else req,
        "attn_ctx": None if fa else context.max_model_len,
        "attn_ubatch": context.extra.get("llama_n_ubatch"),
        "train_ctx": ggml_ctx_is_train(context),
    }


def _tf_initializer(message: str) -> str | None:
    m = _TF_INITIALIZER.search(message)
    return m.group(1) if m else None


def _context_init(message: str) -> str | None:
    m = _CONTEXT_INIT.search(message)
    return m.group(0) if m else None


def _memory_was_free(free: int | None, req: int | None, capacity: int | None) -> bool:
    """The driver's free memory covers the request with room to spare: beyond the allocator's
    rounding and the driver's own reservations (at least 1 GiB more), or with a quarter of the
    card still free besides (a single-allocation limit on an otherwise idle device)."""
    if free is None or req is None or free < req:
        return False
    return free - req >= GiB or (capacity is not None and free >= OTHERS_SHARE * capacity)


def _left_tokens(fig: dict[str, Any], *, short: bool) -> Any:
    """SGLang's "Available tokens" when it was short of the request (``short``), or when it counted
    enough (free plus evictable) and still could not hand them out (not ``short``); else None."""
    want, left = fig.get("requested_tokens"), fig.get("available_tokens")
    if not isinstance(left, int) or not isinstance(want, int):
        return left if short else None
    return left if (left < want) == short else None


def _host_oversize(finding: Finding) -> int | None:
    """The request of a host allocator when it alone is more than most machines' RAM."""
    req = finding.figures.get("requested_bytes")
    return req if isinstance(req, int) and req >= HOST_SINGLE_LARGE and _host_allocator(finding) else None


def _host_allocator(finding: Finding) -> bool:
    """A host allocator refused the request: host RAM, not GPU memory (PyTorch's CPU allocator;
    TensorFlow's ``cpu`` allocator or a ``/device:CPU:N`` placement)."""
    fig = finding.figures
    device = str(fig.get("device") or "")
    return (
        "DefaultCPUAllocator" in finding.message
        or "CPUAllocator" in finding.rule
        or str(fig.get("allocator") or "").lower() == "cpu"
        or "/device:CPU:" in device
    )


def _trtllm_instance_call(finding: Finding, context: Context) -> str | None:
    """The CUDA allocation call (``cudaMallocAsync``, as tllmBuffers.h makes it) that failed while
    Triton created the model instance (``modelInstanceState``), else None."""
    if finding.rule != "trtllm.cuda-runtime-oom" or "modelinstancestate" not in finding.message.lower():
        return None
    call = str(finding.figures.get("call") or "").lstrip(":")
    # cudaMalloc / cudaMallocAsync: the runtime's buffers (tllmBuffers.h), not an IPC or NCCL call
    return call if call.startswith("cudaMalloc") else None


def _values(finding: Finding, account: Account, context: Context) -> dict[str, Any]:
    a = account.get
    fig = finding.figures
    held = a("this-process")
    if held is None:
        held = a("reserved") if a("reserved") is not None else a("allocated")
    tokens = fig.get("kv_cache_tokens") or fig.get("estimated_max_model_len")
    spare, req, capacity = a("fragmentation"), a("request"), a("capacity")
    pages = page_shortfall(fig, context) if finding.rule == "sglang.kv-pool-exhausted" else None
    others, outside = a("other-processes"), a("outside-pytorch")
    return {
        "capacity": a("capacity"), "free": a("free"), "request": a("request"), "cap": a("cap"),
        # memory outside PyTorch's allocator that the process figures do not place in another process
        "outside": outside if outside is not None and not _held_elsewhere(others, capacity) else None,
        "pytorch_held": a("reserved"),
        "others": a("other-processes") if a("other-processes") is not None else a("outside-pytorch"),
        "held": held,
        "full_held": held if (held and capacity and FULL_SHARE * capacity <= held <= capacity) else None,
        # more held than the card has: the driver backs it with host memory (Windows' CUDA sysmem
        # fallback, unified memory), so the work needs that multiple of the card, not a smaller batch step
        "over_held": held if (held and capacity and held > capacity) else None,
        "over_times": f"{held / capacity:.1f}" if (held and capacity and held > capacity) else None,
        "oversize": req if (req and capacity and req > capacity) else None,
        "spare": spare if (spare is not None and req is not None and spare >= req) else None,
        "weights": a("weights"),
        "needed": a("kv-needed"), "available": a("kv-available"), "max_len": fig.get("max_seq_len"),
        "tokens": tokens, "graphs": a("cudagraphs"), "seqs": fig.get("num_dummy_requests"),
        "rss": a("rss"), "limit": a("limit"),
        "want_tokens": fig.get("requested_tokens"), "left_tokens": fig.get("available_tokens"),
        "short_tokens": _left_tokens(fig, short=True), "counted_tokens": _left_tokens(fig, short=False),
        "page": pages.page_size if pages else None, "page_worst": pages.worst if pages else None,
        "evictable_tokens": fig.get("evictable_tokens") if pages else None,
        **_retraction(finding),
        **_preemption(finding),
        "zero_stage": _zero_stage(fig, context),
        # DDP's reducer (its init frame): the request is its gradient buckets
        "ddp_buckets": req if context.extra.get("gradient_frame") else None,
        "pinned_frame": context.extra.get("pinned_frame"),
        "gpu_unused": context.extra.get("gpu_unused"),
        "runtime_step": optimizer_step_frame(finding, context),
        # (an empty string fills the template: the bare runtime OOM's summary needs no figure)
        "runtime_call": "" if bare_runtime_oom(finding, context) else None,
        # (an empty string fills the template: the driver-API summary needs no figure)
        "driver_api": "" if driver_api_oom(finding) else None,
        "host_oversize": _host_oversize(finding),
        # ggml-cuda's pinned host buffer: a warning of its own (it falls back to pageable memory)
        "pinned_host": req if finding.kind == "ggml.pinned-alloc-failed" else None,
        **_ray_monitor(finding),
        **_mps_unshown(finding),
        # colocation read from the account (not from the engine's wake-up frame): the engine's share
        "engine_held": (max(x for x in (others, outside) if x is not None)
                        if not context.extra.get("colocation_frame") and (others, outside) != (None, None) else None),
        "context_init": _context_init(finding.message) if req is None and finding.kind.startswith("torch.") else None,
        "tf_init": _tf_initializer(finding.message) if finding.kind.startswith("xla.") else None,
        # a JAX buffer the message sizes but does not shape: what it holds is not in the log
        "xla_buffer": req if (finding.kind.startswith("xla.") and engine_for(finding, context) in ("jax", "xla")
                              and not fig.get("tensor_shape")) else None,
        "xla_small": req if (finding.kind.startswith("xla.") and req is not None and req < XLA_SMALL_REQUEST) else None,
        "kv_alloc": req if finding.phase == "kv-cache-alloc" and finding.kind.startswith("torch.") else None,
        # TensorRT-LLM's executor failed creating the KV cache with this much free: its estimate was off
        "trtllm_kv_free": fig.get("free_bytes") if finding.rule == "trtllm.executor-insufficient-memory" else None,
        # a runtime buffer's allocation (tllmBuffers) while Triton created the model instance: which
        # buffer (KV pool, activations, weights) the log does not say
        "trtllm_buffer_call": _trtllm_instance_call(finding, context),
        "n_ctx": context.max_model_len if engine_for(finding, context) in ("llama.cpp", "ggml", "ollama") else None,
        **_ggml_attention(finding, context, req),
        # llama.cpp's pipeline parallelism: its copies, and the device whose buffer failed
        "pp_copies": context.extra.get("llama_n_copies"),
        "pp_device": fig.get("buffer_type") if finding.kind.startswith("ggml.") else None,
        # llama.cpp's server retried down to a batch of n_batch tokens and found no free KV cell
        "kv_full_batch": fig.get("n_batch") if finding.rule == "llama.server-kv-cache-full" else None,
        **_sibling_values(finding, context),
        "bogus_pool": req if tf_bogus_pool(finding, context, req) else None,
        "platform_cap": req if finding.rule == "ipex.xpu-allocation-size-cap" else None,
        **_building_values(finding, context),
    }  # fmt: skip


def _building_values(finding: Finding, context: Context) -> dict[str, Any]:
    """vLLM building its model past its budget (vllm_weights_budget.py): the model built so far, the
    budget and by how much they exceed it."""
    over = weights_over_budget(finding, context)
    if over is None:
        return {"built": None, "budget": None, "budget_util": None, "budget_total": None, "over": None}
    return {"built": over.built, "budget": over.budget, "budget_util": f"{over.utilization:.2f}",
            "budget_total": over.total, "over": over.over}


def _retraction(finding: Finding) -> dict[str, Any]:
    """SGLang's retraction warning: requests retracted and new_token_ratio before and after."""
    fig = finding.figures
    if finding.rule != "sglang.kv-pool-retract":
        return {"retracted": None, "ratio_before": None, "ratio_after": None}
    ratio = (fig.get("new_token_ratio_before"), fig.get("new_token_ratio"))
    return {
        "retracted": fig.get("retracted_requests"),
        "ratio_before": f"{ratio[0]:.2f}" if isinstance(ratio[0], float) else None,
        "ratio_after": f"{ratio[1]:.2f}" if isinstance(ratio[1], float) else None,
    }


def _preemption(finding: Finding) -> dict[str, Any]:
    """vLLM V0's preemption warning: the cumulative count and the mode (RECOMPUTE or SWAP)."""
    if finding.kind != "vllm.kv-cache.preemption":
        return {"vllm_preempted": None, "preemptions": None, "preemption_mode": None}
    fig = finding.figures
    mode = fig.get("preemption_mode")
    return {"vllm_preempted": "", "preemptions": fig.get("preemptions"),
            "preemption_mode": str(mode).lower() if mode else None}


def tf_bogus_pool(finding: Finding, context: Context, req: int | None) -> bool:
    """TensorFlow's allocator reserving a pool larger than any GPU from what the device reported."""
    return (finding.rule == "xla.stream-executor-alloc-failed" and engine_for(finding, context) == "tensorflow"
            and req is not None and req > LARGEST_DEVICE)


def _sibling_values(finding: Finding, context: Context) -> dict[str, Any]:
    """The sibling ranks' count, PIDs and memory on the failing GPU (siblings.py), when there are any."""
    pids = sibling_pids(finding, context)
    if not pids:
        return {"sibling_count": None, "sibling_pids": None, "sibling_held": None, "gpu": None}
    return {
        "sibling_count": len(pids), "sibling_pids": f"{pids[0]}–{pids[-1]}",
        "sibling_held": sibling_bytes(finding, pids), "gpu": finding.figures.get("gpu_index"),
    }


def _held_elsewhere(others: int | None, capacity: int | None) -> bool:
    """The account places a share of the GPU that counts as the cause in other processes."""
    return others is not None and capacity is not None and others >= OTHERS_SHARE * capacity


def _zero_stage(fig: dict[str, Any], context: Context) -> str | None:
    stage = fig.get("zero_stage")
    if stage is None:
        stage = context.extra.get("zero_stage")
    return str(stage) if stage is not None else frame_stage(context.extra)


#: causes whose own summary already places the memory held outside this process's allocator
_NAMES_OUTSIDE = ("other-processes", "colocation", "placement")


def pytorch_allocator_oom(finding: Finding) -> bool:
    """A PyTorch caching-allocator OOM: its kind, or a fragment of its message with no "CUDA out of
    memory" words (generic.oom) that still has the allocator's own "reserved ... by PyTorch" figure."""
    if finding.kind.startswith(("torch.cuda", "torch.hip")):
        return True
    fig = finding.figures
    return finding.kind == "generic.oom" and ("reserved_bytes" in fig or "reserved_unallocated_bytes" in fig)


def outside_allocator(finding: Finding, cause_id: str | None) -> Unaccounted | None:
    """A PyTorch OOM whose figures leave a large share of the card outside PyTorch's allocator
    (:func:`~oomdoctor.advisor.account.unaccounted`), where the cause does not already say so."""
    if cause_id in _NAMES_OUTSIDE or not pytorch_allocator_oom(finding):
        return None
    return unaccounted(finding.figures)


def _outside_words(gap: Unaccounted, finding: Finding) -> str:
    """The memory outside PyTorch's allocator in words: how much, who holds it as far as the message
    says, and to look before cutting a budget."""
    fig = finding.figures
    total, free = format_size(int(fig["total_bytes"])), format_size(int(fig["free_bytes"]))
    held = format_size(int(fig["total_bytes"]) - int(fig["free_bytes"]) - gap.gap)
    if gap.own is not None:
        where = [_("{own} by this process itself (NCCL, cuBLAS or CUDA-graph buffers, another library's pool, "
                   "its CUDA context)").format(own=format_size(gap.own))]
        if gap.others:
            where.append(_("{others} by the other processes the message lists").format(others=format_size(gap.others)))
        rest = gap.gap - gap.own - (gap.others or 0)
        if rest >= 2**30:
            where.append(_("{rest} by processes the message does not list").format(rest=format_size(rest)))
        place = _("; ").join(where)
    else:
        place = _("by this process (NCCL, cuBLAS or CUDA-graph buffers, another library's pool, its CUDA context) "
                  "or by another process: the message does not say which")
    out = [_("{gap} of the GPU is held outside PyTorch's allocator ({total} − {free} free − {held} reserved by "
             "PyTorch): {place}.").format(gap=format_size(gap.gap), total=total, free=free, held=held, place=place)]
    if gap.hidden:
        out.append(_("The message's own figure for this process ({in_use} in use) is not a fact: inside a container "
                     "NVML cannot see the process.").format(in_use=format_size(int(fig.get("in_use_bytes") or 0))))
    out.append(_("Look at it with {tool} before cutting a budget or a batch.").format(
        tool="rocm-smi" if finding.kind.startswith("torch.hip") else "nvidia-smi"))
    return join_sentences(out)


#: causes whose summary states a larger gap of its own (the weights above a budget, above the card):
#: the failing request's few MiB short would read as the whole problem
_GAP_OF_ITS_OWN = frozenset({"weights-exceed-device"})


def _shortfall_words(finding: Finding, account: Account, text: str, cause_id: str) -> str | None:
    """A PyTorch OOM's gap in words, "896.00 MiB requested with 759.38 MiB free: 137.00 MiB short", where
    the message gives both figures, something was free (else the request is the gap), the summary
    does not already state the free figure and the cause has no larger gap of its own."""
    if not pytorch_allocator_oom(finding) or cause_id in _GAP_OF_ITS_OWN:
        return None
    a = account.get
    req, free, short = a("request"), a("free"), a("shortfall")
    if req is None or not free or not short or format_size(free) in text:
        return None
    return _("{request} requested with {free} free: {short} short.").format(
        request=format_size(req), free=format_size(free), short=format_size(short))


def name_cause(finding: Finding, context: Context, account: Account) -> Cause:
    """The cause of ``finding``, its summary in words (with the account's numbers) and its evidence;
    a large share of the card outside PyTorch's allocator is named after the cause's own words."""
    cause_id, names = _pick(finding, context, account)
    text = summary(cause_id, _values(finding, account, context))
    short = _shortfall_words(finding, account, text, cause_id)
    if short:
        text = join_sentences([text, short])
    gap = outside_allocator(finding, cause_id)
    if gap is not None:
        text = join_sentences([text, _outside_words(gap, finding)])
    return Cause(id=cause_id, summary=text, evidence=_evidence(account, *names, "weight-tensor"))
