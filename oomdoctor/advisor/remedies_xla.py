"""JAX/XLA and TensorFlow remedies: JAX's allocator environment variables (documented in JAX's
"GPU memory allocation" notes) and TensorFlow's memory growth (TF_FORCE_GPU_ALLOW_GROWTH)."""

from __future__ import annotations

from oomdoctor.advisor._engine_util import as_float, engine_of, setting
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.report import Remedy

#: JAX preallocates this share of GPU memory by default (jax docs/gpu_memory_allocation.rst, from
#: jaxlib 0.4.14: commit 2432aa97a9 of 2023-07-13 "Change default memory allocation to 75% instead of 90%")
JAX_DEFAULT_FRACTION = 0.75
#: the default before that, from the first GPU memory docs (2019-07-29: "90% of currently-available
#: GPU memory"; of the total GPU memory from jaxlib 0.4.1)
JAX_OLD_DEFAULT_FRACTION = 0.9
#: first jaxlib whose default is JAX_DEFAULT_FRACTION
JAX_FRACTION_CHANGED = (0, 4, 14)


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = []
    for p in text.split(".")[:3]:
        if not p.isdigit():
            break
        parts.append(int(p))
    return tuple(parts) if parts else None


def jax_default_fraction(inp: AdviceInput) -> tuple[float, bool]:
    """JAX's default preallocated share for the jaxlib that wrote the log, and whether the log dates
    that jaxlib as an early one: a jaxlib version it states, else the wording of jaxlib's first XLA
    client (local_client.cc, 2019), else today's default."""
    extra = inp.context.extra
    version = _version_tuple(str(extra.get("jaxlib_version") or ""))
    if version is not None:
        return (JAX_DEFAULT_FRACTION, False) if version >= JAX_FRACTION_CHANGED else (JAX_OLD_DEFAULT_FRACTION, False)
    if extra.get("jaxlib_local_client"):
        return JAX_OLD_DEFAULT_FRACTION, True
    return JAX_DEFAULT_FRACTION, False
#: highest fraction recommended (the CUDA context and cuDNN workspaces live outside it)
JAX_MAX_FRACTION = 0.95


def _is_jax(inp: AdviceInput) -> bool:
    return engine_of(inp) in ("jax", "xla")


@remedy("xla.mem-fraction")
def mem_fraction(inp: AdviceInput) -> Remedy | None:
    if not _is_jax(inp):
        return None
    default, early = jax_default_fraction(inp)
    stated = as_float(setting(inp, "xla_mem_fraction"))
    cur = stated or default
    if cur >= JAX_MAX_FRACTION:
        return None
    total = inp.context.gpu_total_bytes
    need = inp.fig("total_allocation_bytes")
    fits = (need <= JAX_MAX_FRACTION * total) if (need and total) else None
    return Remedy(
        id="xla.mem-fraction",
        title=remedy_text("xla.mem-fraction", "title", fraction=JAX_MAX_FRACTION),
        env={"XLA_PYTHON_CLIENT_MEM_FRACTION": f"{JAX_MAX_FRACTION:.2f}"},
        saves_bytes=int((JAX_MAX_FRACTION - cur) * total) if total else None,
        fits=fits,
        # an early jaxlib's default leaves 5 points: little to gain
        confidence="low" if early and not stated else "medium",
        why=remedy_text("xla.mem-fraction", "why_need", current=cur, need=need) if need
        else remedy_text("xla.mem-fraction", "why_early", current=cur, value=JAX_MAX_FRACTION) if early and not stated
        else remedy_text("xla.mem-fraction", "why", current=cur),
    )


#: the pool's share of the GPU with unified memory on: ColabFold 1.5.5's default (colabfold/batch.py
#: ENV, as AlphaFold's run_docker.py sets it): up to four times the GPU, the excess paged to host RAM
UNIFIED_FRACTION = 4.0
#: below this, a failing JAX request is its pool being full (cause memory-cap), not one large buffer
_LARGE_REQUEST = 512 * 2**20


@remedy("xla.unified-memory")
def unified_memory(inp: AdviceInput) -> Remedy | None:
    """One large buffer of a JAX computation: let XLA's pool grow past the GPU into unified memory
    (TF_FORCE_UNIFIED_MEMORY, read by jax-cuda12-pjrt 0.4.30's xla_cuda_plugin.so)."""
    if not _is_jax(inp) or inp.finding.kind.startswith("torch."):
        return None
    req = inp.fig("requested_bytes")
    if not req or req < _LARGE_REQUEST:
        return None
    if jax_default_fraction(inp)[1]:
        # jaxlib's first XLA client (2019): the variable is known read by the PJRT clients (the
        # plugin above), not by that one
        return None
    total = inp.context.gpu_total_bytes
    need = inp.fig("total_allocation_bytes") or req
    return Remedy(
        id="xla.unified-memory",
        title=remedy_text("xla.unified-memory", "title", fraction=UNIFIED_FRACTION),
        env={"TF_FORCE_UNIFIED_MEMORY": "1", "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{UNIFIED_FRACTION:.1f}"},
        fits=(need <= UNIFIED_FRACTION * total) if total else None,
        confidence="medium",
        # (the GPU's size is not in the log: whether the buffer exceeds what it could give is not known)
        why=remedy_text("xla.unified-memory", "why" if total else "why_unknown", request=req, fraction=UNIFIED_FRACTION),
    )


