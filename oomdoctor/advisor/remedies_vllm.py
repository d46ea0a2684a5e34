"""vLLM remedies computed from the failing message's figures, the log's context and the memory model.

Formulas follow ``research/vllm-memory-model.md`` (§0 one-screen model, §2 V1 accounting, §5 flags per
version, §6 quantization). Every calculator returns None for other engines, when its inputs are
missing, or when the flag is already at the value it would recommend.
"""

from __future__ import annotations

from oomdoctor.advisor._engine_util import as_int, checkpoint_quantized
from oomdoctor.advisor.catalog import ModelGeometry
from oomdoctor.advisor.memory_model import (
    PRINT_HALF_STEP,
    Facts,
    GiB,
    capacity_from_figures,
    capacity_tokens,
    capture_sizes,
    cudagraph_size_flag,
    default_max_num_seqs,
    facts,
    fp8_kv_flag_value,
    fp8_online_streams,
    fp8_online_value,
    fp8_weights_min_cc,
    kv_budget,
    kv_bytes_for_len,
    non_kv_bytes,
)
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.remedies_rl import FRAMEWORK_OF_PRODUCT
from oomdoctor.advisor.unsized import unsized_remedy
from oomdoctor.advisor.values import (
    MAX_UTILIZATION,
    UTILIZATION_MARGIN,
    ceil_gib,
    ceil_to,
    floor_to,
    fmt_fraction,
    round_down,
)
from oomdoctor.advisor.vllm_budget import is_v0
from oomdoctor.advisor.vllm_weights_budget import weights_over_budget
from oomdoctor.i18n import _, join_sentences
from oomdoctor.report import Remedy
from oomdoctor.units import format_size

#: AWQ/GPTQ 4-bit with group size 128 (research §6): ≈ 0.52–0.53 bytes per parameter.
FOUR_BIT_BYTES_PER_PARAM = 0.53


def _four_bit_checkpoint(model: str | None) -> str:
    """The ``model`` setting of a 4-bit remedy: which checkpoint to serve, in the language in force."""
    if model:
        return remedy_text("vllm.quantization-4bit", "setting", model=model)
    return remedy_text("vllm.quantization-4bit", "setting_unnamed")


def is_vllm(inp: AdviceInput) -> bool:
    return inp.finding.engine == "vllm" or inp.context.engine == "vllm"


def _preemption_elsewhere(inp: AdviceInput) -> bool:
    """V0's preemption warning inside an RL framework's rollout: no vLLM flag to give (the framework's
    rollout settings are not sized by this warning). The RL frameworks are remedies_rl's: they configure
    vLLM through their own settings (verl's actor_rollout_ref.rollout.*, OpenRLHF's --vllm_*, ...)."""
    return inp.finding.kind == "vllm.kv-cache.preemption" and inp.finding.product in FRAMEWORK_OF_PRODUCT


def get_facts(inp: AdviceInput) -> Facts:
    cached = inp.__dict__.get("_facts")
    if cached is None:
        cached = facts(inp.finding, inp.context, inp.hints)
        inp.__dict__["_facts"] = cached
    return cached


def _block(f: Facts) -> int:
    return int(f.block_size.value)


#: the remedies.toml entry that words the KV capacity's basis
_LEN = "vllm.max-model-len"


