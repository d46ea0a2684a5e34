"""Remedies that ask before they change anything: where the log cannot support a tuning value.

A failure whose cause is not a lack of memory (one allocation larger than any device, an
allocation refused while the driver reports the memory free) has no knob whose value the log
could compute. The expert's first answer there is the facts that decide it and how to get them;
these calculators word that, with the log's own figures.
"""

from __future__ import annotations

from oomdoctor.advisor._engine_util import engine_of
from oomdoctor.advisor.cause import bare_runtime_oom, driver_api_oom, optimizer_step_frame, tf_bogus_pool
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.run_steps import ROCM_SMI_VRAM
from oomdoctor.report import Remedy, RunStep

#: the driver, the device as the driver sees it, and the framework build: what decides a driver fault
_NVIDIA_FACTS = "nvidia-smi; python -c 'import torch; print(torch.__version__, torch.version.cuda)'"
_ROCM_FACTS = f"{ROCM_SMI_VRAM}; python -c 'import torch; print(torch.__version__, torch.version.hip)'"
_XPU_FACTS = "sycl-ls; python -c 'import torch; print(torch.__version__, torch.xpu.get_device_properties(0))'"


#: TensorFlow's own view of its devices and build (on ROCm, rocm-smi for the device)
_TF_BUILD = "python -c 'import tensorflow as tf; print(tf.__version__, tf.config.list_physical_devices(\"GPU\"))'"


def _facts_command(inp: AdviceInput) -> str:
    """The driver's and the framework's view, for the vendor and the framework the failure shows
    (a HIP error is ROCm's, whatever the framework: TensorFlow-ROCm's HIP_ERROR_OutOfMemory)."""
    kind = inp.finding.kind
    rocm = kind.startswith("torch.hip") or str(inp.fig("error") or "").startswith("HIP_")
    if engine_of(inp) == "tensorflow":
        return f"{ROCM_SMI_VRAM if rocm else 'nvidia-smi'}; {_TF_BUILD}"
    if rocm:
        return _ROCM_FACTS
    if kind.startswith("torch.xpu"):
        return _XPU_FACTS
    return _NVIDIA_FACTS


def _account_figures(inp: AdviceInput, cause_id: str, *names: str) -> tuple[int | None, ...] | None:
    """The account's entries ``names`` when the finding's cause is ``cause_id``, else None."""
    cause, acc = inp.finding.cause, inp.finding.account
    if cause is None or cause.id != cause_id:
        return None
    return tuple(acc.get(n) if acc else None for n in names)


@remedy("ask.driver-facts")
def driver_facts(inp: AdviceInput) -> Remedy | None:
    """The driver reported ``free`` ≥ ``request`` after the allocator released its cache."""
    figures = _account_figures(inp, "driver-fault", "free", "request", "capacity")
    if figures is None:
        return None
    free, req, total = figures
    api = driver_api_oom(inp.finding)
    step = not api and optimizer_step_frame(inp.finding, inp.context)
    tf = engine_of(inp) == "tensorflow"
    # TensorFlow reserving a pool from a device size no GPU has: the binding and the build
    bogus = tf_bogus_pool(inp.finding, inp.context, req)
    why = (
        remedy_text("ask.driver-facts", "why_bogus", request=req)
        if bogus
        else remedy_text("ask.driver-facts", "why_api")
        if api
        else remedy_text("ask.driver-facts", "why_step")
        if step
        else remedy_text("ask.driver-facts", "why_free", free=free, request=req, total=total)
        if free is not None and req is not None and total is not None
        else remedy_text("ask.driver-facts", "why")
    )
    return Remedy(
        id="ask.driver-facts",
        title=remedy_text("ask.driver-facts", "title_bogus" if bogus else "title_api" if api else "title_step" if step else "title"),
        run=[RunStep(label=remedy_text("ask.driver-facts", "step_tf" if tf else "step"),
                     command=_facts_command(inp))],
        confidence="low",
        why=why,
        sources={"free": "message", "requested": "message"},
    )


@remedy("ask.request-shape")
def request_shape(inp: AdviceInput) -> Remedy | None:
    """One allocation larger than the device (or than any device): the shape that sizes it is wrong."""
    figures = _account_figures(inp, "oversized-request", "request", "capacity")
    if figures is None:
        return None
    req, total = figures
    if req is None:
        return None
    why = (
        remedy_text("ask.request-shape", "why_capacity", request=req, total=total, times=f"{req / total:.1f}")
        if total
        else remedy_text("ask.request-shape", "why", request=req)
    )
    return Remedy(
        id="ask.request-shape",
        title=remedy_text("ask.request-shape", "title", request=req),
        confidence="high" if total else "medium",
        why=why,
        sources={"requested": "message", "capacity": "message" if total else "none"},
    )


