"""Host remedies: container/cgroup memory limits, low-memory weight loading, /dev/shm size, NCCL's
shared-memory transport, Ray's memory monitor. Values come from the kernel's own figures (anon-rss)."""

from __future__ import annotations

import math

import regex

from oomdoctor.advisor._engine_util import as_float, as_int, engine_of, product_of
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.remedies_vllm import SWAP_SPACE_DEFAULT, swap_space_flag_exists
from oomdoctor.report import Remedy
from oomdoctor.units import format_quantity

#: headroom on top of the resident size the kernel reported when the process was killed
HOST_LIMIT_HEADROOM = 1.25
#: /dev/shm size NVIDIA documents for its NGC containers (docker run --shm-size=1g)
SHM_SIZE = "1g"
#: Ray's default memory_usage_threshold
RAY_DEFAULT_THRESHOLD = 0.95
#: highest threshold recommended (above it the kernel OOM killer may strike first)
RAY_MAX_THRESHOLD = 0.98

RID = "host.container-memory-limit"
_SERVING = ("vllm", "sglang", "tgi", "tensorrt-llm")
#: llama.cpp and ollama load GGUF files: transformers' loading options do not apply
_GGML = ("llama.cpp", "ollama", "ggml")


def resident_bytes(inp: AdviceInput) -> int | None:
    """What the killed process held in RAM: anon + file + shmem rss (the kernel's three figures)."""
    parts = [as_int(inp.fig(k)) for k in ("anon_rss_bytes", "file_rss_bytes", "shmem_rss_bytes")]
    if parts[0] is None:
        return None
    return sum(p or 0 for p in parts)


def launcher_ranks(inp: AdviceInput) -> int:
    """How many rank processes the log's launcher ran on this host (DeepSpeed's launcher names
    each as it ends them all: context rule ``deepspeed.launcher-ranks``), the killed one counted;
    1 when the log shows no launcher's list."""
    pids = {str(p) for p in inp.context.extra.get("launcher_rank_pids") or ()}
    if not pids:
        return 1
    killed = inp.fig("pid")
    return len(pids | {str(killed)}) if killed is not None else len(pids)


#: a host allocation this small failing while weights load is one buffer of many: the host is full,
#: not the request too large for it
SMALL_HOST_REQUEST = 2**30


@remedy("host.add-swap")
def add_swap(inp: AdviceInput) -> Remedy | None:
    """A global (not container) OOM: swap lets a short peak spill to disk instead of killing the job.

    Value: at least the resident size of the killed process, in whole GiB (other ranks add to the peak).
    """
    rss = resident_bytes(inp)
    if not rss:
        return _add_swap_unsized(inp)
    ranks = launcher_ranks(inp)
    anon = as_int(inp.fig("anon_rss_bytes"))
    if ranks > 1 and anon:
        shared = rss - anon
        total = ranks * anon + shared
        return Remedy(
            id="host.add-swap",
            title=remedy_text("host.add-swap", "title"),
            settings={"swap size": remedy_text("host.add-swap", "setting", gib=math.ceil(total / 2**30))},
            fits=None,
            confidence="low",
            why=remedy_text("host.add-swap", "why_ranks", ranks=ranks, anon=anon, shared=shared, total=total),
            sources={"rss": "message", "ranks": "log"},
        )
    return Remedy(
        id="host.add-swap",
        title=remedy_text("host.add-swap", "title"),
        settings={"swap size": remedy_text("host.add-swap", "setting", gib=math.ceil(rss / 2**30))},
        fits=None,
        confidence="medium",
        why=remedy_text("host.add-swap", "why", rss=rss),
        sources={"rss": "message"},
    )


#: bytes a parameter takes in the 16-bit checkpoints LLaMA's converters read (consolidated.*.pth)
CONVERT_BYTES_PER_PARAM = 2


def converted_weights_bytes(inp: AdviceInput) -> int | None:
    """The whole checkpoint a LLaMA converter holds in RAM: ``--model_size`` N B × 10⁹ × 2 bytes.

    transformers' convert_llama_weights_to_hf.py (4.44.2) loads every consolidated shard at once
    ("you need to be able to host the whole model in RAM"); pyllama's converter takes the same
    argument. Context rule ``convert.llama-model-size``.
    """
    billions = as_float(inp.context.extra.get("convert_params_billions"))
    if not billions:
        return None
    return int(billions * 1e9 * CONVERT_BYTES_PER_PARAM)


def format_billions(weights: int) -> str:
    """65e9 × 2 bytes -> "65"; 6.7e9 -> "6.7" (the parameter count as the argument wrote it)."""
    billions = weights / CONVERT_BYTES_PER_PARAM / 1e9
    return f"{billions:g}"


