"""Pre-flight: will this model fit this GPU under vLLM, and which flags make it fit?

The same memory model and the same remedy calculators as the post-mortem advice: ``fit`` builds the
finding vLLM would raise for this configuration (the V1 "max seq len ... KV cache is needed" error,
or "no available memory for the cache blocks") and ranks the remedies for it, so the verdict and
the advice for the real failure agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oomdoctor.advisor.catalog import DTYPE_BYTES, GpuSpec, ModelGeometry, runtime_quantized, with_dtype
from oomdoctor.advisor.memory_model import (
    GiB,
    capacity_tokens,
    counts_cudagraphs_in_budget,
    default_utilization,
    is_release,
    kv_budget,
    kv_bytes_for_len,
    parse_version,
)
from oomdoctor.advisor.memory_model_mm import mllama_profile
from oomdoctor.advisor.prescription import remedy_text, remedy_tradeoff
from oomdoctor.advisor.registry import AdviceInput
from oomdoctor.advisor.values import BLOCK_SIZE
from oomdoctor.advisor.vllm_budget import (
    _activation_peak,
    activation_peak,
    batched_tokens,
    max_num_seqs,
    mllama_stage_words,
    non_torch,
    runs_on_v0,
)
from oomdoctor.i18n import _
from oomdoctor.report import Context, Finding, Location, Remedy

#: CUDA-graph memory when not measured (research §7: typically 0.3–3 GiB).
CUDAGRAPH_BYTES = int(0.5 * GiB)

#: one step less confident, for values computed from a nominal GPU size
LOWER = {"high": "medium", "medium": "low", "low": "low"}

KV_IDS = [
    "vllm.max-model-len",
    "vllm.kv-cache-dtype-fp8",
    "vllm.gpu-memory-utilization.raise-for-kv",
    "vllm.enforce-eager",
    "vllm.tensor-parallel-size",
    "vllm.pipeline-parallel-size",
    "vllm.quantization",
]
NO_BLOCKS_IDS = [
    "vllm.tensor-parallel-size",
    "vllm.pipeline-parallel-size",
    "vllm.quantization",
    "vllm.quantization-4bit",
    "vllm.gpu-memory-utilization.raise-for-kv",
    "vllm.cpu-offload-gb",
    "vllm.max-num-batched-tokens",
]


@dataclass
class FitResult:
    model: str
    gpu: str
    gpus: int
    tensor_parallel_size: int
    total_bytes: int
    utilization: float
    max_model_len: int
    kv_cache_dtype: str
    rows: list[tuple[str, int, str]]  # (term, bytes, source)
    kv_budget: int
    kv_needed: int
    capacity_tokens: int
    fits: bool
    #: how many requests of the full max model len the KV cache holds at once (vLLM's
    #: "Maximum concurrency", kv tokens / max model len, with decimals)
    concurrency: float = 0.0
    #: the non-KV terms per GPU, and the KV cache in tokens (vLLM's "GPU KV cache size")
    weights: int = 0
    activation: int = 0
    non_torch: int = 0
    kv_tokens: int = 0
    #: tensor-parallel sizes tried by --gpus N planning (:func:`plan`): (tp, fits, capacity tokens)
    plans: list[tuple[int, bool, int]] = field(default_factory=list)
    #: the plan chose ``max_model_len`` (the largest that fits), the user gave none
    length_planned: bool = False
    finding: Finding | None = None
    remedies: list[Remedy] = field(default_factory=list)
    #: the serving engine the budget is SGLang's or vLLM's (:mod:`~oomdoctor.advisor.sglang_fit`)
    engine: str = "vllm"
    #: the verdict "does not fit" rests on a term no log confirms for this version: which, and why
    #: (empty when the verdict stands); ``fits`` is then the modelled verdict, the answer is "uncertain"
    uncertain: str = ""
    #: the activation peak and the KV budget with that term at its lowest (the text model's peak)
    activation_floor: int | None = None
    kv_budget_floor: int | None = None

    @property
    def verdict(self) -> str:
        """``fits``, ``does not fit``, or ``uncertain`` (does not fit only on an unverified term)."""
        return "fits" if self.fits else "uncertain" if self.uncertain else "does not fit"

    @property
    def command(self) -> str:
        """``vllm serve`` with the plan's tensor parallelism and length (when the plan chose them)."""
        if self.engine == "sglang":
            cmd = f"python -m sglang.launch_server --model-path {self.model}"
            return cmd + (f" --tp-size {self.tensor_parallel_size}" if self.tensor_parallel_size > 1 else "")
        cmd = f"vllm serve {self.model}"
        if self.tensor_parallel_size > 1:
            cmd += f" --tensor-parallel-size {self.tensor_parallel_size}"
        if self.length_planned:
            cmd += f" --max-model-len {self.max_model_len}"
        return cmd

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "model": self.model,
            "gpu": self.gpu,
            "gpus": self.gpus,
            "tensor_parallel_size": self.tensor_parallel_size,
            "total_bytes": self.total_bytes,
            ("mem_fraction_static" if self.engine == "sglang" else "gpu_memory_utilization"): self.utilization,
            "max_model_len": self.max_model_len,
            "kv_cache_dtype": self.kv_cache_dtype,
            "budget": [{"term": t, "bytes": b, "source": s} for t, b, s in self.rows],
            "kv_budget_bytes": self.kv_budget,
            "kv_needed_bytes": self.kv_needed,
            "capacity_tokens": self.capacity_tokens,
            "concurrency": round(self.concurrency, 2),
            "kv_cache_tokens": self.kv_tokens,
            "fits": None if self.uncertain else self.fits,
            "verdict": self.verdict,
            "uncertain": self.uncertain or None,
            "activation_floor_bytes": self.activation_floor,
            "kv_budget_floor_bytes": self.kv_budget_floor,
            "plans": [{"tensor_parallel_size": t, "fits": f, "capacity_tokens": c} for t, f, c in self.plans],
            "max_model_len_planned": self.length_planned,
            "command": self.command,
            "finding": self.finding.model_dump() if self.finding else None,
            "remedies": [r.model_dump() for r in self.remedies],
        }