@remedy("xla.preallocate-false")
def preallocate_false(inp: AdviceInput) -> Remedy | None:
    if not _is_jax(inp) or str(setting(inp, "xla_preallocate")).lower() == "false":
        return None
    return Remedy(
        id="xla.preallocate-false",
        title=remedy_text("xla.preallocate-false", "title"),
        env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        fits=None,
        confidence="low",
        why=remedy_text("xla.preallocate-false", "why"),
    )


@remedy("xla.allocator-platform")
def allocator_platform(inp: AdviceInput) -> Remedy | None:
    if not _is_jax(inp):
        return None
    return Remedy(
        id="xla.allocator-platform",
        title=remedy_text("xla.allocator-platform", "title"),
        env={"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
        fits=None,
        confidence="low",
        why=remedy_text("xla.allocator-platform", "why"),
    )


@remedy("tf.memory-growth")
def memory_growth(inp: AdviceInput) -> Remedy | None:
    if engine_of(inp) != "tensorflow":
        return None
    # the pool TensorFlow tried to reserve from a bogus device size (cause driver-fault): growing on
    # demand never asks for it
    bogus = inp.finding.cause is not None and inp.finding.cause.id == "driver-fault"
    return Remedy(
        id="tf.memory-growth",
        title=remedy_text("tf.memory-growth", "title"),
        env={"TF_FORCE_GPU_ALLOW_GROWTH": "true"},
        settings={"tf.config.experimental.set_memory_growth(gpu, True)": remedy_text("tf.memory-growth", "setting")},
        fits=None,
        confidence="medium" if bogus else "low",
        why=remedy_text("tf.memory-growth", "why_bogus" if bogus else "why"),
    )


#: the least rank of a tensor whose leading dimension is read as the batch: a 2-D tensor is as
#: often a weight matrix (vocabulary × hidden, in × out) as a batch of vectors
BATCHED_RANK = 3


def _halve_unknown_batch(why: str) -> Remedy:
    """Halve whatever batch size the program uses: the log does not show its value."""
    return Remedy(
        id="xla.reduce-batch",
        title=remedy_text("xla.reduce-batch", "title_unknown"),
        settings={"batch_size": remedy_text("xla.reduce-batch", "setting")},
        fits=None,
        confidence="low",
        why=why,
    )


@remedy("xla.reduce-batch")
def reduce_batch(inp: AdviceInput) -> Remedy | None:
    shape = inp.fig("tensor_shape")
    if not shape or not isinstance(shape, list):
        req = inp.fig("requested_bytes")
        cause = inp.finding.cause
        if not _is_jax(inp) or not req or inp.finding.phase != "training" or cause is None \
                or cause.id != "activation-peak":
            return None
        # JAX names no shape ("Out of memory while trying to allocate N bytes") in a training step: the
        # step's buffers grow with the samples it processes, whatever the program calls them (batch, walkers)
        return _halve_unknown_batch(remedy_text("xla.reduce-batch", "why_request", request=req))
    elems = 1
    for d in shape:
        elems *= int(d)
    if len(shape) < BATCHED_RANK or shape[0] < 2:
        # the shape does not show the batch: halve whatever batch size the program uses
        return _halve_unknown_batch(remedy_text("xla.reduce-batch", "why_unknown", shape=shape, elements=f"{elems:,}"))
    value = shape[0] // 2
    return Remedy(
        id="xla.reduce-batch",
        title=remedy_text("xla.reduce-batch", "title", batch=value),
        settings={"batch_size": str(value)},
        fits=None,
        confidence="low",
        why=remedy_text("xla.reduce-batch", "why", shape=shape, elements=f"{elems:,}", leading=shape[0]),
    )


#: step taken off the fraction to leave the CUDA driver room for graphs
JAX_LOWER_STEP = 0.1


@remedy("xla.mem-fraction.lower")
def mem_fraction_lower(inp: AdviceInput) -> Remedy | None:
    cur = as_float(setting(inp, "xla_mem_fraction")) or JAX_DEFAULT_FRACTION
    value = round(cur - JAX_LOWER_STEP, 2)
    if value <= 0.1:
        return None
    return Remedy(
        id="xla.mem-fraction.lower",
        title=remedy_text("xla.mem-fraction.lower", "title", fraction=value),
        env={"XLA_PYTHON_CLIENT_MEM_FRACTION": f"{value:.2f}"},
        fits=None,
        confidence="medium",
        why=remedy_text("xla.mem-fraction.lower", "why", current=cur, step=JAX_LOWER_STEP, value=f"{value:.2f}"),
    )


@remedy("xla.disable-command-buffer")
def disable_command_buffer(inp: AdviceInput) -> Remedy | None:
    return Remedy(
        id="xla.disable-command-buffer",
        title=remedy_text("xla.disable-command-buffer", "title"),
        env={"XLA_FLAGS": "--xla_gpu_enable_command_buffer="},
        fits=True,
        confidence="medium",
        why=remedy_text("xla.disable-command-buffer", "why"),
    )