def _add_swap_unsized(inp: AdviceInput) -> Remedy | None:
    """The kernel killed the process for host RAM and the log does not size it: swap for the peak,
    left to the reader to size. A failed allocation is not such a peak: one request that host RAM
    cannot hold (a tensor, a buffer, the weights) needs a smaller request, and swap only slows it."""
    cause = inp.finding.cause
    if cause is None or cause.id != "host-ram":
        return None
    req = as_int(inp.fig("requested_bytes") or inp.fig("buffer_bytes"))
    if req and inp.finding.phase == "weights-load" and req <= SMALL_HOST_REQUEST:
        # one of many weight buffers, and a small one, found no host memory: the host (RAM, and on
        # Windows the page file that bounds committed memory) is full while the weights load
        return Remedy(
            id="host.add-swap",
            title=remedy_text("host.add-swap", "title"),
            settings={"swap size": remedy_text("host.add-swap", "setting_loading")},
            fits=None,
            confidence="low",
            why=remedy_text("host.add-swap", "why_loading", request=req),
            sources={"request": "message"},
        )
    if req:
        return None
    if inp.finding.rule.startswith("ray.memory-monitor"):
        return None  # Ray's own memory monitor killed the workers at its threshold: swap does not stop it
    if inp.finding.kind == "ollama.system-memory-insufficient":
        return None  # ollama compared the model's steady need with the RAM: not a peak to spill
    converted = converted_weights_bytes(inp)
    if converted:
        return Remedy(
            id="host.add-swap",
            title=remedy_text("host.add-swap", "title"),
            settings={
                "swap size": remedy_text("host.add-swap", "setting_convert", gib=math.ceil(converted / 2**30))
            },
            fits=None,
            confidence="medium",
            why=remedy_text(
                "host.add-swap", "why_convert", params=format_billions(converted), weights=converted
            ),
            sources={"weights": "context"},
        )
    return Remedy(
        id="host.add-swap",
        title=remedy_text("host.add-swap", "title"),
        settings={"swap size": remedy_text("host.add-swap", "setting_unsized")},
        fits=None,
        confidence="low",
        why=remedy_text("host.add-swap", "why_unsized"),
    )


def current_limit(inp: AdviceInput) -> int | None:
    """The container's memory limit the log states (a Kubernetes ``Limits: memory: 16Gi`` or
    ``--limits=memory=16Gi``, or the kernel's memcg ``limit NkB``), in bytes; None when none or "no limit"."""
    limit = as_int(inp.context.extra.get("memory_limit_bytes"))
    return limit if limit and limit < 2**50 else None


def _raise_limit(inp: AdviceInput, limit: int, rss: int | None) -> Remedy:
    """Value: the stated limit × :data:`HOST_LIMIT_HEADROOM` (or the resident size × it, when that is
    larger), rounded up to whole MiB (MB for a decimal limit) and written in the unit that divides
    it exactly: 16Gi -> 20Gi, 16G -> 20G, 33554432 kB -> 40Gi."""
    step = 10**6 if limit % 2**20 and not limit % 10**6 else 2**20
    by_limit = math.ceil(limit * HOST_LIMIT_HEADROOM / step) * step
    by_rss = math.ceil(rss * HOST_LIMIT_HEADROOM / 2**30) * 2**30 if rss else 0
    new = max(by_limit, by_rss)
    quantity = format_quantity(new)
    why = remedy_text(
        RID, "why_rss" if new > by_limit else "why_limit", limit=format_quantity(limit), limit_size=limit,
        rss=rss, headroom=HOST_LIMIT_HEADROOM, quantity=quantity, new=new,
    )
    return Remedy(
        id="host.container-memory-limit",
        title=remedy_text(RID, "title", quantity=quantity),
        flags={"--memory": f"{math.ceil(new / 2**30)}g"},
        settings={"resources.limits.memory": quantity},
        fits=None,
        confidence="medium",
        why=why,
        sources={"limit": "context", **({"rss": "message"} if rss else {})},
    )


@remedy("host.container-memory-limit")
def container_limit(inp: AdviceInput) -> Remedy | None:
    rss = resident_bytes(inp)
    limit = current_limit(inp)
    if limit:
        return _raise_limit(inp, limit, rss)
    if rss:
        gib = math.ceil(rss * HOST_LIMIT_HEADROOM / 2**30)
        return Remedy(
            id="host.container-memory-limit",
            title=remedy_text(RID, "title_at_least", gib=gib),
            flags={"--memory": f"{gib}g"},
            settings={"resources.limits.memory": f"{gib}Gi"},
            fits=None,
            confidence="medium",
            why=remedy_text(RID, "why_at_least", rss=rss, headroom=HOST_LIMIT_HEADROOM, gib=gib),
        )
    return Remedy(
        id="host.container-memory-limit",
        title=remedy_text(RID, "title_unknown"),
        settings={"resources.limits.memory": remedy_text(RID, "setting_unknown")},
        fits=None,
        confidence="low",
        why=remedy_text(RID, "why_unknown"),
    )


