"""``fit --engine sglang``: SGLang's KV pool for a model on a GPU (read from the sglang wheels
0.4.6, 0.4.7, 0.4.8-0.5.2, 0.5.3 and 0.5.8; the pool formula is unchanged up to 0.5.23).

SGLang's ``--mem-fraction-static`` covers the weights and the KV pool only; activations and CUDA
graphs live in the rest, which SGLang reserves by its own heuristic (server_args.py)::

    before = free memory after the CUDA context and torch.distributed are up  (init_torch_distributed)
    after  = free memory once the weights are loaded
    rest   = after − before × (1 − mem_fraction_static)     (model_runner.py profile_max_num_token)
    cell   = kv_heads_per_rank × head_dim × layers × 2 × kv_dtype_bytes   (MLA: (kv_lora_rank + rope) × layers × bytes)
    tokens = rest // cell, rounded down to the page size (1 on CUDA by default)

so ``rest = before × fraction − weights``. ``rest <= 0`` is "Not enough memory. Please try to
increase --mem-fraction-static". Unlike vLLM, SGLang starts with a pool shorter than the context
length (requests are then limited to the pool); ``fit`` calls that "does not fit" too, as for vLLM.
"""

from __future__ import annotations

from typing import Any

from oomdoctor.advisor.catalog import DTYPE_BYTES, GpuSpec, ModelGeometry, runtime_quantized, with_dtype
from oomdoctor.advisor.fit import LOWER, FitResult, tp_candidates
from oomdoctor.advisor.memory_model import GiB, parse_version
from oomdoctor.advisor.registry import AdviceInput
from oomdoctor.i18n import _
from oomdoctor.report import Context, Finding, Location

MiB = 2**20
#: memory taken before SGLang measures ``before`` (GiB). One GPU: the CUDA context, an estimate
#: (the research catalog's example SGLang start-up shows 63.72 GB available + 15.06 GB loaded on a
#: 79.22 GB H100; a composed example, not a measured case). Tensor parallelism over NVLink adds NCCL
#: and the custom all-reduce buffers: 2.13, what case S1 implies (Qwen3-235B-A22B-FP8, TP 4 on H100,
#: 367404 tokens at 0.93) and what vLLM measured at TP 4 (cases A3/A6).
BEFORE_TP1_GIB = 0.41
BEFORE_NVLINK_GIB = 2.13
#: ``--kv-cache-dtype`` choices of SGLang 0.4.6-0.5.8 (server_args.py)
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3")
REMEDY_IDS = ["sglang.mem-fraction-static.raise", "sglang.tp-size", "sglang.quantization"]


def default_chunked_prefill(version: tuple[int, int, int] | None, gpu_mem_mib: float) -> int:
    """``--chunked-prefill-size`` default by GPU memory (server_args.py 0.5.3-0.5.8
    ``_handle_gpu_memory_settings``): 2048 below 35 GiB, 4096 below 60, 8192 below 160, else 16384.
    0.4.6-0.5.2: 2048 below 25 000 MiB, else 8192."""
    if version is not None and version < (0, 5, 3):
        return 2048 if gpu_mem_mib < 25_000 else 8192
    if gpu_mem_mib < 35 * 1024:
        return 2048
    if gpu_mem_mib < 60 * 1024:
        return 4096
    return 8192 if gpu_mem_mib < 160 * 1024 else 16384


def default_cuda_graph_max_bs(gpu_mem_mib: float, tp: int) -> int:
    """``--cuda-graph-max-bs`` default of 0.5.3-0.5.8 by GPU memory and TP."""
    if gpu_mem_mib < 20 * 1024:
        return 8
    if gpu_mem_mib < 35 * 1024:
        return 16 if tp < 4 else 80
    if gpu_mem_mib < 60 * 1024:
        return 32 if tp < 4 else 160
    if gpu_mem_mib < 160 * 1024:
        return 256 if tp < 4 else 512
    return 512


