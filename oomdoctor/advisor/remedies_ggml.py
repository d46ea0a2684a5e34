"""llama.cpp and ollama remedies. llama.cpp flags: common/arg.cpp (-ngl, -c, -ub, -ctk/-ctv, -fa);
ollama: envconfig (OLLAMA_NUM_PARALLEL, OLLAMA_FLASH_ATTENTION, OLLAMA_KV_CACHE_TYPE) and the
Modelfile/API options num_ctx, num_gpu and num_batch (``Options`` in the ollama Python client 0.6.3,
``ollama/_types.py``). ``ggml.*`` answer for llama.cpp logs, ``ollama.*`` for ollama: an ollama user
never gets a llama.cpp flag, since ollama starts its runner itself.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

from oomdoctor.advisor._engine_util import as_int, engine_of, is_true, product_of, setting
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.product_knobs import KEYWORD_PRODUCTS
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.unsized import unsized_remedy
from oomdoctor.advisor.values import round_down
from oomdoctor.i18n import join_sentences
from oomdoctor.report import Remedy
from oomdoctor.units import format_size

#: memory kept free for the KV cache and compute buffers when the log does not show them
GGML_HEADROOM_BYTES = 2**30
#: q8_0 stores 34 bytes per 32 values (8.5 bits) against 16 bits for f16
Q8_0_RATIO = 8.5 / 16
#: context sizes are rounded down to this many tokens
CTX_STEP = 256
#: ollama's default num_batch (api.DefaultOptions), used when the log does not show the batch
OLLAMA_NUM_BATCH = 512


def _kv_on_host(inp: AdviceInput) -> bool:
    """The log shows the KV cache in host memory (a CPU or CUDA_Host / ROCm_Host buffer)."""
    buf = str(inp.context.extra.get("llama_kv_buffer_type") or "")
    return buf == "CPU" or buf.endswith("_Host")


def _by_device(inp: AdviceInput, name: str) -> dict[str, int]:
    """One of llama.cpp's per-device sizes (``llama_kv_bytes``, ``llama_model_bytes``,
    ``llama_compute_bytes``, ``llama_free_bytes``: context rule llamacpp.buffers-by-device), GPU
    devices only (not CPU or a host buffer)."""
    table = inp.context.extra.get(f"{name}_by_device") or {}
    return {d: int(v) for d, v in table.items() if isinstance(v, (int, float)) and not _host_device(d)}


def _host_device(name: str) -> bool:
    return name.upper().startswith("CPU") or name.endswith("_Host") or name.endswith("_Mapped")


def _failing_device(inp: AdviceInput) -> str | None:
    """The device whose buffer failed: the buffer type the message names (CUDA1), else the device
    index it names among the devices the log lists."""
    buf = inp.fig("buffer_type")
    if isinstance(buf, str) and buf and not _host_device(buf):
        return buf
    idx = inp.fig("gpu_index")
    if isinstance(idx, int):
        names = set(_by_device(inp, "llama_free_bytes")) | set(_by_device(inp, "llama_kv_bytes")) \
            | set(_by_device(inp, "llama_model_bytes"))
        found = [n for n in names if _device_index(n) == idx]
        return found[0] if len(found) == 1 else None
    return None


def _device_index(name: str | None) -> int:
    """The index a device name ends in (CUDA1 -> 1); -1 without one."""
    digits = (name or "")[len((name or "").rstrip("0123456789")):]
    return int(digits) if digits else -1


def _gpu_kv(inp: AdviceInput) -> int | None:
    """KV-cache bytes held on the failing GPU (None when the log shows the cache in host memory).
    With the model over several GPUs, that GPU's own KV buffer, not the total ("KV self size")."""
    dev = _failing_device(inp)
    per_device = _by_device(inp, "llama_kv_bytes")
    if dev is not None and len(per_device) > 1:
        return per_device.get(dev)
    return None if _kv_on_host(inp) else inp.context.kv_cache_bytes


def _compute_buffer(inp: AdviceInput) -> bool:
    """The failing allocation is a compute buffer (at context creation or while decoding)."""
    from oomdoctor.advisor.cause import ggml_compute_buffer

    return ggml_compute_buffer(inp.finding)


def _kv_update(inp: AdviceInput) -> bool:
    """The failing compute buffer is the KV cache's own update graph (the K-shift of a context shift,
    or defragmentation), not a batch's: llama.cpp's llama_kv_cache_update_impl ("failed to allocate
    compute buffers", b4xxx) and llama_kv_cache::update ("failed to allocate compute graph for
    K-shift", b5640 to b7698, node-llama-cpp 3.10.0 to 3.15.0). That graph rotates the whole cache,
    n_ctx tokens, whatever the batch."""
    from oomdoctor.advisor.cause import ggml_kv_update

    return ggml_kv_update(inp.finding)


def _kv_failure(inp: AdviceInput) -> bool:
    """The log says the failing allocation is the KV cache ("failed to allocate buffer for kv cache")."""
    return inp.finding.rule == "llama.kv-cache-failed" or "kv cache" in inp.finding.message.lower()


def _batch_phase(inp: AdviceInput) -> bool:
    """The batch may size the failing allocation: while decoding (inference), or at context creation
    (kv-cache-alloc) when the log does not say it was the KV cache (the compute buffers are reserved
    right after it)."""
    phase = inp.finding.phase
    return phase == "inference" or (phase == "kv-cache-alloc" and not _kv_failure(inp)) or (
        phase == "unknown" and _compute_buffer(inp)  # a compute buffer whose step the log does not show
    )