#: tools that load a model with Hugging Face's from_pretrained
_HF_LOADERS = ("transformers", "accelerate", "diffusers", "deepspeed", "hf-trainer")


LOW_CPU = "host.low-cpu-mem-usage"


@remedy(LOW_CPU)
def low_cpu_mem_usage(inp: AdviceInput) -> Remedy | None:
    if engine_of(inp) in (*_SERVING, *_GGML) or inp.finding.phase not in ("weights-load", "unknown"):
        return None
    if inp.finding.phase != "weights-load" and engine_of(inp) not in _HF_LOADERS:
        return None  # from_pretrained's settings only where the log shows Hugging Face loading the model
    if engine_of(inp) == "deepspeed" and as_int(inp.context.extra.get("zero_stage")) == 3:
        # transformers raises "DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with
        # passing a `device_map`" (4.46.0 modeling_utils.py): under ZeRO-3 zero.Init is the per-rank lever
        return None
    extra = inp.context.extra
    if extra.get("training_launch"):
        # a training program: the trainer wraps the model (FSDP, DeepSpeed) and keeps fp32 master
        # weights under --fp16 AMP, so device_map and torch_dtype are not its knobs. Under FSDP,
        # transformers (4.46.3 modeling_utils.py) loads with low_cpu_mem_usage on its own when
        # fsdp_config's cpu_ram_efficient_loading is true (training_args.py: sync_module_states too)
        why = remedy_text(LOW_CPU, "why_training")
        if extra.get("training_fsdp"):
            ranks = as_int(extra.get("training_ranks"))
            why += " " + remedy_text(LOW_CPU, "why_fsdp_one_rank" if ranks == 1 else "why_fsdp")
        return _low_cpu_mem(
            {"from_pretrained": "low_cpu_mem_usage=True"}, why, remedy_text(LOW_CPU, "cost_training")
        )
    if engine_of(inp) == "deepspeed":
        return _low_cpu_mem(
            {"from_pretrained": "low_cpu_mem_usage=True", "use_safetensors": "True"},
            remedy_text(LOW_CPU, "why_deepspeed"), remedy_text(LOW_CPU, "cost_deepspeed"),
        )
    return _low_cpu_mem(
        {"from_pretrained": 'low_cpu_mem_usage=True, torch_dtype="auto", device_map="auto"', "use_safetensors": "True"},
        remedy_text(LOW_CPU, "why"),
    )


def _low_cpu_mem(settings: dict[str, str], why: str, tradeoff: str = "") -> Remedy:
    """``host.low-cpu-mem-usage`` with the loading settings one kind of program takes."""
    return Remedy(id=LOW_CPU, title=remedy_text(LOW_CPU, "title"), settings=settings, fits=None,
                  confidence="low", why=why, tradeoff=tradeoff)


@remedy("host.shm-size")
def shm_size(inp: AdviceInput) -> Remedy | None:
    seg = as_int(inp.fig("segment_bytes"))
    return Remedy(
        id="host.shm-size",
        title=remedy_text("host.shm-size", "title", size=SHM_SIZE),
        flags={"--shm-size": SHM_SIZE},
        settings={"alternative": remedy_text("host.shm-size", "setting")},
        fits=None,
        confidence="high",
        why=remedy_text("host.shm-size", "why_segment", segment=seg) if seg else remedy_text("host.shm-size", "why"),
    )


@remedy("host.nccl-shm-disable")
def nccl_shm_disable(inp: AdviceInput) -> Remedy | None:
    return Remedy(
        id="host.nccl-shm-disable",
        title=remedy_text("host.nccl-shm-disable", "title"),
        env={"NCCL_SHM_DISABLE": "1"},
        fits=True,
        confidence="medium",
        why=remedy_text("host.nccl-shm-disable", "why"),
    )


@remedy("host.smaller-model")
def smaller_model(inp: AdviceInput) -> Remedy | None:
    req, avail = as_int(inp.fig("required_bytes")), as_int(inp.fig("available_bytes"))
    if not (req and avail) or avail >= req:
        return None
    return Remedy(
        id="host.smaller-model",
        title=remedy_text("host.smaller-model", "title", available=avail),
        settings={"model": remedy_text("host.smaller-model", "setting", available=avail)},
        fits=None,
        confidence="medium",
        why=remedy_text("host.smaller-model", "why", required=req, available=avail, share=f"{avail / req:.0%}"),
    )