#: rules and kinds of failures on devices nvidia-smi does not show (Apple GPUs, TPUs, Intel GPUs;
#: DirectML's adapter, which may be any vendor's, as a Vulkan device)
_NOT_NVIDIA_RULES = ("xla.tpu-", "ggml.metal-", "ggml.sycl-", "mlx.", "onnxruntime.dml-")
_NOT_NVIDIA_KINDS = ("torch.mps", "torch.xpu", "mlx.", "torch.directml", "openvino.")
#: ggml buffer types of backends that are not CUDA (a Vulkan device may be any vendor's)
_NOT_CUDA_BUFFERS = ("Metal", "SYCL", "Vulkan", "CPU", "CANN", "OpenCL")


def _device_tool(inp: AdviceInput) -> str | None:
    """The command that shows the failing device's memory: nvidia-smi, ROCm's for a HIP failure,
    none known for the others (an Apple GPU, a TPU, an Intel GPU, a Vulkan device)."""
    f = inp.finding
    if f.kind.startswith("torch.hip") or f.rule.startswith("torch.hip"):
        return ROCM_SMI_VRAM
    buffer = inp.fig("buffer_type")
    if (
        f.kind.startswith("host.")  # (host memory: the GPU's tool does not show it)
        or f.rule.startswith(_NOT_NVIDIA_RULES)
        or f.kind.startswith(_NOT_NVIDIA_KINDS)
        or (isinstance(buffer, str) and buffer.startswith(_NOT_CUDA_BUFFERS))
    ):
        return None
    return "nvidia-smi"


@remedy("ask.launch-facts")
def launch_facts(inp: AdviceInput) -> Remedy | None:
    """No remedy could be computed from the log: name the facts that would decide one, and how to
    get them (the launch command and its version, the GPU's memory as nvidia-smi sees it; on
    another device, its memory, with no command where none is known)."""
    tool = _device_tool(inp)
    if tool == "nvidia-smi":
        return Remedy(
            id="ask.launch-facts",
            title=remedy_text("ask.launch-facts", "title"),
            run=[RunStep(label=remedy_text("ask.launch-facts", "step"), command=tool)],
            confidence="low",
            why=remedy_text("ask.launch-facts", "why"),
        )
    return Remedy(
        id="ask.launch-facts",
        title=remedy_text("ask.launch-facts", "title_device"),
        run=[RunStep(label=remedy_text("ask.launch-facts", "step_device"), command=tool)] if tool else [],
        confidence="low",
        why=remedy_text("ask.launch-facts", "why_device"),
    )


#: what shows whether PyTorch was built for CUDA and sees the device
_GPU_VISIBLE_FACTS = "nvidia-smi; python -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())'"


@remedy("ask.gpu-visible")
def gpu_visible(inp: AdviceInput) -> Remedy | None:
    """A host-RAM failure in a program whose log says it runs without the GPU (host.gpu-unused)."""
    evidence = inp.context.extra.get("gpu_unused")
    cause = inp.finding.cause
    if not evidence or cause is None or cause.id != "host-ram":
        return None
    return Remedy(
        id="ask.gpu-visible",
        title=remedy_text("ask.gpu-visible", "title"),
        run=[RunStep(label=remedy_text("ask.gpu-visible", "step"), command=_GPU_VISIBLE_FACTS)],
        confidence="medium",
        why=remedy_text("ask.gpu-visible", "why", evidence=evidence),
        sources={"evidence": "log"},
    )


@remedy("ask.runtime-call")
def runtime_call(inp: AdviceInput) -> Remedy | None:
    """c10's bare "CUDA error: out of memory" in an unnamed program (cause.bare_runtime_oom): no size, no
    holder, and CUDA reports kernel errors asynchronously (the message's own hint), so the first step
    looks: nvidia-smi for what else holds the GPU, CUDA_LAUNCH_BLOCKING=1 (the variable the message
    names) for the call that really failed."""
    if not bare_runtime_oom(inp.finding, inp.context):
        return None
    return Remedy(
        id="ask.runtime-call",
        title=remedy_text("ask.runtime-call", "title"),
        env={"CUDA_LAUNCH_BLOCKING": "1"},
        run=[RunStep(label=remedy_text("ask.runtime-call", "step"), command="nvidia-smi")],
        confidence="low",
        why=remedy_text("ask.runtime-call", "why"),
    )


@remedy("ask.error-line")
def error_line(inp: AdviceInput) -> Remedy | None:
    """A stand-in finding (a worker failed while capturing CUDA graphs, its exception's line cut
    from the log): the line that names the exception decides between room for the graphs and
    another fault, so the first step keeps it."""
    if inp.finding.kind != "vllm.worker-error-during-capture":
        return None
    return Remedy(
        id="ask.error-line",
        title=remedy_text("ask.error-line", "title"),
        confidence="low",
        why=remedy_text("ask.error-line", "why"),
    )
