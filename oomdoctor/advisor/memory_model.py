"""vLLM's GPU memory accounting (research/vllm-memory-model.md §0–§2), per version.

    requested   = total × gpu_memory_utilization
    kv_budget   = requested − weights − activation_peak − non_torch (− cuda-graph estimate, 0.20+)
    bytes/token = Σ_layers 2 × kv_heads_per_rank × head_dim × kv_dtype_bytes   (MLA: latent + rope)
    capacity    = floor(kv_budget / (block_size × bytes/token)) × block_size

:class:`Facts` resolves every input once, best source first (the failing message, the log's context
lines, ``--model-config``, the shipped catalog, user hints, vLLM's defaults) and records where each
value came from, so that every remedy can say it (``Remedy.sources``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from oomdoctor.advisor.catalog import (
    DTYPE_BYTES,
    ModelGeometry,
    find_gpu,
    find_model,
    load_config,
    with_dtype,
)
from oomdoctor.advisor.values import BLOCK_SIZE, ceil_div, round_down
from oomdoctor.report import Context, Finding
from oomdoctor.units import parse_size

GiB = 2**30
#: vLLM prints GiB with two decimals: a printed figure may be up to half a hundredth of a GiB off.
PRINT_HALF_STEP = int(0.005 * GiB)
#: block size assumed for MLA models when the log does not say (research §5, --block-size)
MLA_BLOCK_SIZE = 128

Version = tuple[int, int, int]


def parse_version(text: str | None) -> Version | None:
    if not text:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        return None
    return int(m[1]), int(m[2]), int(m[3] or 0)


def is_release(text: str | None) -> bool:
    """Whether a version string names a release (``0.7.0``, ``v0.6.6.post1``), not a build between
    releases (``0.6.7.dev12+gabc``, ``0.7.0rc1``). No version is not a release either."""
    return bool(text) and re.fullmatch(r"v?\d+\.\d+(?:\.\d+)?(?:\.post\d+)?", str(text).strip()) is not None


#: the release that changed vLLM's memory defaults together: --gpu-memory-utilization 0.9 → 0.92
#: (research §5) and the CUDA-graph estimate taken off the KV budget by default (research §2.4)
MEMORY_DEFAULTS_0_20: Version = (0, 20, 0)


def has_0_20_memory_defaults(version: Version | None) -> bool:
    """Whether ``version`` budgets memory as 0.20.0 and later do.

    The one unknown-version policy of the KV budget: an unknown version is read as a release before
    0.20.0 for both defaults at once (utilization 0.9, CUDA graphs outside the budget), so that the
    budget is always one that some vLLM release computes, never a mix of two.
    """
    return version is not None and version >= MEMORY_DEFAULTS_0_20


def default_utilization(version: Version | None) -> float:
    """--gpu-memory-utilization default: 0.9 up to 0.19.x, 0.92 from 0.20.0 (research §5)."""
    return 0.92 if has_0_20_memory_defaults(version) else 0.9


#: the device memory from which vLLM's V1 usage-context defaults raise max_num_seqs (research §5)
BIG_GPU = 70 * GiB


def default_max_num_seqs(version: Version | None, capacity: int | None, gpu_name: str | None = None) -> int | None:
    """--max-num-seqs when the log does not set it (research §5, "usage-context defaults in
    _set_default_args"): 256, except 1024 on GPUs with >= 70 GiB that are not A100 (0.8.4 on; 0.9.0
    excludes A100). 0.6.5-0.8.3 with V1 gave 1024 everywhere, so those versions (and an unknown
    capacity) stay unknown: None rather than a guess."""
    if version is not None and version < (0, 6, 5):
        return 256
    if capacity is None or (version is not None and version < (0, 8, 4)):
        return None
    if capacity >= BIG_GPU:
        if version is None:
            return None  # 1024, or 256 on an A100 from 0.9.0: the version decides
        a100 = "a100" in (gpu_name or "").lower()
        return 256 if a100 and version >= (0, 9, 0) else 1024
    return 256


def counts_cudagraphs_in_budget(version: Version | None) -> bool:
    """From 0.20.0 the CUDA-graph estimate is subtracted from the KV budget by default (research §2.4)."""
    return has_0_20_memory_defaults(version)


N = TypeVar("N", int, float)


def non_kv_bytes(weights: N, activation: N, non_torch: N, cudagraph: N, version: Version | None) -> N:
    """What vLLM takes from its budget before the KV cache: weights + activation peak + non-torch,
    and the CUDA-graph estimate where the version counts it (:func:`counts_cudagraphs_in_budget`)."""
    return weights + activation + non_torch + (cudagraph if counts_cudagraphs_in_budget(version) else 0)


def kv_budget(requested: N, weights: N, activation: N, non_torch: N, cudagraph: N, version: Version | None) -> N:
    """The KV budget (research §0–§2): requested − :func:`non_kv_bytes`. The one formula the
    post-mortem (:attr:`Facts.kv_budget`), the plan search and ``oomdoctor fit`` all use."""
    return requested - non_kv_bytes(weights, activation, non_torch, cudagraph, version)


def cudagraph_size_flag(version: Version | None) -> str | None:
    """The flag that caps CUDA-graph capture sizes in this version (research §5), or None."""
    if version is None:
        return None
    if version >= (0, 11, 1):
        return "--max-cudagraph-capture-size"
    if version >= (0, 9, 0):
        return "--cuda-graph-sizes"  # 0.9.0–0.11.0 (it lives on to 0.12.0, where the other one rules)
    return None


def capture_sizes(max_size: int) -> list[int]:
    """Sizes V1 0.11.1+ captures for a given maximum: [1,2,4] + 8..248 step 8 + 256..max step 16."""
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    sizes += [s for s in range(8, 256, 8) if s <= max_size]
    sizes += list(range(256, max_size + 1, 16))
    return sizes


def fp8_kv_flag_value(version: Version | None) -> str | None:
    """``--kv-cache-dtype`` value for fp8 in this version: fp8_e5m2 (0.3.0–0.4.0), fp8 (0.4.1+).

    None where the version has no fp8 KV cache (before 0.3.0; V1 0.8.0–0.8.1 refused it).
    """
    if version is None:
        return "fp8"
    if version < (0, 3, 0):
        return None
    if version < (0, 4, 1):
        return "fp8_e5m2"
    if (0, 8, 0) <= version < (0, 8, 2):
        return None
    return "fp8"


def fp8_online_value(version: Version | None) -> str:
    """``--quantization`` value that quantizes a 16-bit checkpoint to fp8 while loading: ``fp8``
    before 0.31.0; from 0.31.0 ``fp8`` refuses a checkpoint that is not fp8 ("no longer supports
    online quantization. Please use `--quantization fp8_per_tensor`", 0.31.0
    layers/quantization/fp8.py ``Fp8Config.__init__``)."""
    return "fp8_per_tensor" if version is not None and version >= (0, 31, 0) else "fp8"


def fp8_online_streams(version: Version | None) -> bool:
    """Whether online fp8 keeps the load peak near the fp8 size. Through 0.15.x
    ``Fp8LinearMethod``/``Fp8OnlineLinearMethod.create_weights`` allocate each weight on the GPU in
    the checkpoint's 16-bit dtype and quantize only after it is loaded, so the whole 16-bit model is
    created first (0.6.6, 0.10.1, 0.13.0, 0.15.0 quantization/fp8.py); from 0.16.0 the weights are
    created on the meta device and materialized, loaded and quantized layer by layer (0.16.0
    ``Fp8OnlineLinearMethod``, ``device="meta"``; 0.25.0+ quantization/online/fp8.py). False
    when the version is unknown."""
    return version is not None and version >= (0, 16, 0)


def fp8_weights_min_cc(version: Version | None) -> int:
    """Minimum compute capability of ``--quantization fp8``: 89 (0.5.x), 80 (0.6.0+), 75 (0.20.0+)."""
    if version is None:
        return 80
    if version >= (0, 20, 0):
        return 75
    if version >= (0, 6, 0):
        return 80
    return 89


@dataclass
class Value:
    value: Any
    source: str  # message | context | config | catalog | hint | default | derived


@dataclass
class Facts:
    """Every input of the memory model for one finding, with where it came from."""

    engine: str | None = None
    version: Version | None = None
    total: Value | None = None
    free: Value | None = None
    utilization: Value | None = None
    weights: Value | None = None
    activation: Value | None = None
    non_torch: Value | None = None
    cudagraph: Value | None = None
    bytes_per_token: Value | None = None
    geometry: Value | None = None  # ModelGeometry
    gpu: Value | None = None  # GpuSpec
    gpus: Value | None = None  # int
    block_size: Value = field(default_factory=lambda: Value(BLOCK_SIZE, "default"))
    max_model_len: Value | None = None
    tp: int = 1
    pp: int = 1
    kv_dtype_bytes: float = 2
    kv_cache_dtype: str | None = None

    def sources(self, *names: str) -> dict[str, str]:
        out = {}
        for n in names:
            v = getattr(self, n)
            if isinstance(v, Value):
                src = v.source
                if n == "geometry":
                    src = f"{v.source}: {v.value.source}"
                out[n] = src
        return out

    @property
    def requested(self) -> int | None:
        if self.total and self.utilization:
            return int(self.total.value * self.utilization.value)
        return None

    @property
    def kv_budget(self) -> int | None:
        """requested − non-KV terms; None unless weights are known."""
        req = self.requested
        if req is None or self.weights is None:
            return None
        return int(kv_budget(req, self.weights.value, self.activation.value if self.activation else 0,
                             self.non_torch.value if self.non_torch else 0,
                             self.cudagraph.value if self.cudagraph else 0, self.version))


def _fig(finding: Finding | None, name: str) -> Any:
    return finding.figures.get(name) if finding is not None else None


def _hint(hints: dict[str, str], *names: str) -> str | None:
    for n in names:
        for k in (n, n.replace("-", "_")):
            if hints.get(k):
                return hints[k]
    return None


def geometry_for(context: Context, hints: dict[str, str]) -> Value | None:
    """config.json (``--model-config``) first, then the catalog by the model name in the log or hint."""
    path = _hint(hints, "model-config")
    if path:
        try:
            return Value(with_dtype(load_config(path), context.dtype), "config")
        except (OSError, ValueError, KeyError, TypeError):
            pass
    for name, src in ((context.model, "catalog"), (_hint(hints, "model"), "catalog")):
        geo = find_model(name)
        if geo is not None:
            return Value(with_dtype(geo, context.dtype), src)
    return None


def facts(finding: Finding | None, context: Context, hints: dict[str, str] | None = None) -> Facts:
    hints = dict(hints or {})
    f = Facts()
    f.engine = (finding.engine if finding is not None else None) or context.engine
    f.version = parse_version(context.engine_version or _hint(hints, "vllm-version", "version"))
    gpu_name = _hint(hints, "gpu") or context.gpu_name
    spec = find_gpu(gpu_name)
    if spec is not None:
        f.gpu = Value(spec, "hint" if _hint(hints, "gpu") else "context")
    # total
    if _fig(finding, "total_bytes"):
        f.total = Value(int(_fig(finding, "total_bytes")), "message")
    elif context.gpu_total_bytes:
        f.total = Value(context.gpu_total_bytes, "context")
    elif _hint(hints, "gpu-memory"):
        f.total = Value(parse_size(_hint(hints, "gpu-memory") or "", "GiB"), "hint")
    elif spec is not None:
        f.total = Value(spec.memory_bytes, "catalog (reported capacity)" if spec.reported else "catalog (nominal size)")
    if _fig(finding, "free_bytes") is not None:
        f.free = Value(int(_fig(finding, "free_bytes")), "message")
    # utilization
    if _fig(finding, "gpu_memory_utilization"):
        f.utilization = Value(float(_fig(finding, "gpu_memory_utilization")), "message")
    elif context.gpu_memory_utilization:
        f.utilization = Value(context.gpu_memory_utilization, "context")
    elif f.engine == "vllm":
        f.utilization = Value(default_utilization(f.version), "default")
    f.tp = context.tensor_parallel_size or 1
    f.pp = context.pipeline_parallel_size or 1
    gpus = _hint(hints, "gpus")
    if gpus and gpus.isdigit():
        f.gpus = Value(int(gpus), "hint")
    elif context.gpu_count:
        f.gpus = Value(context.gpu_count, "context")
    if context.block_size:
        f.block_size = Value(context.block_size, "context")
    f.kv_cache_dtype = context.kv_cache_dtype
    if context.kv_cache_dtype and context.kv_cache_dtype != "auto":
        f.kv_dtype_bytes = DTYPE_BYTES.get(context.kv_cache_dtype, 2)
    geo = geometry_for(context, hints)
    f.geometry = geo
    if geo is not None and geo.value.is_mla and not context.block_size:
        # MLA backends force 64 (FlashMLA) or 128 (CUTLASS MLA) tokens per block: 128 is safe for both
        f.block_size = Value(MLA_BLOCK_SIZE, "default for MLA backends")
    if geo is not None and (not context.kv_cache_dtype or context.kv_cache_dtype == "auto"):
        f.kv_dtype_bytes = DTYPE_BYTES.get(geo.value.dtype, 2)
    # memory terms
    if context.weights_bytes:
        f.weights = Value(context.weights_bytes, "context")
    elif geo is not None and geo.value.weight_bytes() is not None:
        w = geo.value.weight_bytes()
        assert w is not None
        f.weights = Value(ceil_div(w, f.tp * f.pp), geo.source)
    if context.activation_peak_bytes is not None:
        f.activation = Value(context.activation_peak_bytes, "context")
    if context.non_torch_bytes is not None:
        f.non_torch = Value(context.non_torch_bytes, "context")
    graph = context.cudagraph_bytes or context.extra.get("cudagraph_estimate_bytes")
    if graph:
        f.cudagraph = Value(int(graph), "context")
    # max model len
    if _fig(finding, "max_seq_len"):
        f.max_model_len = Value(int(_fig(finding, "max_seq_len")), "message")
    elif context.max_model_len:
        f.max_model_len = Value(context.max_model_len, "context")
    elif geo is not None and geo.value.max_position_embeddings:
        f.max_model_len = Value(int(geo.value.max_position_embeddings), geo.source)
    f.bytes_per_token = _bytes_per_token(finding, context, f)
    return f


def _bytes_per_token(finding: Finding | None, context: Context, f: Facts) -> Value | None:
    """KV bytes per token per GPU: the message's needed/len, the log's size/tokens, else the geometry."""
    needed, max_len = _fig(finding, "kv_cache_needed_bytes"), _fig(finding, "max_seq_len")
    bs = f.block_size.value
    if needed and max_len:
        return Value(needed / (ceil_div(int(max_len), bs) * bs), "message")
    # the tokens the KV cache holds: the log's size line, else V0's "# GPU blocks: N" × the block size,
    # else the message's own count ("... stored in KV cache (21456)", blocks × block size in V0)
    tokens = context.kv_cache_tokens or (context.num_gpu_blocks * bs if context.num_gpu_blocks else None) or _fig(
        finding, "kv_cache_tokens")
    if context.kv_cache_bytes and tokens and context.kv_cache_bytes > 0:
        return Value(context.kv_cache_bytes / int(tokens), "context")
    if f.geometry is not None:
        geo: ModelGeometry = f.geometry.value
        if not geo.sliding_window_layers:
            per = geo.kv_entry_bytes(f.kv_dtype_bytes, f.tp) * geo.full_layers(f.pp)
            return Value(per, f.geometry.source)
    return None


def kv_bytes_for_len(geo: ModelGeometry, max_len: int, kv_dtype_bytes: float, block_size: int = BLOCK_SIZE,
                     tp: int = 1, pp: int = 1, max_num_batched_tokens: int = 2048) -> int:
    """vLLM's ``max_memory_usage_bytes`` summed over layers: one request of ``max_len`` tokens.

    Full attention: cdiv(len, block) pages; sliding window: cdiv(min(window − 1 + batched, len), block) + 1.
    """
    page = block_size * geo.kv_entry_bytes(kv_dtype_bytes, tp)
    full = ceil_div(max_len, block_size) * page * geo.full_layers(pp)
    sliding = 0.0
    if geo.sliding_layers(pp) and geo.sliding_window:
        n = min(geo.sliding_window - 1 + max_num_batched_tokens, max_len)
        sliding = (ceil_div(n, block_size) + 1) * page * geo.sliding_layers(pp)
    return int(full + sliding)


def capacity_tokens(geo: ModelGeometry, kv_budget: int, kv_dtype_bytes: float, block_size: int = BLOCK_SIZE,
                    tp: int = 1, pp: int = 1, limit: int | None = None, max_num_batched_tokens: int = 2048) -> int:
    """Largest multiple of the block size whose one request fits ``kv_budget`` (vLLM's estimate_max_model_len)."""
    if kv_budget <= 0:
        return 0
    hi = limit or 1 << 24
    lo, best = 1, 0
    while lo <= hi:  # binary search like vLLM's estimate_max_model_len
        mid = (lo + hi) // 2
        if kv_bytes_for_len(geo, mid, kv_dtype_bytes, block_size, tp, pp, max_num_batched_tokens) <= kv_budget:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return round_down(best, block_size) if best != limit else best


def capacity_from_figures(needed: int, available: int, max_len: int, block_size: int = BLOCK_SIZE) -> int:
    """Tokens that fit, from the V1 message's two printed sizes, taking each at its unfavourable edge.

    bytes/token = needed / (cdiv(max_len, block) × block); the printed GiB figures are rounded to
    0.01, so ``available`` is lowered and ``needed`` raised by half a step: the answer never exceeds
    what vLLM itself would estimate.
    """
    avail = available - PRINT_HALF_STEP
    need = needed + PRINT_HALF_STEP
    if avail <= 0:
        return 0
    per_token = need / (ceil_div(max_len, block_size) * block_size)
    return round_down(avail / per_token, block_size)