#: CPUs a Ray task requests by default (``@ray.remote`` with no ``num_cpus``: 1)
RAY_DEFAULT_TASK_CPUS = 1


#: the Ray actors vLLM creates for its GPU workers, as Ray's kill message names them: RayWorkerVllm
#: (vLLM 0.2.x, engine/ray_utils.py) and RayWorkerWrapper (0.4+, executor/ray_utils.py)
_VLLM_RAY_ACTOR = regex.compile(r"\bRayWorker(?:Vllm|Wrapper)\b")


@remedy("ray.reduce-parallelism")
def ray_reduce_parallelism(inp: AdviceInput) -> Remedy | None:
    """Ray's own advice when its memory monitor kills a worker: "reducing task parallelism by
    requesting more CPUs per task". Doubling a task's ``num_cpus`` halves how many run at once on
    the node (Ray schedules by the CPUs each task requests)."""
    if engine_of(inp) != "ray":  # (the finding's own engine when it names Ray)
        return None
    if (product_of(inp) or "").startswith("vllm") or _VLLM_RAY_ACTOR.search(str(inp.fig("task_name") or "")):
        return None  # vLLM's own Ray workers (one per GPU): the user does not size their tasks
    value = 2 * RAY_DEFAULT_TASK_CPUS
    return Remedy(
        id="ray.reduce-parallelism",
        title=remedy_text("ray.reduce-parallelism", "title"),
        settings={"num_cpus": remedy_text("ray.reduce-parallelism", "setting", value=value)},
        fits=None,
        confidence="medium",
        why=remedy_text("ray.reduce-parallelism", "why"),
    )


@remedy("ray.memory-usage-threshold")
def ray_threshold(inp: AdviceInput) -> Remedy | None:
    """Raise Ray's kill threshold to :data:`RAY_MAX_THRESHOLD`, only when that is above both the
    current threshold and the usage the node reached (a threshold below it would kill again)."""
    cur = as_float(inp.fig("memory_usage_threshold")) or RAY_DEFAULT_THRESHOLD
    reached = as_float(inp.fig("memory_usage_fraction"))
    if cur >= RAY_MAX_THRESHOLD or (reached is not None and reached >= RAY_MAX_THRESHOLD):
        return None
    return Remedy(
        id="ray.memory-usage-threshold",
        title=remedy_text("ray.memory-usage-threshold", "title", threshold=RAY_MAX_THRESHOLD),
        env={"RAY_memory_usage_threshold": f"{RAY_MAX_THRESHOLD}"},
        fits=None,
        confidence="low",
        why=remedy_text("ray.memory-usage-threshold", "why", current=cur),
    )


@remedy("host.vllm-swap-space")
def vllm_swap_space(inp: AdviceInput) -> Remedy | None:
    if engine_of(inp) != "vllm" or not swap_space_flag_exists(inp):
        return None
    cur = as_float(inp.context.launch_args.get("swap_space"))
    if cur is not None and cur <= 0:
        return None
    gpus = inp.context.tensor_parallel_size or 1
    per = cur if cur is not None else SWAP_SPACE_DEFAULT
    return Remedy(
        id="host.vllm-swap-space",
        title=remedy_text("host.vllm-swap-space", "title"),
        flags={"--swap-space": "0"},
        saves_bytes=int(per * gpus * 2**30),
        fits=None,
        confidence="medium",
        why=remedy_text("host.vllm-swap-space", "why", per=f"{per:g}", gpus=gpus),
    )


@remedy("host.vllm-cpu-offload-gb")
def vllm_cpu_offload(inp: AdviceInput) -> Remedy | None:
    if engine_of(inp) != "vllm":
        return None
    cur = as_float(inp.context.launch_args.get("cpu_offload_gb"))
    if not cur or cur <= 0:
        return None
    value = cur / 2
    gpus = inp.context.tensor_parallel_size or 1
    return Remedy(
        id="host.vllm-cpu-offload-gb",
        title=remedy_text("host.vllm-cpu-offload-gb", "title", value=f"{value:g}"),
        flags={"--cpu-offload-gb": f"{value:g}"},
        saves_bytes=int((cur - value) * gpus * 2**30),
        fits=None,
        confidence="medium",
        why=remedy_text("host.vllm-cpu-offload-gb", "why", current=f"{cur:g}", gpus=gpus),
    )