def fit(
    geo: ModelGeometry,
    gpu: GpuSpec | None,
    *,
    total_bytes: int | None = None,
    gpus: int = 1,
    tensor_parallel_size: int = 1,
    max_model_len: int | None = None,
    dtype: str | None = None,
    kv_cache_dtype: str | None = None,
    utilization: float | None = None,
    version: str | None = None,
    enforce_eager: bool = False,
    max_num_batched_tokens: int | None = None,
    model_config: str | None = None,
    model_name: str | None = None,
    max_num_seqs_given: int | None = None,
    enable_chunked_prefill: bool | None = None,
    quantization: str | None = None,
) -> FitResult:
    """Verdict and budget table for serving ``geo`` on ``gpu`` (per GPU, at TP ``tensor_parallel_size``).

    ``model_name``: the repository for the command (see :func:`~oomdoctor.advisor.catalog.repo_name`);
    by default the catalog's repository, or ``<model>`` for a config.json that names none.
    """
    ver = parse_version(version)
    name = model_name or (geo.name if not geo.name.startswith("config.json (") else "<model>")
    tp = max(1, tensor_parallel_size)
    total = total_bytes or (gpu.memory_bytes if gpu else None)
    if not total:
        raise ValueError("the GPU memory is unknown: name a GPU from the catalog or give its memory")
    util = utilization or default_utilization(ver)
    served = with_dtype(geo, dtype)  # --dtype re-sizes unquantized weights only
    if quantization and served.quantization is None:
        served = runtime_quantized(served, quantization)
    weights_all = served.weight_bytes()
    if weights_all is None:
        raise ValueError(f"the parameter count of {geo.name} is unknown")
    weights = -(-weights_all // tp)
    model_dtype = dtype if dtype and dtype != "auto" else geo.dtype
    kv_dtype = kv_cache_dtype if kv_cache_dtype and kv_cache_dtype != "auto" else model_dtype
    kvb = DTYPE_BYTES.get(kv_dtype, 2)
    if kvb < 2 and not (kv_cache_dtype or "").startswith("fp8"):
        kvb = 2  # an fp8 checkpoint still keeps a 16-bit KV cache unless --kv-cache-dtype says otherwise
    length = max_model_len or geo.max_position_embeddings or 4096
    v0 = runs_on_v0(served, ver)
    batched_term = batched_tokens(ver, total, gpu, length, enable_chunked_prefill, max_num_batched_tokens,
                                  multimodal=served.multimodal, engine_v0=v0)
    batched = batched_term.bytes
    seqs = max_num_seqs(ver, total, gpu, max_num_seqs_given, engine_v0=v0)
    act = activation_peak(served, batched, seqs, tp, ver, length, release=is_release(version))
    activation = act.bytes
    nt = non_torch(ver, tp, gpu)
    graphs = 0 if enforce_eager else CUDAGRAPH_BYTES
    graphs_in_budget = counts_cudagraphs_in_budget(ver)
    requested = int(total * util)
    budget = kv_budget(requested, weights, activation, nt.bytes, graphs, ver)
    needed = kv_bytes_for_len(geo, length, kvb, BLOCK_SIZE, tp, 1, batched)
    cap = capacity_tokens(geo, budget, kvb, BLOCK_SIZE, tp, 1, limit=length, max_num_batched_tokens=batched)
    page = BLOCK_SIZE * geo.kv_entry_bytes(kvb, tp) * max(1, geo.layers)
    kv_tokens = int(max(0, budget) // page) * BLOCK_SIZE if page else 0
    headroom = total - requested - (0 if graphs_in_budget else graphs)
    if served.weights_total is not None and served.weights_source:
        wsrc = served.weights_source
    elif model_config:
        wsrc = _("config.json (parameters estimated from tensor shapes)")
    else:
        wsrc = _("catalog: {source}").format(source=geo.source_text())
    gpu_src = (_("catalog: {gpu}, {label}").format(gpu=gpu.name, label=gpu.memory_label)
               if gpu and not total_bytes else _("given"))
    rows = [
        (_("GPU memory"), total, gpu_src),
        (_("vLLM budget (× {util})").format(util=f"{util:.2f}"), requested,
         _("given") if utilization else _("vLLM default")),
        (_("weights"), weights, wsrc + (f", ÷ TP {tp}" if tp > 1 else "")),
        (_("activation peak"), activation, _("estimate: {how}").format(how=act.source)
         + f" ({batched_term.source})"),
        (_("non-torch"), nt.bytes, nt.source),
        (_("CUDA graphs") + ("" if graphs_in_budget else _(" (outside the budget)")), graphs,
         "--enforce-eager" if enforce_eager else _("estimate (typical 0.3–3 GiB)")),
        (_("KV cache"), budget, _("the rest of the budget")),
        (_("KV for one {length}-token request").format(length=length), needed,
         _("{layers} layers, {dtype} KV").format(layers=geo.layers, dtype=kv_dtype)),
        (_("headroom outside vLLM"), headroom, _("total − budget")),
    ]
    fits = budget > 0 and needed <= budget
    res = FitResult(
        model=name, gpu=gpu.name if gpu else "custom", gpus=gpus, tensor_parallel_size=tp, total_bytes=total,
        utilization=util, max_model_len=length, kv_cache_dtype=kv_dtype, rows=rows, kv_budget=budget,
        kv_needed=needed, capacity_tokens=cap, fits=fits, concurrency=kv_tokens / length if length else 0.0,
        weights=weights, activation=activation, non_torch=nt.bytes, kv_tokens=kv_tokens,
    )
    if fits:
        return res
    if act.floor is not None and act.unverified:
        floor_budget = kv_budget(requested, weights, act.floor, nt.bytes, graphs, ver)
        if floor_budget > 0 and needed <= floor_budget:  # "does not fit" would rest on that term alone
            res.uncertain, res.activation_floor, res.kv_budget_floor = act.unverified, act.floor, floor_budget
    ctx = Context(
        engine="vllm", engine_version=version, model=name, gpu_name=gpu.name if gpu else None,
        gpu_total_bytes=total, gpu_count=gpus, tensor_parallel_size=tp, dtype=model_dtype,
        kv_cache_dtype=kv_cache_dtype, max_model_len=length, gpu_memory_utilization=util,
        max_num_batched_tokens=batched, enforce_eager=enforce_eager or None, weights_bytes=weights,
        activation_peak_bytes=activation, non_torch_bytes=nt.bytes, cudagraph_bytes=graphs or None,
        kv_cache_bytes=budget,
        launch_args={k: v for k, v in {
            "model": name, "max_model_len": str(length),
            "tensor_parallel_size": str(tp) if tp > 1 else "",
            "gpu_memory_utilization": f"{util:.2f}" if utilization else "",
            "kv_cache_dtype": kv_cache_dtype or "", "dtype": dtype or "",
        }.items() if v},
    )
    ctx.typed_args.update(ctx.launch_args)  # fit's own options: what the user typed
    hints = {"gpus": str(gpus)}
    if model_config:
        hints["model-config"] = model_config
    res.finding = expected_finding(length, needed, budget, cap)
    from oomdoctor.advisor import rank_remedies

    ids = KV_IDS if budget > 0 else NO_BLOCKS_IDS
    images = mllama_seqs_remedy(served, seqs, tp, act.bytes, requested - weights - nt.bytes
                                - (graphs if graphs_in_budget else 0), needed, length) if v0 else None
    if images is not None:  # the vision encoder's batch, not the tokens per step, makes the peak
        ids = [i for i in ids if i != "vllm.max-num-batched-tokens"]
    res.remedies = rank_remedies(ids, AdviceInput(res.finding, ctx, hints, planned=True))
    if images is not None:
        images.tradeoff = remedy_tradeoff(images.id)
        res.remedies.insert(0, images)
        for i, rem in enumerate(res.remedies, 1):
            rem.rank = i
    if gpu is not None and not gpu.reported and not total_bytes:
        # every value rests on the vendor's nominal size, above the usable memory (issue 33 §3)
        res.remedies = [r.model_copy(update={"confidence": LOWER[r.confidence]}) for r in res.remedies]
    if res.uncertain:  # the need for any remedy rests on the unverified term
        res.remedies = [r.model_copy(update={"confidence": LOWER[r.confidence]}) for r in res.remedies]
    return res


def mllama_seqs_remedy(geo: ModelGeometry, seqs: int, tp: int, peak: int, room: int, needed: int,
                       length: int) -> Remedy | None:
    """mllama on V0: the largest ``--max-num-seqs`` whose profile run (one dummy image per sequence,
    :func:`~oomdoctor.advisor.memory_model_mm.mllama_profile`) leaves the KV cache of one request of
    ``length`` tokens in ``room`` (the budget less weights, non-torch and graphs); None when the
    current value already does, or none does."""
    vision = geo.mllama
    if vision is None or room - peak >= needed or seqs <= 1:
        return None
    text = _activation_peak(geo, 1, 1, tp, None).bytes  # the text part hardly moves with the images

    def peak_for(n: int) -> tuple[str, int]:
        return mllama_profile(vision, n, text, tp).peak

    found = next(((n, p) for n in range(seqs - 1, 0, -1) if room - (p := peak_for(n)[1]) >= needed), None)
    if found is None:
        return None
    best, new_peak = found
    stage = peak_for(seqs)[0]
    return Remedy(
        id="vllm.max-num-seqs",
        title=remedy_text("vllm.max-num-seqs", "title", seqs=best),
        flags={"--max-num-seqs": str(best)},
        saves_bytes=peak - new_peak,
        fits=True,
        confidence="medium",
        why=remedy_text("vllm.max-num-seqs", "why_mllama", dummy=seqs, peak=peak, stage=mllama_stage_words(stage),
                        seqs=best, new_peak=new_peak, length=length),
        sources={"dummy requests": "context" if seqs else "default"},
    )


def tp_candidates(geo: ModelGeometry, gpus: int) -> list[int]:
    """Tensor-parallel sizes vLLM accepts on up to ``gpus`` GPUs: the attention heads divide evenly
    (config/parallel.py ``verify_with_parallel_config``: "Total number of attention heads must be
    divisible by tensor parallel size"), and the KV heads either split evenly or are replicated
    (``get_num_kv_heads``: ``max(1, kv_heads // tp)``, which needs tp % kv_heads == 0 when tp > kv_heads)."""
    out = []
    for t in range(1, max(1, gpus) + 1):
        if geo.attention_heads % t:
            continue
        if geo.kv_heads and not geo.is_mla and geo.kv_heads % t and t % geo.kv_heads:
            continue
        out.append(t)
    return out


def plan(geo: ModelGeometry, gpu: GpuSpec | None, *, gpus: int, max_model_len: int | None = None,
         **kwargs: Any) -> FitResult:
    """``fit --gpus N``: try every tensor-parallel size up to N, smallest first; answer with the first
    that fits the requested (or the model's) length, else, when no length was given, the size that
    holds the longest context, with ``--max-model-len`` set to that length."""
    tried: list[FitResult] = []
    for t in tp_candidates(geo, gpus):
        res = fit(geo, gpu, gpus=gpus, tensor_parallel_size=t, max_model_len=max_model_len, **kwargs)
        tried.append(res)
        if res.fits:
            break
    best = tried[-1] if tried[-1].fits else max(tried, key=lambda r: (r.capacity_tokens, -r.tensor_parallel_size))
    if not best.fits and max_model_len is None and best.capacity_tokens >= BLOCK_SIZE:
        best = fit(geo, gpu, gpus=gpus, tensor_parallel_size=best.tensor_parallel_size,
                   max_model_len=best.capacity_tokens, **kwargs)
        best.length_planned = True
    best.plans = [(r.tensor_parallel_size, r.fits, r.capacity_tokens) for r in tried]
    return best


def expected_finding(length: int, needed: int, available: int, capacity: int) -> Finding:
    """The failure vLLM (V1, 0.9.1+) raises for this configuration, with its figures."""
    if available <= 0:
        return Finding(
            rule="vllm.kv-cache.no-blocks", kind="vllm.kv-cache.no-blocks", engine="vllm", severity="error",
            phase="kv-cache-alloc", title="No memory left for the KV cache",
            message="No available memory for the cache blocks.",
            location=Location(source="<fit>", line=0, end_line=0),
            figures={"kv_cache_available_bytes": available, "max_seq_len": length},
        )
    return Finding(
        rule="vllm.v1.kv-cache.max-len-exceeds", kind="vllm.kv-cache.max-len-exceeds", engine="vllm",
        severity="error", phase="kv-cache-alloc", title="KV cache cannot hold one request of the model's max length",
        message=v1_message(length, needed, available, capacity),
        location=Location(source="<fit>", line=0, end_line=0),
        figures={"max_seq_len": length, "kv_cache_needed_bytes": needed, "kv_cache_available_bytes": available,
                 "estimated_max_model_len": capacity},
    )


def v1_message(length: int, needed: int, available: int, capacity: int) -> str:
    """vLLM 0.9.1+'s wording (v1/core/kv_cache_utils.py), GiB with two decimals."""
    return (
        f"ValueError: To serve at least one request with the models's max seq len ({length}), "
        f"({needed / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({available / GiB:.2f} GiB). Based on the available memory, the estimated maximum model length "
        f"is {capacity}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."
    )