def release_cuda_graph_max_bs(version: tuple[int, int, int] | None, gpu_mem_mib: float, tp: int) -> int | None:
    """The largest batch size SGLang ``version`` captures CUDA graphs for when neither
    ``--cuda-graph-max-bs`` nor ``--cuda-graph-bs`` is given (no speculative decoding, no DP
    attention), or None for a version not read. ``gpu_mem_mib``: the GPU's total in MiB.

    0.4.0 (server_args.py): 8 below 25 000 MiB, else 160. 0.4.6: below 25 000 MiB 8 (TP < 4) or 80,
    else cuda_graph_runner.py's list, up to 160 (256 above 81 920 MiB). 0.4.7: the same below
    25 000 MiB, else up to 160, 256 above 96 GiB, 512 above 180 000 MiB. 0.4.8-0.5.2: below 35 GiB
    8 or 80, else up to 160, 256 above 90 GiB, 512 above 160 000 MiB. 0.5.3 on:
    :func:`default_cuda_graph_max_bs`."""
    if version is None or version < (0, 4, 0) or (0, 4, 1) <= version < (0, 4, 6):
        return None  # 0.4.1-0.4.5 not read
    if version < (0, 4, 1):
        return 8 if gpu_mem_mib < 25_000 else 160
    if version < (0, 4, 8):
        if gpu_mem_mib < 25_000:
            return 8 if tp < 4 else 80
        if version < (0, 4, 7):
            return 256 if gpu_mem_mib > 81920 else 160
        return 512 if gpu_mem_mib > 180_000 else 256 if gpu_mem_mib > 96 * 1024 else 160
    if version < (0, 5, 3):
        if gpu_mem_mib < 35 * 1024:
            return 8 if tp < 4 else 80
        return 512 if gpu_mem_mib > 160_000 else 256 if gpu_mem_mib > 90 * 1024 else 160
    return default_cuda_graph_max_bs(gpu_mem_mib, tp)


def default_fraction(version: tuple[int, int, int] | None, gpu_mem_mib: float, tp: int,
                     chunked_prefill_size: int | None = None) -> float:
    """``--mem-fraction-static`` when none is given, per version (server_args.py ``__post_init__`` /
    ``_handle_gpu_memory_settings``, no speculative decoding, no DP attention). ``gpu_mem_mib`` is
    the GPU's total in MiB (SGLang asks nvidia-smi)."""
    if version is not None and version < (0, 4, 8):
        # 0.4.6: by TP size up to 80 GiB, else 13 GiB reserved; 0.4.7 adds the >96 GiB rules
        if gpu_mem_mib <= 81920:
            frac = 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
        else:
            frac = 0.88 if version >= (0, 4, 7) else (gpu_mem_mib - 13 * 1024) / gpu_mem_mib
        if version >= (0, 4, 7) and gpu_mem_mib > 96 * 1024:
            frac = min(frac + 48 * 1024 * (1 - frac) / gpu_mem_mib, (gpu_mem_mib - 18 * 1024) / gpu_mem_mib)
        return round(frac, 3)
    if version is not None and version < (0, 5, 3):
        # 0.4.8-0.5.2: a reserve by GPU class (activations and CUDA graphs), growing with TP
        if gpu_mem_mib < 35 * 1024:
            reserved = (2.8 + tp / 10) * 1024
        elif gpu_mem_mib < 90 * 1024:
            reserved = (9.5 + tp / 2) * 1024
        elif gpu_mem_mib < 160 * 1024:
            reserved = (12 + tp / 2) * 1024
        else:
            reserved = 32 * 1024
        return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    # 0.5.3+: 512 MiB + 1.5 MiB per prefill token + 2 MiB per CUDA-graph batch + TP/8 GiB, >= 10 GiB on > 60 GiB
    chunk = chunked_prefill_size or default_chunked_prefill(version, gpu_mem_mib)
    reserved = 512 + max(chunk, 2048) * 1.5 + default_cuda_graph_max_bs(gpu_mem_mib, tp) * 2 + tp / 8 * 1024
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def cell_bytes(geo: ModelGeometry, kv_dtype_bytes: float, tp: int) -> int:
    """Bytes of one token in the pool (``profile_max_num_token``'s cell_size), summed over layers."""
    return int(geo.kv_entry_bytes(kv_dtype_bytes, tp) * max(1, geo.layers))