def _attention_phase(inp: AdviceInput) -> bool:
    """The attention's buffers may be what failed: the KV cache or a compute buffer."""
    return inp.finding.phase in ("inference", "kv-cache-alloc") or _batch_phase(inp)


def _is_ollama(inp: AdviceInput) -> bool:
    return engine_of(inp) == "ollama"


def _is_llamacpp(inp: AdviceInput) -> bool:
    return engine_of(inp) in ("llama.cpp", "ggml")


def _fa_flag_value(inp: AdviceInput) -> str:
    """``-fa`` as the detected build takes it: a switch up to b5590, ``-fa on`` from b6431."""
    from oomdoctor.advisor.engine_args import switch_value

    version = inp.context.engine_version if inp.context.engine in ("llama.cpp", None) else None
    return switch_value("llama.cpp", "-fa", version, "on")


def _layers_fit(
    rid: str, offloaded: int | None, free: int | None, per_layer: float | None, request: int | None = None
) -> tuple[int, str, bool] | None:
    """Layers that fit: floor((free − headroom) / bytes per layer); without the free memory, the
    offloaded layers less ceil(failed request / bytes per layer) (whole layers that free the
    allocation that failed); else half the offloaded layers. With the why in ``rid``'s words and
    whether the value was computed."""
    if per_layer and not free and request and offloaded:
        drop = math.ceil(request / per_layer)
        if drop < offloaded:
            n = offloaded - drop
            why = remedy_text(rid, "why_drop", request=request, per_layer=per_layer, drop=drop, offloaded=offloaded, layers=n)
            return n, why, True
    if per_layer and free:
        n = int((free - GGML_HEADROOM_BYTES) // per_layer)
        if offloaded is None or n < offloaded:
            why = remedy_text(rid, "why_fit", free=free, headroom=GGML_HEADROOM_BYTES, per_layer=per_layer, layers=n)
            return max(n, 0), why, True
        # the log's free figure says everything fits, yet the allocation failed: it was wrong
        return offloaded // 2, remedy_text(rid, "why_half_wrong", offloaded=offloaded), False
    if offloaded and offloaded > 1:
        return offloaded // 2, remedy_text(rid, "why_half", offloaded=offloaded), False
    return None


def _per_layer(inp: AdviceInput, offloaded: int | None) -> float | None:
    """Bytes of one offloaded layer: the GPU's weight buffer (``CUDA0 buffer size``, printed after the
    weights loaded) or, when the weight buffer is what failed, the request, over the layers offloaded."""
    if not offloaded:
        return None
    weights = as_int(setting(inp, "llama_gpu_weights_bytes"))
    if weights and inp.finding.phase != "weights-load":
        return weights / offloaded
    req = inp.fig("requested_bytes") or inp.fig("buffer_bytes")
    if req and inp.finding.phase == "weights-load":
        return req / offloaded
    return None


def _failed_request(inp: AdviceInput) -> int | None:
    """The allocation that failed after the weights were in (a KV cache or compute buffer)."""
    if inp.finding.phase == "weights-load":
        return None
    return as_int(inp.fig("requested_bytes") or inp.fig("buffer_bytes"))


@remedy("ggml.n-gpu-layers")
def n_gpu_layers(inp: AdviceInput) -> Remedy | None:
    if not _is_llamacpp(inp):
        return None
    # llama.cpp prints "offloaded N/M layers" only after the buffers are allocated, so a failing
    # load rarely shows it: fall back to -ngl from the command line, then to every layer.
    offloaded = as_int(setting(inp, "llama_offloaded_layers", "n_gpu_layers", "gpu_layers"))
    n_layer = as_int(setting(inp, "llama_n_layer"))
    assumed = ""
    if n_layer and (offloaded is None or offloaded > n_layer + 1):
        if offloaded is None:
            assumed = remedy_text("ggml.n-gpu-layers", "why_assumed", n_layer=n_layer)
        offloaded = n_layer + 1
    free = as_int(setting(inp, "llama_device_free_bytes")) or _hint_bytes(inp)
    per_layer = _per_layer(inp, offloaded)
    model, dev = _by_device(inp, "llama_model_bytes"), _failing_device(inp)
    if offloaded and dev in model and len(model) > 1 and inp.finding.phase != "weights-load":
        # the layers are split over several GPUs: one layer fewer frees the failing GPU's share of a
        # layer (its weight buffer over the layers offloaded), and no one device's free memory
        # bounds the total
        free, per_layer = None, model[dev] / offloaded
    fit = _layers_fit("ggml.n-gpu-layers", offloaded, free, per_layer, _failed_request(inp))
    if fit is None:
        return _unsized_layers(inp, "ggml.n-gpu-layers")
    value, why, computed = fit
    return Remedy(
        id="ggml.n-gpu-layers",
        title=remedy_text("ggml.n-gpu-layers", "title", layers=value),
        flags={"-ngl": str(value)},
        fits=True if computed and not assumed else None,
        confidence="medium" if computed else "low",
        why=join_sentences(t for t in (why, assumed) if t),
    )


def _hint_bytes(inp: AdviceInput) -> int | None:
    from oomdoctor.units import SizeError, parse_size

    raw = inp.hints.get("gpu-memory")
    if not raw:
        return None
    try:
        return parse_size(raw)
    except SizeError:
        return None


@remedy("ollama.num-gpu")
def num_gpu(inp: AdviceInput) -> Remedy | None:
    if not _is_ollama(inp):
        return None
    offloaded = as_int(setting(inp, "ollama_layers_offload", "llama_offloaded_layers", "n_gpu_layers"))
    model_layers = as_int(setting(inp, "ollama_layers_model"))
    free = as_int(setting(inp, "ollama_memory_available_bytes", "llama_device_free_bytes")) or _hint_bytes(inp)
    repeating = as_int(setting(inp, "ollama_weights_repeating_bytes"))
    per_layer = repeating / (model_layers - 1) if (repeating and model_layers and model_layers > 1) else _per_layer(inp, offloaded)
    short = ollama_shortfall(inp)
    if short is not None and per_layer and offloaded:
        # ollama's layer plan left room for its graph estimate, and the buffer needed more: the
        # layers to drop are those whose weights free the shortfall, not the whole buffer
        req, graph, missing = short
        drop = math.ceil(missing / per_layer)
        if drop < offloaded:
            value = offloaded - drop
            return Remedy(
                id="ollama.num-gpu",
                title=remedy_text("ollama.num-gpu", "title", layers=value),
                settings={"num_gpu": str(value)},
                saves_bytes=int(drop * per_layer),
                fits=True,
                confidence="medium",
                why=join_sentences([
                    remedy_text("ollama.num-gpu", "why_estimate", graph=graph, request=req, missing=missing,
                                per_layer=per_layer, drop=drop, offloaded=offloaded, layers=value),
                    remedy_text("ollama.num-gpu", "why_set"),
                ]),
            )
    fit = _layers_fit("ollama.num-gpu", offloaded, free, per_layer, _failed_request(inp))
    if fit is None:
        return _num_gpu_unsized(inp)
    value, why, computed = fit
    return Remedy(
        id="ollama.num-gpu",
        title=remedy_text("ollama.num-gpu", "title", layers=value),
        settings={"num_gpu": str(value)},
        fits=True if computed else None,
        confidence="medium" if computed else "low",
        why=join_sentences([why, remedy_text("ollama.num-gpu", "why_set")]),
    )


def _unsized_layers(inp: AdviceInput, rid: str) -> Remedy | None:
    """The weights do not fit and the log shows neither the layers offloaded nor the free memory:
    fewer layers is still the lever, with no number to put on it (the setting is a count of layers:
    no value is given rather than an invented one)."""
    cause = inp.finding.cause
    if cause is None or cause.id != "weights-exceed-device":
        return None
    rem = unsized_remedy(rid)
    if rid == "ollama.num-gpu":
        rem.why = join_sentences([rem.why, remedy_text(rid, "why_set")])
    return rem


def _num_gpu_unsized(inp: AdviceInput) -> Remedy | None:
    return _unsized_layers(inp, "ollama.num-gpu")


def _ctx_value(inp: AdviceInput) -> tuple[int, int] | None:
    if inp.finding.phase == "weights-load":
        return None  # the context does not change the weights' size
    n_ctx = inp.context.max_model_len or as_int(setting(inp, "ctx_size"))
    if not n_ctx or n_ctx < 2 * CTX_STEP:
        return None
    return n_ctx, round_down(n_ctx // 2, CTX_STEP)


class CtxPlan(NamedTuple):
    """A context size (total tokens, every slot together) and the figures that chose it."""

    total: int  #: tokens of context, all slots together (llama.cpp's n_ctx)
    key: str  #: the why template: ``why`` / ``why_kv`` (halved), ``why_alloc`` / ``why_cut`` (computed)
    kv: int | None  #: KV-cache bytes on the failing GPU for the current n_ctx
    per_token: float | None  #: kv / n_ctx
    cut: int | None  #: tokens fewer that free the failed request (why_cut)
    saves: int | None
    room: int | None = None  #: free memory at load less the weights on the failing GPU (why_attn_free)


def _ctx_plan(inp: AdviceInput, n_ctx: int, half: int) -> CtxPlan:
    """The context to use, from the KV bytes per token the log prints where it can (named formula):

    * the KV cache's own allocation failed (kv-cache-alloc): that request *is* the cache for n_ctx
      tokens, so per_token = request / n_ctx; the free memory is not in the log, so the context is
      halved, saving half the request;
    * a later allocation failed on the GPU holding the printed KV cache: per_token = KV / n_ctx, and
      cut = ⌈request / per_token⌉ tokens fewer free the request: n_ctx − cut, rounded down to 256;
    * otherwise half of n_ctx.
    """
    req = inp.fig("requested_bytes") or inp.fig("buffer_bytes")
    if inp.finding.phase == "kv-cache-alloc" and req and _kv_failure(inp):
        per = req / n_ctx
        return CtxPlan(half, "why_alloc", int(req), per, None, int(req - half * per))
    kv = _gpu_kv(inp)
    attn = _attn_ctx_plan(inp, n_ctx, kv, as_int(req))
    if attn is not None:
        return attn
    same_gpu = str(inp.context.extra.get("llama_kv_buffer_type") or "") == str(inp.fig("buffer_type") or "") \
        or _failing_device(inp) in _by_device(inp, "llama_kv_bytes")
    if kv and req and same_gpu:
        per = kv / n_ctx
        cut = math.ceil(req / per)
        total = round_down(n_ctx - cut, CTX_STEP)
        if total >= CTX_STEP:
            return CtxPlan(total, "why_cut", int(kv), per, cut, int((n_ctx - total) * per))
    return CtxPlan(half, "why_kv" if kv else "why", kv, None, None, kv // 2 if kv else None)


def _attn_scales(inp: AdviceInput) -> bool:
    """A compute buffer failed without flash attention: it holds n_ctx × n_ubatch attention scores
    per head, so it grows with the context like the KV cache does."""
    from oomdoctor.advisor.cause import ggml_fa_on

    return _compute_buffer(inp) and not ggml_fa_on(inp.context)


def _free_for_layers(inp: AdviceInput) -> int | None:
    """Free memory at load on the failing GPU less its weights (llama.cpp's "MiB free" and "model
    buffer size" lines): what its KV cache and compute buffers had; None unless the log shows both."""
    dev = _failing_device(inp)
    free, model = _by_device(inp, "llama_free_bytes"), _by_device(inp, "llama_model_bytes")
    if dev is not None and dev in free and dev in model:
        return free[dev] - model[dev]
    if len(free) == 1 and len(model) == 1 and set(free) == set(model):
        (d,) = free
        return free[d] - model[d]
    return None


def _attn_ctx_plan(inp: AdviceInput, n_ctx: int, kv: int | None, req: int | None) -> CtxPlan | None:
    """The context at which a compute buffer that grows with it fits (no flash attention): both the
    KV cache (kv) and the compute buffer (the failed request) are linear in n_ctx, so at n tokens they
    take (kv + req) × n / n_ctx. Named formula: with the GPU's free memory at load less its weights
    (room), n = n_ctx × (room − 1 GiB headroom) / (kv + req); without it, the tokens whose KV cache
    pays for the shorter context's compute buffer, n = n_ctx × kv / (kv + req) (nothing else free).
    Rounded down to 256; None when the log lacks the figures or the result is no context at all,
    and unless the log shows flash attention off (with it on the compute buffer barely grows with
    the context, and the KV cache alone must make room for it: _ctx_plan's why_cut)."""
    from oomdoctor.advisor.cause import ggml_fa_off

    if not req or not kv or not _compute_buffer(inp) or not ggml_fa_off(inp.context):
        return None
    room = _free_for_layers(inp)
    if room is not None and room - GGML_HEADROOM_BYTES < kv + req:
        tokens, key = n_ctx * (room - GGML_HEADROOM_BYTES) / (kv + req), "why_attn_free"
    else:
        tokens, key = n_ctx * kv / (kv + req), "why_attn"
    total = round_down(int(tokens), CTX_STEP)
    if total < CTX_STEP or total >= n_ctx:
        return None
    return CtxPlan(total, key, int(kv), (kv + req) / n_ctx, None, int((n_ctx - total) * (kv + req) / n_ctx), room)


#: llama.cpp server's messages when a request's tokens find no free cell in the KV cache: the
#: context (n_ctx, shared by the -np slots) is too small for the request, not too large for the GPU
_KV_FULL_RULES = ("llama.server-kv-cache-full", "llama.server-kv-cache-retry")


@remedy("ggml.ctx-size")
def ctx_size(inp: AdviceInput) -> Remedy | None:
    if not _is_llamacpp(inp) or inp.finding.rule in _KV_FULL_RULES:
        return None
    v = _ctx_value(inp)
    if v is None:
        return _ctx_unsized(inp)
    n_ctx, half = v
    plan = _ctx_plan(inp, n_ctx, half)
    value = plan.total
    return Remedy(
        id="ggml.ctx-size",
        title=remedy_text("ggml.ctx-size", "title" if value == half else "title_cut", tokens=value),
        flags={"-c": str(value)},
        saves_bytes=plan.saves,
        # sized from the GPU's free memory with headroom: fits (as far as the buffer is linear in n_ctx)
        fits=True if plan.key == "why_attn_free" else None,
        confidence=_ctx_confidence(inp, n_ctx),
        why=_ctx_why(inp, plan, n_ctx),
        tradeoff=remedy_text("ggml.ctx-size", "cost", value=value),
    )


def _ctx_unsized(inp: AdviceInput) -> Remedy | None:
    """A compute buffer that grows with the context (no flash attention, or the K-shift graph)
    failed and the log does not show n_ctx: the context is still a lever, named without a value
    (its ``title_bare`` wording), at low confidence, after the knobs the log can size."""
    if inp.finding.phase == "weights-load" or not (_attn_scales(inp) or _kv_update(inp)) \
            or as_int(setting(inp, "ctx_size")) or _command_value(inp, ("-c", "--ctx-size")) is not None:
        return None
    if _kv_update(inp):
        return unsized_remedy("ggml.ctx-size", "bare")
    # Python bindings take the context as the n_ctx keyword (Llama(n_ctx=...), LlamaCpp(n_ctx=...))
    return unsized_remedy("ggml.ctx-size", "attn_bare_py" if _python_binding(inp) else "attn_bare")


def _python_binding(inp: AdviceInput) -> bool:
    """The program takes llama.cpp's arguments as Python keywords (product_knobs.KEYWORD_PRODUCTS of
    the ggml family: llama-cpp-python's Llama, LangChain's LlamaCpp)."""
    spec = KEYWORD_PRODUCTS.get(product_of(inp) or "")
    return spec is not None and spec.family == "ggml."


def _ctx_why(inp: AdviceInput, plan: CtxPlan, n_ctx: int) -> str:
    from oomdoctor.advisor.cause import ggml_ctx_is_train

    why = remedy_text(
        "ggml.ctx-size", plan.key, n_ctx=n_ctx, kv=plan.kv, per_token=plan.per_token, cut=plan.cut,
        request=inp.fig("requested_bytes") or inp.fig("buffer_bytes"), tokens=plan.total,
        headroom=GGML_HEADROOM_BYTES, room=plan.room,
    )
    train = ggml_ctx_is_train(inp.context) if _is_llamacpp(inp) else None
    if not train:
        return why
    key = "why_train_py" if _python_binding(inp) else "why_train"
    return join_sentences([why, remedy_text("ggml.ctx-size", key, n_ctx=train)])


def _ctx_confidence(inp: AdviceInput, n_ctx: int) -> Literal["medium", "low"]:
    """A compute buffer that failed at a short context (below LONG_CTX) without flash attention is
    not the context's doing first: flash attention and the batch come before a shorter context."""
    from oomdoctor.advisor.cause import LONG_CTX

    return "low" if _attn_scales(inp) and n_ctx < LONG_CTX else "medium"


#: the plans whose context is computed from the log's figures (not halved)
_COMPUTED_PLANS = ("why_cut", "why_attn", "why_attn_free")


@remedy("ollama.num-ctx")
def num_ctx(inp: AdviceInput) -> Remedy | None:
    if not _is_ollama(inp):
        return None
    v = _ctx_value(inp)
    if v is None:
        return None
    n_ctx, half = v
    parallel = as_int(setting(inp, "ollama_num_parallel", "parallel")) or 1
    per_slot = n_ctx // parallel
    # ollama's runner holds num_ctx × slots tokens: the same plan over the total, shared by the slots
    plan = _ctx_plan(inp, n_ctx, half)
    value = round_down(plan.total // parallel, CTX_STEP)
    if value < CTX_STEP:
        return None
    computed = plan.key in _COMPUTED_PLANS
    return Remedy(
        id="ollama.num-ctx",
        title=remedy_text("ollama.num-ctx", "title_cut" if computed else "title", tokens=value),
        settings={"num_ctx": str(value)},
        saves_bytes=plan.saves,
        fits=None,
        confidence=_ctx_confidence(inp, n_ctx),
        why=join_sentences(t for t in (
            remedy_text(
                "ollama.num-ctx", "why_parallel" if parallel > 1 else "why", n_ctx=n_ctx, parallel=parallel, per_slot=per_slot
            ),
            remedy_text(
                "ggml.ctx-size", plan.key, n_ctx=n_ctx, kv=plan.kv, per_token=plan.per_token, cut=plan.cut,
                request=inp.fig("requested_bytes") or inp.fig("buffer_bytes"), tokens=plan.total,
                headroom=GGML_HEADROOM_BYTES, room=plan.room,
            ) if plan.key in ("why_alloc", *_COMPUTED_PLANS) else "",
        ) if t),
        tradeoff=remedy_text("ollama.num-ctx", "cost", value=value),
    )


def _ollama_kv_too_small(inp: AdviceInput, share: float) -> bool:
    """ollama's estimate fell short of a compute buffer by more than ``share`` of the KV cache its
    offload line states (memory.required.kv) could give back: a KV change cannot cover it."""
    short = ollama_shortfall(inp)
    kv = as_int(setting(inp, "ollama_required_kv_bytes"))
    return bool(short and kv is not None and kv * share < short[2])


@remedy("ollama.num-parallel")
def num_parallel(inp: AdviceInput) -> Remedy | None:
    if not _is_ollama(inp) or inp.finding.phase == "weights-load" or _ollama_kv_too_small(inp, 1.0):
        return None
    cur = as_int(setting(inp, "ollama_num_parallel", "parallel"))
    if cur is not None and cur <= 1:
        return None
    return Remedy(
        id="ollama.num-parallel",
        title=remedy_text("ollama.num-parallel", "title"),
        env={"OLLAMA_NUM_PARALLEL": "1"},
        fits=None,
        confidence="medium" if cur else "low",
        why=remedy_text("ollama.num-parallel", "why_now" if cur else "why", current=cur),
    )


def _kv_quantized(inp: AdviceInput) -> bool:
    dt = (inp.context.kv_cache_dtype or "").lower()
    return dt.startswith("q") or str(setting(inp, "cache_type_k") or "").startswith("q")


#: a KV-type change saving less than this share of the failed allocation cannot matter to it
NEGLIGIBLE_SHARE = 0.1


def _kv_type_pointless(inp: AdviceInput) -> bool:
    """A smaller KV type cannot answer this failure: a compute buffer failed while the log does not
    show flash attention on (a quantized cache does not shrink that buffer, and the flash attention
    a quantized V cache needs shrinks it by itself: ggml.flash-attn, with no quality cost), the log
    puts the cache in host memory (a GPU allocation failed), or the cache is so small that q8_0
    saves under a tenth of the failed request."""
    if _kv_on_host(inp) or _attn_scales(inp):
        return True
    kv, req = _gpu_kv(inp), _failed_request(inp)
    return bool(kv and req and kv * (1 - Q8_0_RATIO) < NEGLIGIBLE_SHARE * req)


@remedy("ggml.kv-cache-type")
def kv_cache_type(inp: AdviceInput) -> Remedy | None:
    if not _is_llamacpp(inp) or _kv_quantized(inp) or inp.finding.phase == "weights-load" or _kv_type_pointless(inp):
        return None
    kv = _gpu_kv(inp)
    return Remedy(
        id="ggml.kv-cache-type",
        title=remedy_text("ggml.kv-cache-type", "title"),
        flags={"--cache-type-k": "q8_0", "--cache-type-v": "q8_0", "-fa": _fa_flag_value(inp)},
        saves_bytes=int(kv * (1 - Q8_0_RATIO)) if kv else None,
        fits=None,
        confidence="medium",
        why=remedy_text("ggml.kv-cache-type", "why_sized" if kv else "why", kv=kv, q8=kv * Q8_0_RATIO if kv else None),
    )


@remedy("ollama.kv-cache-type")
def ollama_kv_cache_type(inp: AdviceInput) -> Remedy | None:
    if not _is_ollama(inp) or _kv_quantized(inp) or inp.finding.phase == "weights-load" or _kv_type_pointless(inp) \
            or _ollama_kv_too_small(inp, 1 - Q8_0_RATIO):
        return None
    kv = _gpu_kv(inp)
    return Remedy(
        id="ollama.kv-cache-type",
        title=remedy_text("ollama.kv-cache-type", "title"),
        env={"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_FLASH_ATTENTION": "1"},
        saves_bytes=int(kv * (1 - Q8_0_RATIO)) if kv else None,
        fits=None,
        confidence="medium",
        why=join_sentences([
            remedy_text("ollama.kv-cache-type", "why_sized" if kv else "why", kv=kv, q8=kv * Q8_0_RATIO if kv else None),
            remedy_text("ollama.kv-cache-type", "why_fa"),
        ]),
    )


def _fa_on(inp: AdviceInput) -> bool:
    return is_true(setting(inp, "llama_flash_attn", "flash_attn"))


@remedy("ggml.flash-attn")
def flash_attn(inp: AdviceInput) -> Remedy | None:
    if not _is_llamacpp(inp) or _fa_on(inp) or not _attention_phase(inp) or _kv_update(inp) \
            or inp.finding.rule == "ggml.context-pool-exhausted":
        return None  # (GGML-era ggml's fixed context pool: those builds had no flash attention)
    return Remedy(
        id="ggml.flash-attn",
        title=remedy_text("ggml.flash-attn", "title"),
        flags={"-fa": _fa_flag_value(inp)},
        fits=None,
        confidence="low" if _ubatch_raised(inp) else "medium",
        why=remedy_text("ggml.flash-attn", "why"),
    )


@remedy("ollama.flash-attention")
def ollama_flash_attention(inp: AdviceInput) -> Remedy | None:
    if not _is_ollama(inp) or _fa_on(inp) or not _attention_phase(inp) or _kv_update(inp):
        return None
    return Remedy(
        id="ollama.flash-attention",
        title=remedy_text("ollama.flash-attention", "title"),
        env={"OLLAMA_FLASH_ATTENTION": "1"},
        fits=None,
        confidence="medium",
        why=remedy_text("ollama.flash-attention", "why"),
    )


#: llama.cpp's default -ub / n_ubatch (common/common.h, since the split of -b and -ub in 2024)
LLAMACPP_DEFAULT_UBATCH = 512


@remedy("ggml.ubatch-size")
def ubatch_size(inp: AdviceInput) -> Remedy | None:
    if not _is_llamacpp(inp) or not _batch_phase(inp) or _kv_update(inp):
        return None
    if inp.finding.rule == "ggml.context-pool-exhausted" and n_batch_pool(inp) is not None:
        # GGML-era ggml's fixed context pool (no -ub before 2024) overflowed by a stated batch
        # above what it is sized for: that batch is the remedy (ggml.n-batch-pool)
        return None
    cur = (as_int(setting(inp, "llama_n_ubatch", "ubatch_size"))
           or as_int(_command_value(inp, ("-ub", "--ubatch-size"))) or LLAMACPP_DEFAULT_UBATCH)
    if cur < 64:
        return None
    value = cur // 2
    req = inp.fig("requested_bytes") or inp.fig("buffer_bytes")
    return Remedy(
        id="ggml.ubatch-size",
        title=remedy_text("ggml.ubatch-size", "title", batch=value),
        flags={"-ub": str(value), "-b": str(value)},
        saves_bytes=req // 2 if req else None,
        fits=None,
        confidence="medium",
        why=remedy_text("ggml.ubatch-size", "why_sized" if req else "why", current=cur, request=req),
    )


@remedy("ollama.num-batch")
def ollama_num_batch(inp: AdviceInput) -> Remedy | None:
    """ollama's counterpart of -ub/-b: the runner's batch (num_batch, default 512) sizes the compute buffer."""
    if not _is_ollama(inp) or not _batch_phase(inp) or _kv_update(inp):
        return None
    stated = as_int(setting(inp, "ollama_num_batch", "batch_size"))
    cur = stated or OLLAMA_NUM_BATCH
    if cur < 64:
        return None
    value = cur // 2
    req = inp.fig("requested_bytes") or inp.fig("buffer_bytes")
    key = ("why_sized" if req else "why") + ("" if stated else "_default")
    return Remedy(
        id="ollama.num-batch",
        title=remedy_text("ollama.num-batch", "title", batch=value),
        settings={"num_batch": str(value)},
        saves_bytes=req // 2 if req else None,
        fits=None,
        confidence="medium",
        why=join_sentences([
            remedy_text("ollama.num-batch", key, current=cur, request=req),
            remedy_text("ollama.num-batch", "why_set"),
        ]),
    )


def _command_value(inp: AdviceInput, names: tuple[str, ...]) -> str | None:
    """The value of the first of ``names`` (``-b 2048``, ``--batch-size=2048``) in the launch command."""
    argv = inp.context.command or []
    for i, tok in enumerate(argv):
        key, eq, val = tok.partition("=")
        if key in names:
            return val if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


#: the batch ggml's fixed scratch pools were sized for (llama.cpp 2023, before ggml-alloc: llama.cpp's
#: MEM_REQ_SCRATCH0/1 tables assume n_batch <= 512, the default of -b and of llama-cpp-python's n_batch)
GGML_POOL_BATCH = 512


@remedy("ggml.n-batch-pool")
def n_batch_pool(inp: AdviceInput) -> Remedy | None:
    """ggml's context pool overflowed ("not enough space in the context's memory pool"): the fixed
    scratch pools hold a batch of at most 512 tokens; the log's larger n_batch goes back to 512."""
    if not _is_llamacpp(inp) or inp.finding.rule != "ggml.context-pool-exhausted":
        return None
    cur = as_int(setting(inp, "n_batch", "batch_size")) or as_int(_command_value(inp, ("-b", "--batch-size")))
    if cur is None or cur <= GGML_POOL_BATCH:
        return None
    return Remedy(
        id="ggml.n-batch-pool",
        title=remedy_text("ggml.n-batch-pool", "title", batch=GGML_POOL_BATCH),
        flags={"-b": str(GGML_POOL_BATCH)},
        saves_bytes=None,
        fits=None,
        confidence="medium",
        why=remedy_text("ggml.n-batch-pool", "why", current=cur, batch=GGML_POOL_BATCH),
    )


@remedy("ggml.no-context-shift")
def no_context_shift(inp: AdviceInput) -> Remedy | None:
    """The K-shift graph of a context shift failed (llama.cpp's server shifting a full context
    instead of stopping): ``--no-context-shift`` (a switch in every sampled build, b3889 to b10361;
    context shift is off by default from a build between b6122 and b6301, which adds
    ``--context-shift``) stops the server from shifting, so the graph is never built."""
    if not _is_llamacpp(inp) or not _kv_update(inp):
        return None
    return Remedy(
        id="ggml.no-context-shift",
        title=remedy_text("ggml.no-context-shift", "title"),
        flags={"--no-context-shift": ""},
        fits=None,
        confidence="medium",
        why=remedy_text("ggml.no-context-shift", "why"),
    )


@remedy("ggml.ctx-size.raise")
def ctx_size_raise(inp: AdviceInput) -> Remedy | None:
    """llama.cpp's server found no free space in its KV cache for a request: the context it was
    started with (n_ctx, split over the -np slots) is too small; twice the stated n_ctx."""
    if not _is_llamacpp(inp) or inp.finding.rule not in _KV_FULL_RULES:
        return None
    n_ctx = inp.context.max_model_len or as_int(setting(inp, "ctx_size"))
    if not n_ctx:
        return None
    value = 2 * n_ctx
    return Remedy(
        id="ggml.ctx-size.raise",
        title=remedy_text("ggml.ctx-size.raise", "title", tokens=value),
        flags={"-c": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text("ggml.ctx-size.raise", "why", n_ctx=n_ctx, tokens=value),
    )


def _ubatch_raised(inp: AdviceInput) -> bool:
    """The log states a physical batch above llama.cpp's default: every part of the compute buffer
    grows with it, so halving it comes before flash attention (which drops only the attention scores)."""
    stated = as_int(setting(inp, "llama_n_ubatch", "ubatch_size")) or as_int(_command_value(inp, ("-ub", "--ubatch-size")))
    return bool(stated and stated > LLAMACPP_DEFAULT_UBATCH)


def _ubatch_now(inp: AdviceInput) -> int:
    return (as_int(setting(inp, "llama_n_ubatch", "ubatch_size"))
            or as_int(_command_value(inp, ("-ub", "--ubatch-size"))) or LLAMACPP_DEFAULT_UBATCH)


@remedy("ggml.ubatch-size.pipeline")
def ubatch_size_pipeline(inp: AdviceInput) -> Remedy | None:
    """llama.cpp fell back from pipeline parallelism to one compute-buffer copy (a recovered
    failure): optional, the n_ubatch at which the pipelined buffer fits where the single one did.
    The buffer grows with n_ubatch, so n_ubatch × (single buffer that fitted / pipelined request),
    rounded down to a power of two; only when the log prints both on the failing device."""
    cause = inp.finding.cause
    if not _is_llamacpp(inp) or cause is None or cause.id != "pipeline-parallel-fallback":
        return None
    dev = _failing_device(inp)
    req = as_int(inp.fig("buffer_bytes") or inp.fig("requested_bytes"))
    single = _by_device(inp, "llama_compute_bytes").get(dev or "")
    if not dev or not req or not single or single >= req:
        return None
    cur = _ubatch_now(inp)
    scaled = cur * single / req
    if scaled < 32:
        return None
    value = 1 << math.floor(math.log2(scaled))
    if value >= cur:
        return None
    return Remedy(
        id="ggml.ubatch-size.pipeline",
        title=remedy_text("ggml.ubatch-size.pipeline", "title", batch=value),
        flags={"-ub": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text("ggml.ubatch-size.pipeline", "why", device=dev, request=req, current=cur, single=single, batch=value),
    )


#: percent steps of a --tensor-split (llama.cpp normalises the proportions it is given)
TS_TOTAL = 100


def _split_figures(inp: AdviceInput, dev: str) -> tuple[list[str], dict[str, int], dict[str, int], bool] | None:
    """(devices in index order, free at load per device, bytes the device needs besides its layers,
    whether a compute buffer was assumed) when the log gives every GPU's free memory, model and KV
    buffers; None otherwise."""
    free = _by_device(inp, "llama_free_bytes")
    model = _by_device(inp, "llama_model_bytes")
    kv = _by_device(inp, "llama_kv_bytes")
    devices = sorted(free, key=lambda d: (len(d), d))
    if len(devices) < 2 or dev not in devices or any(d not in model or d not in kv for d in devices):
        return None
    req = as_int(inp.fig("buffer_bytes") or inp.fig("requested_bytes"))
    if not req:
        return None
    compute = _by_device(inp, "llama_compute_bytes")
    fixed = {d: (req if d == dev else compute.get(d, req)) for d in devices}
    assumed = any(d not in compute for d in devices if d != dev)
    return devices, free, fixed, assumed


@remedy("ggml.tensor-split")
def tensor_split(inp: AdviceInput) -> Remedy | None:
    """A ggml buffer failed on one of several GPUs: rebalance the layers with --tensor-split.

    Named formula (only with every GPU's free memory at load, model and KV buffers in the log, and
    a failure after the weights loaded): room_d = free_d − fixed_d − headroom, where fixed_d is the
    device's compute buffer (the failed request on the failing device; the printed one, else the
    failed request, on the others); the layers' bytes (model + KV buffers, which follow the split)
    are shared in proportion to room_d, in whole percent, the failing device's share rounded down.
    The saving is on the failing device alone: its layers' bytes now − its share of all of them."""
    if not _is_llamacpp(inp) or inp.finding.phase == "weights-load":
        return None
    dev = _failing_device(inp)
    multi = (
        _device_index(dev) >= 1 or (as_int(inp.fig("gpu_index")) or 0) >= 1
        or len(_by_device(inp, "llama_free_bytes") or _by_device(inp, "llama_model_bytes")) > 1
        or bool(inp.context.extra.get("llama_n_copies"))
        or (as_int(setting(inp, "llama_gpu_devices")) or 0) > 1
        or _command_value(inp, ("-ts", "--tensor-split")) is not None
    )
    if not multi or dev is None:
        return None
    on_dev = sum(_by_device(inp, n).get(dev, 0) for n in ("llama_model_bytes", "llama_kv_bytes"))
    req = as_int(inp.fig("buffer_bytes") or inp.fig("requested_bytes"))
    if on_dev and req and req > on_dev:
        return None  # more than all the layers the log shows on that GPU: a split cannot free it
    figs = _split_figures(inp, dev)
    if figs is None:
        return unsized_remedy("ggml.tensor-split", device=dev)
    devices, free, fixed, assumed = figs
    model, kv = _by_device(inp, "llama_model_bytes"), _by_device(inp, "llama_kv_bytes")
    layers = {d: model[d] + kv[d] for d in devices}
    room = {d: max(free[d] - fixed[d] - GGML_HEADROOM_BYTES, 0) for d in devices}
    total_room, total_layers = sum(room.values()), sum(layers.values())
    if total_room < total_layers or room[dev] <= 0:
        return None  # no split holds them all: fewer layers on the GPUs, not another split
    share = {d: room[d] * TS_TOTAL // total_room for d in devices}
    biggest = max((d for d in devices if d != dev), key=lambda d: room[d])
    share[biggest] += TS_TOTAL - sum(share.values())
    saves = layers[dev] - share[dev] * total_layers // TS_TOTAL
    if saves <= 0 or share[dev] <= 0:
        return None  # the failing GPU holds no more than its share already
    split = ",".join(str(share[d]) for d in devices)
    return Remedy(
        id="ggml.tensor-split",
        title=remedy_text("ggml.tensor-split", "title", device=dev, split=split),
        flags={"-ts": split},
        saves_bytes=int(saves),
        fits=None,
        confidence="medium",
        why=remedy_text(
            "ggml.tensor-split", "why", device=dev, headroom=GGML_HEADROOM_BYTES, layers=total_layers,
            saves=saves, room=" : ".join(f"{d} {format_size(room[d])}" for d in devices),
            assumed=remedy_text("ggml.tensor-split", "assumed_request" if assumed else "assumed_printed",
                                request=inp.fig("buffer_bytes") or inp.fig("requested_bytes")),
        ),
    )


def _ollama_graph(inp: AdviceInput) -> int | None:
    """The compute graph ollama planned its layers with: max(memory.graph.full, .partial) (ollama
    v0.5.7 llm/memory.go EstimateGPULayers reserves the larger on every GPU)."""
    vals = [as_int(setting(inp, k)) for k in ("ollama_graph_full_bytes", "ollama_graph_partial_bytes")]
    known = [v for v in vals if v]
    return max(known) if known else None


def ollama_shortfall(inp: AdviceInput) -> tuple[int, int, int] | None:
    """(failed compute buffer, ollama's graph estimate, how much more the buffer needed) when a
    compute buffer failed and ollama's estimate in its offload line was smaller."""
    if not _is_ollama(inp) or not _compute_buffer(inp):
        return None
    graph = _ollama_graph(inp)
    req = as_int(inp.fig("buffer_bytes") or inp.fig("requested_bytes"))
    if not graph or not req or req <= graph:
        return None
    return req, graph, req - graph


@remedy("ollama.gpu-overhead")
def ollama_gpu_overhead(inp: AdviceInput) -> Remedy | None:
    """ollama's estimate of the compute graph was short of the buffer that failed: OLLAMA_GPU_OVERHEAD
    (bytes per GPU, envconfig since v0.3.10) = the shortfall, rounded up to a MiB, so the layer plan
    leaves that room."""
    short = ollama_shortfall(inp)
    if short is None:
        return None
    req, graph, missing = short
    value = math.ceil(missing / 2**20) * 2**20
    return Remedy(
        id="ollama.gpu-overhead",
        title=remedy_text("ollama.gpu-overhead", "title", overhead=value),
        env={"OLLAMA_GPU_OVERHEAD": str(value)},
        fits=True,
        confidence="medium",
        why=remedy_text("ollama.gpu-overhead", "why", graph=graph, request=req, overhead=value),
    )