def kv_capacity_tokens(inp: AdviceInput) -> tuple[int, str, str] | None:
    """Tokens the KV cache can hold: (tokens, how we know, source)."""
    f = get_facts(inp)
    est = inp.fig("estimated_max_model_len")
    if est:
        return int(est), remedy_text(_LEN, "basis_estimate", tokens=est), "message"
    tokens = inp.fig("kv_cache_tokens")
    if tokens:
        return int(tokens), remedy_text(_LEN, "basis_stated", tokens=tokens), "message"
    needed, avail, max_len = (
        inp.fig("kv_cache_needed_bytes"),
        inp.fig("kv_cache_available_bytes"),
        inp.fig("max_seq_len"),
    )
    geo: ModelGeometry | None = f.geometry.value if f.geometry else None
    if needed and avail is not None and max_len and avail > 0 and geo is not None and geo.sliding_window_layers:
        # sliding-window layers need a fixed amount, not bytes ∝ length: search like vLLM does
        model_need = kv_bytes_for_len(geo, int(max_len), f.kv_dtype_bytes, _block(f), f.tp, f.pp)
        if abs(model_need - needed) <= max(PRINT_HALF_STEP, needed // 100):
            cap = capacity_tokens(geo, int(avail) - PRINT_HALF_STEP, f.kv_dtype_bytes, _block(f), f.tp, f.pp,
                                  limit=int(max_len))
            return cap, remedy_text(
                _LEN, "basis_window", available=avail, tokens=cap, model=geo.name,
                window_layers=geo.sliding_window_layers, layers=geo.layers, window=geo.sliding_window,
            ), "message"
    if needed and avail is not None and max_len and avail > 0:
        cap = capacity_from_figures(int(needed), int(avail), int(max_len), _block(f))
        return cap, remedy_text(
            _LEN, "basis_figures", max_len=max_len, needed=needed, available=avail, tokens=cap
        ), "message"
    ctx = inp.context
    if ctx.kv_cache_tokens:
        return ctx.kv_cache_tokens, remedy_text(_LEN, "basis_log", tokens=ctx.kv_cache_tokens), "context"
    if ctx.num_gpu_blocks:
        t = ctx.num_gpu_blocks * _block(f)
        return t, remedy_text(_LEN, "basis_blocks", blocks=ctx.num_gpu_blocks, block=_block(f)), "context"
    return None


def shortage_is_lower_bound(inp: AdviceInput) -> bool:
    """True when :func:`shortage` only knows part of the need (no blocks, one request's KV unknown)."""
    f = get_facts(inp)
    if weights_over_budget(inp.finding, inp.context) is not None:
        return True  # the weights after the failing one are not counted
    return inp.finding.kind == "vllm.kv-cache.no-blocks" and not (f.bytes_per_token and f.max_model_len)


def covers(saves: int | None, inp: AdviceInput) -> bool | None:
    """Does saving ``saves`` bytes alone make the failure fit? None when unknown."""
    short = shortage(inp)
    if saves is None or short is None or short[0] <= 0:
        return None
    if saves < short[0]:
        return False
    return None if shortage_is_lower_bound(inp) else True


#: the remedy whose texts word the shortage and the utilization ceiling
_KV = "vllm.gpu-memory-utilization.raise-for-kv"
#: raising utilization when the log does not size the shortage against the KV cache
_RAISE = "vllm.gpu-memory-utilization.raise"
#: lowering utilization to leave room for what runs outside vLLM's budget
_LOWER = "vllm.gpu-memory-utilization.lower"


def shortage(inp: AdviceInput) -> tuple[int, str] | None:
    """Bytes missing for this failure to fit, and the figures behind it (in the language in force)."""
    f = get_facts(inp)
    needed, avail = inp.fig("kv_cache_needed_bytes"), inp.fig("kv_cache_available_bytes")
    if needed and avail is not None:
        return int(needed - avail), remedy_text(_KV, "basis_needed", needed=needed, available=avail)
    tokens, max_len = inp.fig("kv_cache_tokens"), inp.fig("max_seq_len")
    bpt = f.bytes_per_token.value if f.bytes_per_token else None
    if tokens and max_len and bpt:
        miss = int((max_len - tokens) * bpt)
        return miss, remedy_text(_KV, "basis_tokens", max_len=max_len, tokens=tokens, per_token=int(bpt))
    kv = avail if avail is not None else inp.context.kv_cache_bytes
    if inp.finding.kind == "vllm.kv-cache.no-blocks" and kv is not None:
        one = int(f.max_model_len.value * bpt) if (bpt and f.max_model_len) else 0
        miss = max(0, -int(kv)) + one
        if one:
            length = f.max_model_len.value  # type: ignore[union-attr]
            return miss, remedy_text(_KV, "basis_budget_one", kv=int(kv), length=length, one=one)
        return miss, remedy_text(_KV, "basis_budget", kv=int(kv))
    building = weights_over_budget(inp.finding, inp.context)
    if building is not None:
        # the weights being created already exceed the budget: what must leave the GPU is the excess
        # over it, not the request's excess over the free memory (vllm_weights_budget.py)
        return building.over, remedy_text(
            _KV, "basis_building", built=building.built, request=building.request, budget=building.budget,
            util=f"{building.utilization:.2f}", total=building.total,
        )
    desired, free = inp.fig("desired_bytes"), inp.fig("free_bytes")
    if desired and free is not None:
        return int(desired - free), remedy_text(_KV, "basis_desired", desired=desired, free=free)
    req = inp.fig("requested_bytes")
    if req and free is None and inp.finding.rule == "vllm.weights.not-enough-memory":
        # "Not enough GPU memory to allocate 24576 MiB for the model weights" names the whole model,
        # not what is missing: with no free figure beside it the shortfall is unknown (at most that)
        return None
    if req:
        if free is not None and free < req:
            return int(req - free), remedy_text(_KV, "basis_requested_free", request=req, free=free)
        return int(req), remedy_text(_KV, "basis_requested", request=req)
    return None


@remedy("vllm.kv-cache-memory-bytes")
def kv_cache_memory_bytes(inp: AdviceInput) -> Remedy | None:
    """The user sized the KV cache (``--kv-cache-memory-bytes``, vLLM >= 0.11) and one request of the
    max length needs more: the value is what vLLM says is needed, rounded up to 0.01 GiB. Whether
    the GPU holds it is not known: vLLM's "Initial free memory" is measured before the weights load."""
    needed = inp.fig("kv_cache_needed_bytes")
    if not is_vllm(inp) or not _kv_bytes_set(inp) or not needed:
        return None
    step = GiB // 100
    value = -(-int(needed) // step) * step
    return Remedy(
        id="vllm.kv-cache-memory-bytes",
        title=remedy_text("vllm.kv-cache-memory-bytes", "title", size=value),
        flags={"--kv-cache-memory-bytes": str(value)},
        saves_bytes=None,
        fits=None,
        confidence="medium",
        why=remedy_text("vllm.kv-cache-memory-bytes", "why", needed=int(needed), size=value),
        sources={"needed": "message"},
    )


def no_blocks(inp: AdviceInput) -> bool:
    """vLLM's "No available memory for the cache blocks" with the budget exhausted (not the CUDA-graph
    estimate): weights, the profile run's activation peak and graphs took all of
    gpu_memory_utilization × total. Its knobs beyond the message's own are offered worded when the
    log does not size them (research vllm-memory-model.md §1.1, §2.3)."""
    cause = inp.finding.cause
    return inp.finding.kind == "vllm.kv-cache.no-blocks" and cause is not None and cause.id == "kv-budget-exhausted"


#: rounding of a lowered --max-model-len
MAX_MODEL_LEN_STEP = 256


def v0_engine(inp: AdviceInput) -> bool:
    """The log is V0's: a V0 rule's wording, V0's "Initializing an LLM engine" (V1 says "a V1 LLM
    engine"), or a release before 0.8 (V1 the default from 0.8.0)."""
    article = str(inp.context.extra.get("vllm_engine_article") or "").strip()
    return inp.finding.rule.startswith("vllm.v0.") or article == "an" or is_v0(get_facts(inp).version)


def _max_model_len_for_profile(inp: AdviceInput) -> Remedy | None:
    """Half the run's --max-model-len for "no cache blocks": in V0 without chunked prefill the profile
    batch is max(max_model_len, 2048) tokens; worded when the log does not give the length. Not in V1
    (or an unknown engine): there the profile batch is max_num_batched_tokens, whatever the length."""
    if not v0_engine(inp):
        return None
    f = get_facts(inp)
    cur = f.max_model_len.value if f.max_model_len else None
    value = round_down(cur // 2, MAX_MODEL_LEN_STEP) if cur else 0
    if not cur or value < 2048:
        return unsized_remedy("vllm.max-model-len", "noblocks")
    return Remedy(
        id="vllm.max-model-len",
        title=remedy_text("vllm.max-model-len", "title", tokens=value),
        flags={"--max-model-len": str(value)},
        fits=None,
        confidence="low",
        why=remedy_text("vllm.max-model-len", "why_noblocks_sized", current=cur, value=value),
        tradeoff=remedy_text("vllm.max-model-len", "cost", tokens=value),
        sources=f.sources("max_model_len"),
    )


@remedy("vllm.max-model-len")
def max_model_len(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    cap = kv_capacity_tokens(inp)
    if cap is None:
        return _max_model_len_for_profile(inp) if no_blocks(inp) else None
    f = get_facts(inp)
    tokens, why, src = cap
    bs = _block(f)
    value = round_down(tokens, bs)
    if value <= 0:
        return None
    max_len = f.max_model_len.value if f.max_model_len else None
    if max_len and value >= max_len:
        return None
    bpt = f.bytes_per_token.value if f.bytes_per_token else None
    saves = int((max_len - value) * bpt) if (bpt and max_len) else None
    return Remedy(
        id="vllm.max-model-len",
        title=remedy_text("vllm.max-model-len", "title", tokens=value),
        flags={"--max-model-len": str(value)},
        saves_bytes=saves,
        fits=True,
        confidence="high",
        why=remedy_text("vllm.max-model-len", "why", basis=why, block=bs),
        tradeoff=(
            remedy_text("vllm.max-model-len", "cost_supported", tokens=value, max_len=max_len)
            if max_len
            else remedy_text("vllm.max-model-len", "cost", tokens=value)
        ),
        sources={"capacity": src, **f.sources("max_model_len", "block_size", "bytes_per_token")},
    )


def _util_cap(f: Facts, inp: AdviceInput) -> tuple[float, str]:
    """Highest utilization oomdoctor recommends: 0.95, and never above what the device can give vLLM.

    A message that states free memory and what this process holds (a PyTorch OOM inside vLLM:
    vLLM's own memory is not free) caps it at (in use + free) / total, the share other processes
    leave; free memory stated alone (vLLM's start-up check, measured before vLLM allocates) caps it
    at free / total. No built-in KV-shortage message states free memory.
    """
    if f.free and f.total:
        free, total = f.free.value, f.total.value
        held = inp.fig("in_use_bytes")
        if held:
            by_free = floor_to((held + free) / total, 2)
            why = remedy_text(_KV, "cap_held", held=int(held), free=free, total=total)
        else:
            by_free = floor_to(free / total, 2)
            why = remedy_text(_KV, "cap_free", free=free, total=total)
        if by_free < MAX_UTILIZATION:
            return by_free, why
    return MAX_UTILIZATION, remedy_text(_KV, "cap_ceiling")


def _kv_bytes_set(inp: AdviceInput) -> bool:
    """The KV cache has the size the user set (``kv_cache_memory_bytes``): the utilization does not size it."""
    return bool(inp.context.extra.get("kv_cache_memory_set"))


@remedy(_KV)
def raise_utilization_for_kv(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp) or _kv_bytes_set(inp):
        return None
    f = get_facts(inp)
    short = shortage(inp)
    if not (short and f.total and f.utilization) or short[0] <= 0:
        return None
    missing, why_missing = short
    util, total = f.utilization.value, f.total.value
    target = ceil_to(util + missing / total, 2)
    if target <= util:
        target = round(util + 0.01, 2)
    cap, cap_why = _util_cap(f, inp)
    fits: bool | None = target <= cap
    lower_bound = shortage_is_lower_bound(inp)
    exact = target
    if lower_bound and target < cap:
        target = min(cap, ceil_to(target + 0.02, 2))  # room for at least a few blocks
    notes: list[str] = []
    if f.weights and f.weights.value > total * cap:
        notes.append(remedy_text(_KV, "why_weights", weights=f.weights.value, cap=fmt_fraction(cap)))
    nominal = f.total.source.startswith("catalog (nominal")
    if nominal:
        notes.append(remedy_text(_KV, "why_nominal"))
    key = ("why_at_least" if lower_bound else "why") + ("" if fits else "_over")
    title = remedy_text(_KV, "title", fraction=fmt_fraction(target))
    if not fits:
        title = remedy_text(_KV, "title_cannot")
    return Remedy(
        id=_KV,
        title=title,
        flags={"--gpu-memory-utilization": fmt_fraction(target)} if fits else {},
        saves_bytes=None,
        fits=None if (fits and (lower_bound or nominal)) else fits,
        confidence="medium" if (fits and not nominal) else "low",
        why=join_sentences([
            remedy_text(
                _KV, key, missing=missing, basis=why_missing, util=fmt_fraction(util), total=total,
                target=fmt_fraction(target), exact=fmt_fraction(exact), cap=fmt_fraction(cap), cap_basis=cap_why,
            ),
            *notes,
        ]),
        sources=f.sources("total", "utilization", "free", "weights"),
    )


#: GPUs assumed at most when the log does not say how many there are (one node)
ASSUMED_MAX_GPUS = 8
#: below this share of the GPU, a utilization that fits the free memory is no answer by itself
TAKEN_SHARE = 0.2
#: step added to the current utilization when the log does not show how much is missing
UTILIZATION_STEP = 0.05


def _negative_kv_budget(inp: AdviceInput) -> bool:
    """vLLM's "no cache blocks" with the KV budget the log states at or below zero ("Available KV
    cache memory: -2.77 GiB"): what a raise must give back is known, the deficit plus one request."""
    avail = inp.fig("kv_cache_available_bytes")
    kv = avail if avail is not None else inp.context.kv_cache_bytes
    return inp.finding.kind == "vllm.kv-cache.no-blocks" and kv is not None and kv <= 0


@remedy(_RAISE)
def raise_utilization(inp: AdviceInput) -> Remedy | None:
    """vLLM's own advice ("Try increasing gpu_memory_utilization") when the log shows no shortfall.

    Value: the current utilization (message, context, or the version's default) + :data:`UTILIZATION_STEP`,
    never above oomdoctor's ceiling or free/total.
    """
    if not is_vllm(inp) or _kv_bytes_set(inp) or raise_utilization_for_kv(inp) is not None:
        return None
    if _preemption_elsewhere(inp):
        return None
    f = get_facts(inp)
    if not f.utilization:
        return None
    util = f.utilization.value
    cap, cap_why = _util_cap(f, inp)
    target = min(cap, round(util + UTILIZATION_STEP, 2))
    if target <= util:
        return None
    told = "gpu_memory_utilization" in inp.finding.message
    src = f.utilization.source
    base = (
        remedy_text(_RAISE, "base_default") if src == "default"
        else remedy_text(_RAISE, "base_log") if src in ("message", "context") else src
    )
    short = shortage(inp)
    # the step gives back (target - util) x total (unknown without the log's total)
    gain = (target - util) * f.total.value if f.total else None
    if short and short[0] > 0 and not shortage_is_lower_bound(inp):
        # a shortfall beyond what the step gives back even on the largest card oomdoctor knows is not
        # closed by this raise (other remedies size it). The total is unknown here: with a total, a
        # shortfall makes raise_utilization_for_kv answer, and this calculator stands aside above
        from oomdoctor.advisor.catalog import gpus

        if short[0] > (target - util) * max(g.memory_bytes for g in gpus()):
            return None
    blind = _negative_kv_budget(inp) and short is not None and short[0] > 0 and gain is None
    if blind:
        # a stated KV budget at or below zero and no total: the step gives back (target − util) ×
        # total, enough only on a GPU of missing / (target − util) or more; not known to be enough
        assert short is not None
        return Remedy(
            id=_RAISE,
            title=remedy_text(_RAISE, "title", fraction=fmt_fraction(target)),
            flags={"--gpu-memory-utilization": fmt_fraction(target)},
            fits=False,
            confidence="low",
            why=remedy_text(
                _RAISE, "why_blind", missing=short[0], basis=short[1], util=fmt_fraction(util),
                target=fmt_fraction(target), min_total=-(-short[0] * 100 // round((target - util) * 100)),
            ),
            sources=f.sources("utilization", "free", "total"),
        )
    tokens, max_len = as_int(inp.fig("kv_cache_tokens")), as_int(inp.fig("max_seq_len"))
    unknown = (
        remedy_text(_RAISE, "missing_no_total", missing=short[0]) if short and short[0] > 0
        # the message gives the tokens: what is missing is known in tokens, not in bytes
        else remedy_text(_RAISE, "missing_tokens", short=max_len - tokens, max_len=max_len, tokens=tokens)
        if (tokens and max_len and max_len > tokens) else remedy_text(_RAISE, "missing_unknown")
    )
    # the profiler reserved a stated CUDA-graph estimate: when the raise gives back less than that
    # ((target - util) x total, or an unknown amount), the estimate is the budget's real sink
    graphs = f.cudagraph.value if f.cudagraph else None
    outweighed = graphs is not None and (gain is None or gain < graphs)
    return Remedy(
        id=_RAISE,
        title=remedy_text(_RAISE, "title", fraction=fmt_fraction(target)),
        flags={"--gpu-memory-utilization": fmt_fraction(target)},
        saves_bytes=None,
        fits=None,
        confidence="medium" if told and not outweighed else "low",
        why=join_sentences([
            *([remedy_text(_RAISE, "why_told")] if told else []),
            *([remedy_text(_RAISE, "why_graphs", graphs=graphs)] if outweighed else []),
            remedy_text(
                _RAISE, "why_capped" if target == cap else "why", unknown=unknown, util=fmt_fraction(util), base=base,
                step=f"{UTILIZATION_STEP:.2f}", cap=fmt_fraction(cap), cap_basis=cap_why, target=fmt_fraction(target),
            ),
        ]),
        sources=f.sources("utilization", "free", "total"),
    )


@remedy("vllm.cudagraph-estimate-off")
def cudagraph_estimate_off(inp: AdviceInput) -> Remedy | None:
    """The profiler reserved its CUDA-graph estimate inside the budget (0.18+; default on from 0.20)."""
    if not is_vllm(inp) or inp.context.enforce_eager:
        return None
    f = get_facts(inp)
    if not f.cudagraph or (f.version is not None and f.version < (0, 18, 0)):
        return None
    graph = f.cudagraph.value
    return Remedy(
        id="vllm.cudagraph-estimate-off",
        title=remedy_text("vllm.cudagraph-estimate-off", "title"),
        env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"},
        saves_bytes=graph,
        fits=None,
        confidence="medium",
        why=remedy_text("vllm.cudagraph-estimate-off", "why", graph=graph),
        sources=f.sources("cudagraph"),
    )


def fp8_kv_support(inp: AdviceInput) -> tuple[str | None, str]:
    """(flag value or None, why it cannot help, in words). None: this GPU/version cannot store the KV cache in fp8."""
    f = get_facts(inp)
    value = fp8_kv_flag_value(f.version)
    if value is None:
        return None, remedy_text("vllm.kv-cache-dtype-fp8", "why_no_version", version=str(inp.context.engine_version))
    if f.gpu is not None and f.gpu.value.cc < 80:
        gpu = f.gpu.value
        return None, remedy_text("vllm.kv-cache-dtype-fp8", "why_no_gpu", gpu=gpu.name, cc=f"{gpu.cc / 10:.1f}")
    return value, ""


@remedy("vllm.kv-cache-dtype-fp8")
def kv_cache_fp8(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    f = get_facts(inp)
    if f.kv_cache_dtype and f.kv_cache_dtype.startswith("fp8"):
        return None
    if f.kv_dtype_bytes < 2:
        return None
    value, reason = fp8_kv_support(inp)
    ratio = 1 / f.kv_dtype_bytes  # fp8 stores 1 byte where the model dtype stores kv_dtype_bytes
    needed, avail = inp.fig("kv_cache_needed_bytes"), inp.fig("kv_cache_available_bytes")
    cap = kv_capacity_tokens(inp)
    max_len = f.max_model_len.value if f.max_model_len else None
    bs = _block(f)
    sources = {"kv dtype": "context" if inp.context.dtype else "default (16-bit)", **f.sources("gpu")}
    if value is None:
        return Remedy(
            id="vllm.kv-cache-dtype-fp8",
            title=remedy_text("vllm.kv-cache-dtype-fp8", "title_impossible"),
            flags={},
            fits=False,
            confidence="low",
            why=reason,
            tradeoff="",
            sources=sources,
        )
    flags = {"--kv-cache-dtype": value}
    if needed and avail is not None and avail > 0:
        after = int(needed * ratio)
        fits = avail >= after
        saves = int(needed) - after
        why = remedy_text("vllm.kv-cache-dtype-fp8", "why_bytes", needed=needed, after=after, available=avail)
    elif cap and max_len:
        doubled = int(cap[0] / ratio)
        fits = doubled >= max_len
        saves = None
        why = remedy_text("vllm.kv-cache-dtype-fp8", "why_tokens", tokens=cap[0], doubled=doubled, max_len=max_len)
    else:
        return None
    title = remedy_text("vllm.kv-cache-dtype-fp8", "title")
    if not fits and cap and max_len:
        # fp8 alone is not enough: combine with the longest max-model-len the fp8 cache holds
        longer = round_down(min(cap[0] / ratio, max_len), bs)
        if longer > cap[0]:
            flags["--max-model-len"] = str(longer)
            fits = True
            title = remedy_text("vllm.kv-cache-dtype-fp8", "title_len", tokens=longer)
            why += remedy_text("vllm.kv-cache-dtype-fp8", "why_len", tokens=longer, factor=f"{1 / ratio:g}")
    gpu_note = ""
    if f.gpu is not None and not f.gpu.value.fp8_tensor_cores:
        gpu_note = remedy_text("vllm.kv-cache-dtype-fp8", "why_gpu", gpu=f.gpu.value.name)
    return Remedy(
        id="vllm.kv-cache-dtype-fp8",
        title=title,
        flags=flags,
        saves_bytes=saves,
        fits=fits,
        confidence="medium",
        why=why + gpu_note,
        sources={**sources, **(({"capacity": cap[2]}) if cap else {})},
    )


_FREE = "vllm.gpu-memory-utilization.fit-free"


@remedy(_FREE)
def utilization_fit_free(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    f = get_facts(inp)
    if not (f.free and f.total):
        return None
    free, total = f.free.value, f.total.value
    value = min(MAX_UTILIZATION, floor_to(free / total - UTILIZATION_MARGIN, 2))
    if value <= 0:
        return None
    util = f.utilization.value if f.utilization else None
    if util is not None and value >= util:
        return None
    saves = int((util - value) * total) if util else None
    fits: bool | None = True
    note = ""
    if f.weights is not None:
        budget = value * total - f.weights.value - (f.activation.value if f.activation else 0)
        if budget <= 0:
            fits, note = False, remedy_text(_FREE, "why_weights", weights=f.weights.value)
    elif value < TAKEN_SHARE:
        # most of the card is taken: a budget this small serves only a tiny model, and the log does not say
        fits = None
        note = remedy_text(_FREE, "why_tiny", left=int(value * total))
    return Remedy(
        id=_FREE,
        title=remedy_text(_FREE, "title", fraction=fmt_fraction(value)),
        flags={"--gpu-memory-utilization": fmt_fraction(value)},
        saves_bytes=saves,
        fits=fits,
        confidence="high" if fits else "low",
        why=remedy_text(_FREE, "why", free=free, total=total, ratio=f"{free / total:.4f}", margin=UTILIZATION_MARGIN)
        + note,
        sources=f.sources("free", "total", "utilization"),
    )


#: the release that renamed VLLM_SKIP_DEEP_GEMM_WARMUP=1 (0.10.2-0.11.0) to VLLM_DEEP_GEMM_WARMUP=skip
#: (vllm 0.11.1 vllm/envs.py; both read by kernel_warmup before it calls deep_gemm_warmup)
DEEP_GEMM_WARMUP_RENAMED = (0, 11, 1)


@remedy("vllm.deep-gemm-warmup")
def deep_gemm_warmup(inp: AdviceInput) -> Remedy | None:
    """The DeepGEMM kernel warm-up failed (a frame of vllm/model_executor/warmup/deep_gemm_warmup.py):
    its own buffers, before CUDA graphs are captured; vLLM's switch leaves the warm-up out."""
    frame = inp.context.extra.get("deep_gemm_frame")
    if not is_vllm(inp) or not frame:
        return None
    version = get_facts(inp).version
    old = version is not None and version < DEEP_GEMM_WARMUP_RENAMED
    env = {"VLLM_SKIP_DEEP_GEMM_WARMUP": "1"} if old else {"VLLM_DEEP_GEMM_WARMUP": "skip"}
    return Remedy(
        id="vllm.deep-gemm-warmup",
        title=remedy_text("vllm.deep-gemm-warmup", "title"),
        env=env,
        # the failing allocation is the warm-up's own: skipping the warm-up removes it (with no version
        # in the log, under the current name; the why gives the 0.10.2-0.11.0 one)
        fits=True,
        confidence="medium",
        why=remedy_text("vllm.deep-gemm-warmup", "why" if version is not None else "why_unknown_version", frame=frame),
        sources={"warm-up frame": "context"},
    )


def graph_pool_bytes(inp: AdviceInput) -> int | None:
    """What CUDA graphs hold, from PyTorch's own message: "N allocated in private pools (e.g., CUDA
    Graphs)", once capture is over (while capturing, the pools are only what was captured so far)."""
    pools = inp.fig("private_pool_bytes")
    if not isinstance(pools, int) or isinstance(pools, bool) or inp.finding.phase == "cudagraph-capture":
        return None
    return pools


def _eager_why(capturing: bool, graph: int | None, pools: int | None) -> str:
    """The template of --enforce-eager's why: while capturing, or after; with the graphs' size from
    vLLM's own log, from PyTorch's private pools (never while capturing), or none."""
    if capturing:
        return "why_capture_graph" if graph else "why_capture"
    if graph is not None and graph == pools:
        return "why_pools"
    return "why_graph" if graph else "why"


@remedy("vllm.enforce-eager")
def enforce_eager(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp) or inp.context.enforce_eager:
        return None
    if inp.context.extra.get("deep_gemm_frame"):
        return None  # the DeepGEMM warm-up runs before any graph is captured: skipping capture frees nothing it needs
    phase = inp.finding.phase
    if phase in ("weights-load", "startup-check", "training"):
        return None
    f = get_facts(inp)
    if phase == "profiling" and not (f.version and f.version >= (0, 18, 0)):
        return None  # graphs are captured after profiling before 0.18 (research §2.4)
    graph = f.cudagraph.value if f.cudagraph else None
    sources = f.sources("cudagraph")
    pools = graph_pool_bytes(inp)
    if graph is None and pools is not None:
        graph = pools
        sources = {"cudagraph": "message (private pools)"}
    short = shortage(inp)
    fits = True if (graph and short and graph >= short[0]) else None
    return Remedy(
        id="vllm.enforce-eager",
        title=remedy_text("vllm.enforce-eager", "title"),
        flags={"--enforce-eager": ""},
        saves_bytes=graph,
        fits=fits,
        confidence="high" if phase == "cudagraph-capture" else "medium",
        why=remedy_text("vllm.enforce-eager", _eager_why(phase == "cudagraph-capture", graph, pools), graph=graph),
        sources=sources,
    )


@remedy("vllm.cudagraph-capture-size")
def cudagraph_capture_size(inp: AdviceInput) -> Remedy | None:
    """Capture fewer CUDA-graph sizes: graph memory scales with the number of captured sizes."""
    if not is_vllm(inp) or inp.context.enforce_eager:
        return None
    f = get_facts(inp)
    flag = cudagraph_size_flag(f.version)
    if flag is None or inp.finding.phase not in ("cudagraph-capture", "warmup", "unknown", "kv-cache-alloc"):
        return None
    args = inp.context.launch_args
    cur_txt = args.get("max_cudagraph_capture_size") or args.get("cuda_graph_sizes")
    try:
        current = int(str(cur_txt).strip("[]").split(",")[-1]) if cur_txt else 512
    except ValueError:
        current = 512
    src = "context" if cur_txt else "default (512)"
    value = max(8, current // 2)
    if value >= current:
        return None
    n_old, n_new = len(capture_sizes(current)), len(capture_sizes(value))
    graph = f.cudagraph.value if f.cudagraph else None
    saves = int(graph * (n_old - n_new) / n_old) if graph else None
    short = shortage(inp)
    fits = True if (saves and short and saves >= short[0]) else None
    return Remedy(
        id="vllm.cudagraph-capture-size",
        title=remedy_text("vllm.cudagraph-capture-size", "title", batch=value),
        flags={flag: str(value)},
        saves_bytes=saves,
        fits=fits,
        confidence="medium",
        why=remedy_text(
            "vllm.cudagraph-capture-size", "why_saves" if saves else "why",
            sizes=n_old, current=current, batch=value, fewer=n_new, saves=saves, graph=graph,
        ),
        tradeoff=remedy_text("vllm.cudagraph-capture-size", "cost", batch=value),
        sources={"current size": src, **f.sources("cudagraph")},
    )


@remedy("vllm.max-num-seqs")
def max_num_seqs(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    mamba = _mamba_bound(inp)
    if mamba is not None:
        return mamba
    if inp.finding.kind == "vllm.kv-cache.preemption":
        return None if _preemption_elsewhere(inp) else _max_num_seqs_preemption(inp)
    dummy = inp.fig("num_dummy_requests") or inp.context.max_num_seqs
    src = "message" if inp.fig("num_dummy_requests") else "context"
    f = get_facts(inp)
    if not dummy and inp.finding.phase in ("profiling", "warmup", "inference"):
        # the profile run and the sampler warm-up run max_num_seqs dummy requests: the version's default
        dummy = default_max_num_seqs(f.version, f.total.value if f.total else None, inp.context.gpu_name)
        src = "default"
    if not dummy and (frame := inp.context.extra.get("sampler_frame")):
        # the sampler's sort of the logits failed and the log does not show the limit: the knob,
        # without a number
        return unsized_remedy("vllm.max-num-seqs", "sampler", frame=frame)
    if not dummy or dummy <= 1:
        return None
    req = inp.fig("requested_bytes")
    geo: ModelGeometry | None = f.geometry.value if f.geometry else None
    value = max(1, dummy // 2)
    why = remedy_text("vllm.max-num-seqs", "why_default" if src == "default" else "why", dummy=dummy)
    saves = None
    if geo is not None and geo.vocab_size and req:
        row = geo.vocab_size * 4  # one fp32 logits row per request
        drop = -(-int(req) // row)
        exact = dummy - drop
        if 1 <= exact < dummy:
            value = max(1, min(value, 1 << (exact.bit_length() - 1)))
        saves = (dummy - value) * row
        why = remedy_text(
            "vllm.max-num-seqs", "why_rows", vocab=geo.vocab_size, row=row, request=req, drop=drop, seqs=value, dummy=dummy
        )
    elif req and inp.fig("num_dummy_requests") and (free := inp.fig("free_bytes")) is not None and free < req:
        # vLLM's sampler warm-up (v1/worker/gpu_model_runner.py _dummy_sampler_run, 0.10.1-0.13.0) runs
        # one logits row per dummy request, max_num_seqs of them: the failing buffer scales with the count
        fit = int(dummy * free // req)
        value = max(1, min(value, 1 << (fit.bit_length() - 1))) if fit >= 1 else 1
        after = int(req) * value // dummy
        saves = int(req) - after
        fits = True if after <= free else None
        return Remedy(
            id="vllm.max-num-seqs",
            title=remedy_text("vllm.max-num-seqs", "title", seqs=value),
            flags={"--max-num-seqs": str(value)},
            saves_bytes=saves,
            fits=fits,
            confidence="medium",
            why=remedy_text("vllm.max-num-seqs", "why_scaled", dummy=dummy, request=req, seqs=value, after=after, free=free),
            sources={"dummy requests": "message", "buffer": "message"},
        )
    # value < dummy here: dummy > 1, value = max(1, dummy // 2) and the rows can only lower it
    return Remedy(
        id="vllm.max-num-seqs",
        title=remedy_text("vllm.max-num-seqs", "title", seqs=value),
        flags={"--max-num-seqs": str(value)},
        saves_bytes=saves,
        fits=None,
        confidence="low" if src == "default" else "medium",
        why=why,
        sources={"dummy requests": src, **f.sources("geometry")},
    )


def _max_num_seqs_preemption(inp: AdviceInput) -> Remedy:
    """V0's preemption warning: fewer sequences at once need fewer KV blocks, so fewer are preempted
    (vLLM's docs on preemption; the message itself names the memory knobs). Half the run's
    --max-num-seqs when the log shows it, else the knob in words."""
    cur = inp.context.max_num_seqs
    if not cur or cur <= 1:
        return unsized_remedy("vllm.max-num-seqs", "preemption")
    value = cur // 2
    return Remedy(
        id="vllm.max-num-seqs",
        title=remedy_text("vllm.max-num-seqs", "title", seqs=value),
        flags={"--max-num-seqs": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text("vllm.max-num-seqs", "why_preemption_sized", current=cur, seqs=value),
        sources={"max_num_seqs": "context"},
    )


def _mamba_bound(inp: AdviceInput) -> Remedy | None:
    """vLLM's own bound for hybrid (Mamba) models: each decoding sequence holds one Mamba cache
    block, so max_num_seqs ≤ the blocks the message prints (its "at most N")."""
    if "mamba" not in inp.finding.rule and inp.finding.rule != "vllm.v1.cudagraph.capture-sizes-capped":
        return None  # (capture sizes are capped to the Mamba cache blocks)
    blocks = as_int(inp.fig("num_gpu_blocks"))
    cur = as_int(inp.fig("max_num_seqs")) or inp.context.max_num_seqs
    if not blocks or (cur is not None and blocks >= cur):
        return None
    return Remedy(
        id="vllm.max-num-seqs",
        title=remedy_text("vllm.max-num-seqs", "title", seqs=blocks),
        flags={"--max-num-seqs": str(blocks)},
        fits=True,
        confidence="high",
        why=remedy_text("vllm.max-num-seqs", "why_mamba", blocks=blocks),
    )


@remedy("vllm.max-num-batched-tokens.raise")
def raise_max_num_batched_tokens(inp: AdviceInput) -> Remedy | None:
    """vLLM's own advice when one multimodal item needs more tokens than one step holds: raise
    --max-num-batched-tokens to the item's tokens (the message's max_tokens_per_mm_item)."""
    if not is_vllm(inp):
        return None
    item, cur = as_int(inp.fig("item_tokens")), as_int(inp.fig("max_num_batched_tokens"))
    if not item or (cur is not None and item <= cur):
        return None
    rid = "vllm.max-num-batched-tokens.raise"
    return Remedy(
        id=rid,
        title=remedy_text(rid, "title", tokens=item),
        flags={"--max-num-batched-tokens": str(item)},
        fits=True,
        confidence="high",
        why=remedy_text(rid, "why", item=item, current=cur) if cur else remedy_text(rid, "why_item", item=item),
    )


@remedy("vllm.max-num-batched-tokens")
def max_num_batched_tokens(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    cur = inp.context.max_num_batched_tokens
    v0 = v0_engine(inp)
    if not cur or cur <= 512:
        # (V0 without chunked prefill takes no budget below max_model_len: the length is the knob there)
        return unsized_remedy("vllm.max-num-batched-tokens", "noblocks") if (not cur and no_blocks(inp) and not v0) else None
    f = get_facts(inp)
    short = shortage(inp)
    act = f.activation.value if f.activation else None
    value = max(512, round_down(cur // 2, 256))
    # V0 without chunked prefill refuses a budget below max_model_len (SchedulerConfig._verify_args:
    # "max_num_batched_tokens (N) is smaller than max_model_len (M)"); whether chunked prefill is on the
    # log may not say, so a V0 value never goes below the length
    floor = f.max_model_len.value if (v0 and f.max_model_len) else 0
    if value < floor:
        value = floor
    if value >= cur:
        return None
    why = remedy_text("vllm.max-num-batched-tokens", "why", tokens=cur)
    saves = act // 2 if act else None
    fits: bool | None = None
    if act and short and short[0] >= act:
        fits = False
        why += remedy_text("vllm.max-num-batched-tokens", "why_alone", missing=short[0], peak=act)
    elif act and short and short[0] > 0:
        # activation ∝ batched tokens: keep the share of the peak that is not missing
        exact = round_down(cur * (act - short[0]) / act, 256)
        if max(512, floor) <= exact < cur:
            value = exact
            saves = int(act * (cur - value) / cur)
            fits = None if shortage_is_lower_bound(inp) else True
            why = remedy_text(
                "vllm.max-num-batched-tokens", "why_exact", peak=act, tokens=cur, missing=short[0], value=value
            )
    return Remedy(
        id="vllm.max-num-batched-tokens",
        title=remedy_text("vllm.max-num-batched-tokens", "title", tokens=value),
        flags={"--max-num-batched-tokens": str(value)},
        saves_bytes=saves,
        fits=fits,
        confidence="medium",
        why=why,
        sources={"max_num_batched_tokens": "context", **f.sources("activation")},
    )


#: V0's max_num_batched_tokens with chunked prefill on and none given: 2048 from 0.6.0, 512 before
#: (config.py SchedulerConfig, 0.5.5 and 0.6.0-0.7.3)
V0_CHUNKED_BUDGET = 2048
V0_CHUNKED_BUDGET_BEFORE_0_6 = 512
#: V0 turns chunked prefill on by itself above this max_model_len (engine/arg_utils.py, 0.5.3-0.7.3)
V0_LONG_CONTEXT = 32768
_CHUNKED = "vllm.enable-chunked-prefill"
#: with the activation peak unknown, chunked prefill is offered for a profile batch of at least this
#: many chunks (8192 tokens from 0.6.0): a long --max-model-len, whose profile peak it divides by 4+
LONG_PROFILE_FACTOR = 4


def _v0_chunked_prefill(inp: AdviceInput, length: int) -> bool | None:
    """Whether V0 runs this log with chunked prefill: the launch args' or engine config's word, else a
    budget below the length (V0 without chunked prefill refuses one, SchedulerConfig._verify_args), else
    None (not shown)."""
    for name in ("enable_chunked_prefill", "chunked_prefill_enabled"):
        v = str(inp.context.launch_args.get(name, "")).strip().lower()
        if v in ("true", "1"):
            return True
        if v in ("false", "0"):
            return False
    cur = inp.context.max_num_batched_tokens
    if cur and cur < length:
        return True
    return None


@remedy(_CHUNKED)
def enable_chunked_prefill(inp: AdviceInput) -> Remedy | None:
    """V0 without chunked prefill profiles max(max_model_len, 2048) tokens (config.py SchedulerConfig
    __post_init__, vllm 0.6.6 and 0.7.3): a long --max-model-len inflates the profile's activation peak,
    which the budget pays before the KV cache. --enable-chunked-prefill, with its default budget for the
    release (2048 tokens; 512 before 0.6.0), profiles that many instead. For the profile run's own
    failure or a KV cache sized after it ("no cache blocks", "max seq len is larger than ...")."""
    if not is_vllm(inp) or not v0_engine(inp):
        return None
    kind, phase = inp.finding.kind, inp.finding.phase
    if not (kind in ("vllm.kv-cache.max-len-exceeds", "vllm.kv-cache.no-blocks") or phase == "profiling"):
        return None
    f = get_facts(inp)
    if not f.max_model_len:
        return None
    length = int(f.max_model_len.value)
    chunk = V0_CHUNKED_BUDGET if (f.version is None or f.version >= (0, 6, 0)) else V0_CHUNKED_BUDGET_BEFORE_0_6
    profile = max(length, 2048)
    state = _v0_chunked_prefill(inp, length)
    if state is None:
        state = length > V0_LONG_CONTEXT  # V0's own default (its exceptions aside: it then says it is off)
    cur = inp.context.max_num_batched_tokens
    if state or profile <= chunk or (cur and cur > profile):
        return None  # already on, nothing to cut, or a budget the user set (chunked prefill keeps it)
    act = f.activation.value if f.activation else None
    if not act and profile < LONG_PROFILE_FACTOR * chunk:
        return None  # the peak unknown and the profile batch not much larger than the chunk: little to gain
    why = remedy_text(_CHUNKED, "why", profile=profile, chunk=chunk)
    saves = fits = None
    if act:
        saves = int(act * (profile - chunk) / profile)
        fits = covers(saves, inp)
        why += remedy_text(_CHUNKED, "why_peak", peak=act, profile=profile, after=act - saves, saves=saves)
    short = shortage(inp)
    if short and short[0] > 0:
        why += remedy_text(_CHUNKED, "why_missing", missing=short[0], basis=short[1])
    return Remedy(
        id=_CHUNKED,
        title=remedy_text(_CHUNKED, "title", chunk=chunk, profile=profile),
        flags={"--enable-chunked-prefill": ""},
        saves_bytes=saves,
        fits=fits,
        confidence="medium",
        why=why,
        sources={"max_model_len": f.max_model_len.source, **f.sources("activation")},
    )


@remedy(_LOWER)
def lower_utilization(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    phase = inp.finding.phase
    if phase in ("profiling", "weights-load", "startup-check", "training") or (
        phase == "kv-cache-alloc" and not inp.finding.kind.startswith("torch.")
    ):
        # before the KV cache exists the budget does not limit this allocation (research §7); an
        # allocator OOM while the KV cache is allocated is that cache, sized as a share of the GPU
        return None
    f = get_facts(inp)
    req = inp.fig("requested_bytes")
    if not req and phase == "cudagraph-capture" and f.utilization and f.total:
        return _room_for_graphs(f)
    if not (f.utilization and f.total and req):
        return None
    util, total = f.utilization.value, f.total.value
    held = inp.fig("allocated_bytes")
    if phase == "kv-cache-alloc" and f.utilization.source == "default" and held and held > util * total:
        # while the KV cache is allocated no activation is live: PyTorch holds the weights and the
        # cache sized to fit the budget. Holding more than the default budget means the run's
        # utilization is not the default (or its profile underestimated), so a value computed from
        # the default has no basis
        return unsized_remedy(
            _LOWER, "contradicted", held=int(held), util=fmt_fraction(util), total=total, budget=int(util * total),
            request=req, step=fmt_fraction(ceil_to(req / total, 2)),
        )
    exact = floor_to(util - req / total, 2)
    value = min(MAX_UTILIZATION, exact)
    if value >= util:
        value = round(util - 0.01, 2)
    if value <= 0.1:
        return None
    # the KV cache is inside the budget: while it is allocated, the budget itself is what does not fit
    kv = "_kv" if phase == "kv-cache-alloc" else ""
    return Remedy(
        id=_LOWER,
        title=remedy_text(_LOWER, "title" + kv, fraction=fmt_fraction(value)),
        flags={"--gpu-memory-utilization": fmt_fraction(value)},
        saves_bytes=int((util - value) * total),
        fits=True,
        confidence="medium" if f.utilization.source != "default" else "low",
        why=remedy_text(
            _LOWER, ("why" + kv + "_capped") if value < exact else "why" + kv,
            request=req, util=fmt_fraction(util), total=total, exact=fmt_fraction(exact), cap=fmt_fraction(MAX_UTILIZATION),
        ),
        sources=f.sources("utilization", "total"),
    )


#: vLLM's own bound on CUDA-graph memory, "CUDA graphs can take additional 1~3 GiB memory per GPU"
#: (vllm 0.5-0.6 vllm/worker/model_runner.py, printed before capture)
GRAPH_ROOM_BYTES = 3 * 1024**3


def _room_for_graphs(f: Facts) -> Remedy | None:
    """A failure while capturing CUDA graphs with no request size (its error line cut): the budget
    that leaves less than vLLM's own 3 GiB bound outside it, lowered to leave that much."""
    assert f.utilization is not None and f.total is not None
    util, total = f.utilization.value, f.total.value
    left = int(total * (1 - util))
    if left >= GRAPH_ROOM_BYTES:
        return None  # the budget leaves the graphs the room vLLM says they take: not the lever
    exact = floor_to(1 - GRAPH_ROOM_BYTES / total, 2)
    value = min(MAX_UTILIZATION, exact)
    if value >= util or value <= 0.1:
        return None
    return Remedy(
        id=_LOWER,
        title=remedy_text(_LOWER, "title", fraction=fmt_fraction(value)),
        flags={"--gpu-memory-utilization": fmt_fraction(value)},
        saves_bytes=int((util - value) * total),
        fits=None,
        confidence="medium" if f.utilization.source != "default" else "low",
        why=remedy_text(_LOWER, "why_capture", util=fmt_fraction(util), total=total, left=left, exact=fmt_fraction(exact)),
        sources=f.sources("utilization", "total"),
    )


# -- model-size levers ---------------------------------------------------------------------------


def _per_gpu_need(f: Facts, tp: int, pp: int) -> int | None:
    """Per-GPU memory need (weights + KV for one max-length request + activation + non-torch) at tp×pp."""
    if f.weights is None:
        return None
    w = f.weights.value * f.tp * f.pp / (tp * pp)
    kv = 0.0
    if f.bytes_per_token and f.max_model_len:
        geo: ModelGeometry | None = f.geometry.value if f.geometry else None
        per_tok = f.bytes_per_token.value * f.pp / pp
        if geo is not None and not geo.is_mla:
            per_tok = per_tok * geo.kv_heads_per_rank(tp) / geo.kv_heads_per_rank(f.tp)
        elif geo is None:
            per_tok = per_tok * f.tp / tp
        kv = per_tok * f.max_model_len.value
    act = f.activation.value if f.activation else 0
    nt = f.non_torch.value if f.non_torch else 0
    return int(w + kv + act + nt)


def _gpus(inp: AdviceInput) -> tuple[int, str] | None:
    """The GPU count and where it comes from, in words: the log, ``--hint gpus=N``, or ``fit --gpus N``
    (fit passes its option as a hint and plans)."""
    f = get_facts(inp)
    if f.gpus is None:
        return None
    n = int(f.gpus.value)
    key = "source_log" if f.gpus.source == "context" else ("source_flag" if inp.planned else "source_hint")
    return n, remedy_text("vllm.tensor-parallel-size", key, count=n)


@remedy("vllm.tensor-parallel-size")
def tensor_parallel(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    g = _gpus(inp)
    f = get_facts(inp)
    cause = inp.finding.cause.id if inp.finding.cause else None
    building = weights_over_budget(inp.finding, inp.context)
    if g is None and building is not None:
        # weights over the budget with the GPU count unknown: the knob in words, no count to act on
        return unsized_remedy("vllm.tensor-parallel-size", "building", budget=building.budget)
    if g is None and inp.finding.kind == "vllm.kv-cache.preemption":
        # V0's preemption warning names tensor_parallel_size itself: in words, the count unknown
        return None if _preemption_elsewhere(inp) else unsized_remedy("vllm.tensor-parallel-size", "preemption")
    assumed = g is None and cause == "weights-exceed-device"
    if assumed:
        g = (ASSUMED_MAX_GPUS, "not in the log: the smallest count that fits, if you have that many")
    # ("no cache blocks" with the GPU count unknown gets no worded "if several are visible": on one
    # GPU that sends the user to hardware they lack; the expert labels call it harmful, vllm-013/-014)
    if g is None or g[0] < 2:
        return None
    n = g[0]
    heads = f.geometry.value.attention_heads if f.geometry else None
    budget = f.requested
    candidates = [t for t in (2, 4, 8, 16, 32, 64) if f.tp < t and t * f.pp <= n and (not heads or heads % t == 0)]
    if not candidates:
        return None
    chosen, fits = candidates[0], None
    need = None
    if budget:
        for t in candidates:
            need = _per_gpu_need(f, t, f.pp)
            if need is not None and need <= budget:
                chosen, fits = t, True
                break
        else:
            need = _per_gpu_need(f, candidates[-1], f.pp)
            if need is not None:
                chosen, fits = candidates[-1], False
    T = "vllm.tensor-parallel-size"
    why = (remedy_text(T, "why_count", count=n, source=g[1]) if not assumed else remedy_text(T, "why_assumed")) + (
        remedy_text(T, "why_shrink", factor=chosen // f.tp))
    if heads:
        why += remedy_text(T, "why_heads", gpus=chosen, heads=heads)
    if need is not None and budget:
        why += remedy_text(T, "why_need", need=need, budget=budget)
    return Remedy(
        id="vllm.tensor-parallel-size",
        title=remedy_text(T, "title_assumed" if assumed else "title", gpus=chosen),
        flags={"--tensor-parallel-size": str(chosen)},
        saves_bytes=(f.weights.value - f.weights.value * f.tp // chosen) if f.weights else None,
        fits=fits,
        confidence="low" if assumed else "medium",
        why=why + remedy_text(T, "why_end"),
        sources=f.sources("gpus", "geometry", "weights", "total", "utilization"),
    )


@remedy("vllm.pipeline-parallel-size")
def pipeline_parallel(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    g = _gpus(inp)
    f = get_facts(inp)
    if g is None or g[0] < 2:
        return None
    n = g[0]
    candidates = [p for p in range(f.pp + 1, n // f.tp + 1)]
    if not candidates:
        return None
    chosen, fits = candidates[0], None
    budget = f.requested
    if budget:
        for p in candidates:
            need = _per_gpu_need(f, f.tp, p)
            if need is not None and need <= budget:
                chosen, fits = p, True
                break
        else:
            if _per_gpu_need(f, f.tp, candidates[-1]) is not None:
                chosen, fits = candidates[-1], False
    return Remedy(
        id="vllm.pipeline-parallel-size",
        title=remedy_text("vllm.pipeline-parallel-size", "title", stages=chosen),
        flags={"--pipeline-parallel-size": str(chosen)},
        saves_bytes=(f.weights.value - f.weights.value * f.pp // chosen) if f.weights else None,
        fits=fits,
        confidence="medium",
        why=remedy_text("vllm.pipeline-parallel-size", "why", count=n, source=g[1], stages=chosen),
        sources=f.sources("gpus", "weights", "total", "utilization"),
    )


@remedy("vllm.cpu-offload-gb")
def cpu_offload(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp):
        return None
    f = get_facts(inp)
    if f.version and f.version < (0, 5, 3):
        return None
    short = shortage(inp)
    if not short or short[0] <= 0:
        return None
    building = weights_over_budget(inp.finding, inp.context)
    if building is not None:
        return _cpu_offload_over_budget(inp, short)
    gib = ceil_gib(short[0])
    if f.weights is not None and gib * GiB > f.weights.value:
        return None  # more than the weights: offloading cannot make it fit
    return Remedy(
        id="vllm.cpu-offload-gb",
        title=remedy_text("vllm.cpu-offload-gb", "title", gib=gib),
        flags={"--cpu-offload-gb": str(gib)},
        saves_bytes=gib * GiB,
        fits=None if (f.weights is None or shortage_is_lower_bound(inp)) else True,
        # offloading more than half the weights makes every forward pass PCIe-bound
        confidence="medium" if (f.weights is not None and gib * GiB <= f.weights.value // 2) else "low",
        why=remedy_text("vllm.cpu-offload-gb", "why", missing=short[0], detail=short[1]),
        sources=f.sources("weights"),
    )


def _cpu_offload_over_budget(inp: AdviceInput, short: tuple[int, str]) -> Remedy | None:
    """The weights exceed vLLM's budget (vllm_weights_budget.py): offloading only the overage leaves
    the budget with no room for the KV cache, and vLLM then stops with no cache blocks. The value
    adds one max-model-len request's KV cache when the log gives the length and the per-token
    size; otherwise it is the overage marked "at least", not enough alone."""
    f = get_facts(inp)
    building = weights_over_budget(inp.finding, inp.context)
    assert building is not None
    if f.weights is not None and f.weights.value - building.budget > short[0]:
        # the model's whole weights are known (its config): their excess, not only what was built
        short = (int(f.weights.value - building.budget), remedy_text(
            "vllm.cpu-offload-gb", "basis_weights", weights=int(f.weights.value), budget=building.budget))
    bpt = f.bytes_per_token.value if f.bytes_per_token else None
    length = int(f.max_model_len.value) if f.max_model_len else None
    if bpt and length:
        one = int(length * bpt)
        gib = ceil_gib(short[0] + one)
        why = remedy_text("vllm.cpu-offload-gb", "why_over_kv", missing=short[0], detail=short[1],
                          length=length, one=one, gib=gib)
        title = remedy_text("vllm.cpu-offload-gb", "title", gib=gib)
        fits: bool | None = None  # the profile's activations are not counted
    else:
        gib = ceil_gib(short[0])
        why = remedy_text("vllm.cpu-offload-gb", "why_over", missing=short[0], detail=short[1], gib=gib)
        title = remedy_text("vllm.cpu-offload-gb", "title_at_least", gib=gib)
        fits = False
    if f.weights is not None and gib * GiB > f.weights.value:
        return None  # more than the weights: offloading cannot make it fit
    return Remedy(
        id="vllm.cpu-offload-gb",
        title=title,
        flags={"--cpu-offload-gb": str(gib)},
        saves_bytes=gib * GiB,
        fits=fits,
        confidence="low",
        why=why,
        sources={**f.sources("weights", "max_model_len", "bytes_per_token"), "overage": "message"},
    )


@remedy("vllm.quantization")
def quantization(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp) or checkpoint_quantized(inp.context):
        return None
    f = get_facts(inp)
    if f.version and f.version < (0, 5, 0):
        return None
    geo: ModelGeometry | None = f.geometry.value if f.geometry else None
    if geo is not None and (geo.weight_bytes_per_param or geo.dtype.startswith("fp8")):
        return None  # already quantized checkpoint
    loading = inp.finding.phase == "weights-load"
    if loading and not fp8_online_streams(f.version):
        # through 0.15 (or an unknown version) online fp8 creates the whole model in 16 bits before it
        # quantizes: a load that fails at 16 bits fails the same way (memory_model.fp8_online_streams)
        return None
    min_cc = fp8_weights_min_cc(f.version)
    w = f.weights.value if f.weights else None
    short = shortage(inp)
    if f.gpu is not None and f.gpu.value.cc < min_cc:
        return Remedy(
            id="vllm.quantization",
            title=remedy_text("vllm.quantization", "title_impossible"),
            flags={},
            fits=False,
            confidence="low",
            why=remedy_text("vllm.quantization", "why_impossible", need=f"{min_cc / 10:.1f}", gpu=f.gpu.value.name,
                            has=f"{f.gpu.value.cc / 10:.1f}"),
            sources=f.sources("gpu"),
        )
    saves = w // 2 if w else None
    fits = covers(saves, inp)
    gpu_note = ""
    if f.gpu is not None and not f.gpu.value.fp8_tensor_cores:
        gpu_note = remedy_text("vllm.quantization", "why_gpu", gpu=f.gpu.value.name)
    return Remedy(
        id="vllm.quantization",
        title=remedy_text("vllm.quantization", "title"),
        flags={"--quantization": fp8_online_value(f.version)},
        saves_bytes=saves,
        fits=fits,
        confidence="medium" if w else "low",
        why=remedy_text("vllm.quantization", "why")
        + (remedy_text("vllm.quantization", "why_sizes", weights=w, half=w // 2) if w else "")
        + (remedy_text("vllm.quantization", "why_missing", missing=short[0]) if short and short[0] > 0 else "")
        + remedy_text("vllm.quantization", "why_end")
        + (remedy_text("vllm.quantization", "why_streams") if loading else "")
        + gpu_note,
        sources=f.sources("weights", "gpu"),
    )


@remedy("vllm.quantization-4bit")
def quantization_4bit(inp: AdviceInput) -> Remedy | None:
    """A 4-bit AWQ/GPTQ checkpoint of the same model: a model change, with the weight bytes it takes."""
    if not is_vllm(inp) or checkpoint_quantized(inp.context):
        return None
    f = get_facts(inp)
    geo: ModelGeometry | None = f.geometry.value if f.geometry else None
    if geo is not None and geo.weight_bytes_per_param:
        return None
    building = weights_over_budget(inp.finding, inp.context)
    if geo is not None and geo.params:
        params = geo.params * 1e9 / (f.tp * f.pp)
        src = f.geometry.source  # type: ignore[union-attr]
    elif f.weights is not None and not inp.context.quantization:
        params = f.weights.value / 2  # assumes a bf16/fp16 checkpoint: 2 bytes per parameter
        src = f.weights.source + " (weights ÷ 2 bytes, assuming a 16-bit checkpoint)"
    elif building is not None and not inp.context.quantization:
        # the model being created: at least what PyTorch holds plus the failing request
        params = (building.built + building.request) / 2
        src = "message (allocated + requested ÷ 2 bytes, at least, assuming a 16-bit checkpoint)"
    else:
        return None
    now = f.weights.value if f.weights else int(params * 2)
    after = int(params * FOUR_BIT_BYTES_PER_PARAM)
    if after >= now:
        return None
    saves = now - after
    fits = covers(saves, inp)
    model = inp.context.model or (geo.name if geo else None)
    return Remedy(
        id="vllm.quantization-4bit",
        title=remedy_text("vllm.quantization-4bit", "title"),
        settings={"model": _four_bit_checkpoint(model)},
        saves_bytes=saves,
        fits=fits,
        confidence="medium",
        why=remedy_text(
            "vllm.quantization-4bit", "why_at_least" if (building is not None and geo is None and f.weights is None) else "why",
            per_param=FOUR_BIT_BYTES_PER_PARAM, params=f"{params / 1e9:.2f}", after=after, now=now,
        ),
        sources={"parameters": src, **f.sources("weights")},
    )


#: vLLM's default --swap-space (GiB per GPU)
SWAP_SPACE_DEFAULT = 4.0


def swap_space_flag_exists(inp: AdviceInput) -> bool:
    """Whether the detected vLLM still has --swap-space (removed in 0.18.0): asked of the one version
    gate, :func:`~oomdoctor.advisor.versions.flag_exists`."""
    from oomdoctor.advisor.versions import flag_exists

    return flag_exists("vllm", "--swap-space", inp.context.engine_version) is not False


@remedy("vllm.swap-space")
def swap_space(inp: AdviceInput) -> Remedy | None:
    if not is_vllm(inp) or not swap_space_flag_exists(inp):
        return None
    f = get_facts(inp)
    current_txt = inp.context.launch_args.get("swap_space")
    try:
        current = float(current_txt) if current_txt else SWAP_SPACE_DEFAULT
    except ValueError:
        current = SWAP_SPACE_DEFAULT
    value = 1 if current > 1 else 0
    if value >= current:
        return None
    gpus = f.gpus.value if f.gpus else max(1, f.tp * f.pp)
    return Remedy(
        id="vllm.swap-space",
        title=remedy_text("vllm.swap-space", "title", gib=value),
        flags={"--swap-space": str(value)},
        saves_bytes=int((current - value) * GiB * gpus),
        fits=None,
        confidence="low",
        why=remedy_text(
            "vllm.swap-space", "why_run" if current_txt else "why_default",
            gpus=gpus, current=f"{current:g}", gib=value, saves=int((current - value) * GiB * gpus),
        ),
        sources={"swap_space": "context" if current_txt else "default (4 GiB)"},
    )


# -- the smallest combination of levers (memory model search) ----------------------------------

#: a plan that shortens the context keeps at least this many tokens (or the current length if smaller)
MIN_USEFUL_CONTEXT = 4096


def plan_remedy(inp: AdviceInput) -> Remedy | None:
    """Search tensor parallelism × weight format × KV dtype × utilization × max-model-len for the
    configuration that fits with the fewest changes, then the cheapest trade-offs.

    Per GPU: total × util − weights × w / tp − activation − non-torch (− graphs, 0.20+) must hold one
    request: bytes/token × kv_heads_per_rank(tp) / kv_heads_per_rank(now) × kv × cdiv(len, block) × block.
    Needs the weights, the GPU total, the bytes per token and the max length (message, log, config or catalog).
    """
    if not is_vllm(inp):
        return None
    f = get_facts(inp)
    if not (f.weights and f.total and f.utilization and f.bytes_per_token and f.max_model_len):
        return None
    geo: ModelGeometry | None = f.geometry.value if f.geometry else None
    total, util0, length = f.total.value, f.utilization.value, int(f.max_model_len.value)
    bs = _block(f)
    weights_all = f.weights.value * f.tp * f.pp
    activation = f.activation.value if f.activation else 0
    non_torch = f.non_torch.value if f.non_torch else 0
    graphs = f.cudagraph.value if f.cudagraph else 0
    fixed = non_kv_bytes(0, activation, non_torch, graphs, f.version)  # for the explanation
    cap_util, _cap_why = _util_cap(f, inp)
    gpus = int(f.gpus.value) if f.gpus else f.tp * f.pp
    heads = geo.attention_heads if geo else None
    tps = [t for t in (1, 2, 4, 8, 16) if t >= f.tp and t * f.pp <= max(gpus, f.tp * f.pp)
           and (t == f.tp or not heads or heads % t == 0)]
    quantized = bool(inp.context.quantization) or bool(geo and (geo.weight_bytes_per_param or geo.dtype.startswith("fp8")))
    fp8_w_ok = not quantized and not (f.gpu is not None and f.gpu.value.cc < fp8_weights_min_cc(f.version))
    weight_opts: list[tuple[str, float]] = [("", 1.0)]
    if fp8_w_ok:
        weight_opts.append(("fp8", 0.5))
    if not quantized:
        weight_opts.append(("4bit", FOUR_BIT_BYTES_PER_PARAM / 2))
    kv_value, _reason = fp8_kv_support(inp)
    kv_opts: list[tuple[str, float]] = [("", 1.0)]
    if kv_value and f.kv_dtype_bytes >= 2:
        kv_opts.append((kv_value, 1 / f.kv_dtype_bytes))
    # (not while the weights load: the free figure then is not what the KV cache will find)
    raise_ok = cap_util > util0 and inp.finding.phase != "weights-load"
    utils = [util0] + ([cap_util] if raise_ok else [])
    best: tuple[tuple[int, int, int], dict[str, str], dict[str, str], str] | None = None
    for tp in tps:
        for wname, wf in weight_opts:
            for kvname, kvf in kv_opts:
                for util in utils:
                    w = weights_all * wf / (tp * f.pp)
                    budget = kv_budget(total * util, w, activation, non_torch, graphs, f.version)
                    per_tok = f.bytes_per_token.value * kvf
                    if geo is not None and not geo.is_mla:
                        per_tok = per_tok * geo.kv_heads_per_rank(tp) / geo.kv_heads_per_rank(f.tp)
                    elif geo is None:
                        per_tok = per_tok * f.tp / tp
                    if budget <= 0:  # no room for any KV cache in this combination
                        continue
                    cap = round_down(budget / (per_tok * bs), 1) * bs
                    new_len = length if cap >= -(-length // bs) * bs else cap
                    if new_len < min(length, MIN_USEFUL_CONTEXT):
                        continue
                    flags: dict[str, str] = {}
                    settings: dict[str, str] = {}
                    ids = []
                    if tp != f.tp:
                        flags["--tensor-parallel-size"] = str(tp)
                        ids.append("vllm.tensor-parallel-size")
                    if wname == "fp8" and not fp8_online_streams(f.version) and weights_all / (tp * f.pp) > total * util:
                        continue  # online fp8 would first create these weights in 16 bits, over the budget
                    if wname == "fp8":
                        flags["--quantization"] = fp8_online_value(f.version)
                        ids.append("vllm.quantization")
                    elif wname == "4bit":
                        settings["model"] = _four_bit_checkpoint(inp.context.model)
                        ids.append("vllm.quantization-4bit")
                    if kvname:
                        flags["--kv-cache-dtype"] = kvname
                        ids.append("vllm.kv-cache-dtype-fp8")
                    if util != util0:
                        flags["--gpu-memory-utilization"] = fmt_fraction(util)
                        ids.append(_KV)
                    if new_len != length:
                        flags["--max-model-len"] = str(new_len)
                        ids.append("vllm.max-model-len")
                    if len(ids) < 2:
                        continue  # single levers are the calculators' business
                    from oomdoctor.advisor.prescription import remedy_info

                    key = (len(ids), sum(remedy_info(i).cost for i in ids), -new_len)
                    if best is None or key < best[0]:
                        best = (key, flags, settings, "+".join(ids))
    if best is None:
        return None
    _key, flags, settings, ids_txt = best
    parts = [f"{k} {v}" for k, v in flags.items()] + list(settings.values())
    return Remedy(
        id="combined:" + ids_txt,
        title=_("Together: {titles}").format(titles=", ".join(parts)),
        flags=flags,
        settings=settings,
        fits=True,
        confidence="medium" if (geo is not None or f.bytes_per_token.source in ("message", "context")) else "low",
        why=_(
            "No single change fits. Per GPU: {total} × util − weights × format / TP − {fixed} (activation, "
            "non-torch, graphs) must hold one request at {per_token} per token; the fewest changes that do: {changes}."
        ).format(
            total=format_size(total), fixed=format_size(fixed), per_token=format_size(int(f.bytes_per_token.value)),
            changes=_("; ").join(parts),
        ),
        tradeoff=_("The trade-offs of each change together."),
        sources=f.sources("weights", "total", "utilization", "bytes_per_token", "max_model_len", "gpus", "geometry"),
    )