def before_bytes(total: int, tp: int, gpu: GpuSpec | None) -> tuple[int, str]:
    """Free memory when SGLang measures it, after the CUDA context and NCCL (see above), and how it is known."""
    if tp > 1 and (gpu is None or gpu.nvlink):
        return total - int(BEFORE_NVLINK_GIB * GiB), _("less {gib} GiB: CUDA context and NCCL at TP > 1 (case S1)").format(
            gib=f"{BEFORE_NVLINK_GIB:.2f}")
    return total - int(BEFORE_TP1_GIB * GiB), _("less {gib} GiB: the CUDA context (estimate)").format(
        gib=f"{BEFORE_TP1_GIB:.2f}")


def fit_sglang(
    geo: ModelGeometry,
    gpu: GpuSpec | None,
    *,
    total_bytes: int | None = None,
    gpus: int = 1,
    tensor_parallel_size: int = 1,
    max_model_len: int | None = None,
    dtype: str | None = None,
    kv_cache_dtype: str | None = None,
    mem_fraction_static: float | None = None,
    version: str | None = None,
    chunked_prefill_size: int | None = None,
    model_name: str | None = None,
    quantization: str | None = None,
) -> FitResult:
    """The pool SGLang sizes for ``geo`` on ``gpu`` at TP ``tensor_parallel_size``, per GPU."""
    ver = parse_version(version)
    name = model_name or (geo.name if not geo.name.startswith("config.json (") else "<model>")
    tp = max(1, tensor_parallel_size)
    total = total_bytes or (gpu.memory_bytes if gpu else None)
    if not total:
        raise ValueError("the GPU memory is unknown: name a GPU from the catalog or give its memory")
    if kv_cache_dtype and kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"SGLang's --kv-cache-dtype is one of {', '.join(KV_CACHE_DTYPES)}, not {kv_cache_dtype!r}")
    served = with_dtype(geo, dtype)
    if quantization and served.quantization is None:
        served = runtime_quantized(served, quantization)
    weights_all = served.weight_bytes()
    if weights_all is None:
        raise ValueError(f"the parameter count of {geo.name} is unknown")
    weights = -(-weights_all // tp)
    frac = mem_fraction_static or default_fraction(ver, total / MiB, tp, chunked_prefill_size)
    model_dtype = dtype if dtype and dtype != "auto" else geo.dtype
    kv_dtype = kv_cache_dtype if kv_cache_dtype and kv_cache_dtype != "auto" else model_dtype
    kvb = DTYPE_BYTES.get(kv_dtype, 2)
    if kvb < 2 and not (kv_cache_dtype or "").startswith("fp8"):
        kvb = 2  # the pool is in the model's activation dtype unless --kv-cache-dtype says otherwise
    before, before_src = before_bytes(total, tp, gpu)
    static = int(before * frac)
    pool = static - weights
    cell = cell_bytes(geo, kvb, tp)
    tokens = max(0, pool) // cell if cell else 0
    length = max_model_len or geo.max_position_embeddings or 4096
    needed = length * cell
    wsrc = served.weights_source or _("catalog: {source}").format(source=geo.source_text())
    gpu_src = (_("catalog: {gpu}, {label}").format(gpu=gpu.name, label=gpu.memory_label)
               if gpu and not total_bytes else _("given"))
    rows = [
        (_("GPU memory"), total, gpu_src),
        (_("free when SGLang measures"), before, before_src),
        (_("static memory (× {frac})").format(frac=f"{frac:.3f}"), static,
         _("given") if mem_fraction_static else _("SGLang default")),
        (_("weights"), weights, wsrc + (f", ÷ TP {tp}" if tp > 1 else "")),
        (_("KV pool"), pool, _("the rest of the static memory")),
        (_("KV for one {length}-token request").format(length=length), needed,
         _("{layers} layers, {dtype} KV").format(layers=geo.layers, dtype=kv_dtype)),
        (_("activations, CUDA graphs"), before - static, _("outside the static memory")),
    ]
    fits = tokens > 0 and tokens >= length
    res = FitResult(
        model=name, gpu=gpu.name if gpu else "custom", gpus=gpus, tensor_parallel_size=tp, total_bytes=total,
        utilization=frac, max_model_len=length, kv_cache_dtype=kv_dtype, rows=rows, kv_budget=pool,
        kv_needed=needed, capacity_tokens=min(tokens, length), fits=fits,
        concurrency=tokens / length if length else 0.0, weights=weights, kv_tokens=tokens, engine="sglang",
    )
    if fits:
        return res
    ctx = Context(
        engine="sglang", engine_version=version, model=name, gpu_name=gpu.name if gpu else None,
        gpu_total_bytes=total, gpu_count=gpus, tensor_parallel_size=tp, dtype=model_dtype,
        kv_cache_dtype=kv_cache_dtype, max_model_len=length, weights_bytes=weights,
        launch_args={"model_path": name, "mem_fraction_static": f"{frac:g}"}
        | ({"tp_size": str(tp)} if tp > 1 else {}),
    )
    ctx.typed_args.update(ctx.launch_args)
    ctx.extra["sglang_avail_before_load_bytes"] = before
    ctx.extra["sglang_avail_after_load_bytes"] = max(0, before - weights)
    if pool > 0:
        return res  # SGLang starts; one request is limited to the pool (see the verdict)
    res.finding = Finding(
        rule="sglang.not-enough-memory", kind="sglang.oom", engine="sglang", severity="error",
        phase="kv-cache-alloc", title="SGLang: no memory left for the KV cache pool",
        message="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: self.server_args.mem_fraction_static={frac:g}",
        location=Location(source="<fit>", line=0, end_line=0),
        figures={"mem_fraction_static": frac},
    )
    from oomdoctor.advisor import rank_remedies

    res.remedies = rank_remedies(REMEDY_IDS, AdviceInput(res.finding, ctx, {"gpus": str(gpus)}, planned=True))
    if gpu is not None and not gpu.reported and not total_bytes:
        res.remedies = [r.model_copy(update={"confidence": LOWER[r.confidence]}) for r in res.remedies]
    return res


def plan_sglang(geo: ModelGeometry, gpu: GpuSpec | None, *, gpus: int, **kwargs: Any) -> FitResult:
    """``fit --engine sglang --gpus N``: the smallest tensor-parallel size SGLang accepts on up to N
    GPUs (:func:`~oomdoctor.advisor.fit.tp_candidates`) whose pool holds one full-length request,
    else the one with the largest pool."""
    tried = [fit_sglang(geo, gpu, gpus=gpus, tensor_parallel_size=t, **kwargs) for t in tp_candidates(geo, gpus)]
    best = next((r for r in tried if r.fits), None) or max(tried, key=lambda r: (r.kv_tokens, -r.tensor_parallel_size))
    shown = tried[: tried.index(best) + 1] if best.fits else tried
    best.plans = [(r.tensor_parallel_size, r.fits, r.capacity_tokens) for r in shown]
    return best


#: the share of the memory before loading a minimal KV pool takes (remedies_sglang SGLANG_MIN_KV_SHARE)
MIN_KV_SHARE = 0.05


def sglang_default_reserve(before: int, version: str | None, tp: int = 1) -> int:
    """What SGLang's own default ``--mem-fraction-static`` keeps outside the static pool for
    activations and CUDA graphs, on a GPU whose free memory before loading was ``before``
    (:func:`default_fraction`, per version; no DP attention or speculative decoding: a lower bound)."""
    return int(before * (1 - default_fraction(parse_version(version) if version else None, before / MiB, tp)))


def weights_leave_no_room(context: Context) -> bool:
    """SGLang's "Load weight end" shows the weights leaving less free than SGLang's own reserve plus
    a minimal KV pool (MIN_KV_SHARE of the memory before loading): no ``--mem-fraction-static`` gives
    both a pool and the room activations and CUDA graphs take by default. Before loading = the
    "Load weight begin" figure, else free after + the weights' usage."""
    post = context.extra.get("sglang_avail_after_load_bytes")
    weights = context.weights_bytes
    if not isinstance(post, (int, float)) or not weights:
        return False
    pre = context.extra.get("sglang_avail_before_load_bytes")
    before = int(pre) if isinstance(pre, (int, float)) and pre > 0 else int(post) + weights
    tp = context.tensor_parallel_size or 1
    return post - MIN_KV_SHARE * before < sglang_default_reserve(before, context.engine_version, tp)
