"""SGLang remedies (flags read from sglang 0.4.6 srt/server_args.py).

SGLang's static memory is ``--mem-fraction-static`` x GPU memory and holds weights + KV pool, so
"Not enough memory" asks to RAISE the fraction, while CUDA-graph capture failures ask to LOWER it.
Every calculator answers only for SGLang logs.
"""

from __future__ import annotations

from oomdoctor.advisor._engine_util import as_float, as_int, checkpoint_quantized, engine_of, setting
from oomdoctor.advisor.engine_args import default_of
from oomdoctor.advisor.kv_pages import PageShortfall, forced_backend, page_shortfall
from oomdoctor.advisor.memory_model import parse_version
from oomdoctor.advisor.prescription import remedy_text
from oomdoctor.advisor.registry import AdviceInput, remedy
from oomdoctor.advisor.sglang_fit import release_cuda_graph_max_bs, sglang_default_reserve
from oomdoctor.advisor.unsized import unsized_remedy
from oomdoctor.advisor.values import ceil_to, floor_to, fmt_fraction, round_down
from oomdoctor.i18n import join_sentences
from oomdoctor.report import Remedy

#: default --mem-fraction-static of SGLang 0.4.x for one GPU of at most 80 GiB (upstream-messages.md)
SGLANG_DEFAULT_FRACTION = 0.88
#: at or below this (half the GPU or less) a fraction was more likely chosen to share the GPU than
#: left at a default: raising it to the default may starve the other tenant
SGLANG_SHARED_FRACTION = 0.5
#: highest fraction recommended: CUDA graphs and activations live outside it
SGLANG_MAX_FRACTION = 0.95
#: share of GPU memory the KV pool should get at least, on top of SGLang's minimum viable fraction
SGLANG_MIN_KV_SHARE = 0.05
#: step used to lower the fraction for CUDA-graph headroom (SGLang's own advice: 0.8 or 0.7)
SGLANG_LOWER_STEP = 0.05


def _mine(inp: AdviceInput) -> bool:
    return engine_of(inp) == "sglang"


def _current_fraction(inp: AdviceInput) -> float | None:
    return as_float(setting(inp, "mem_fraction_static"))



def _tp(inp: AdviceInput) -> int:
    """The run's tensor parallelism: its --tp-size (or the context's), 1 when the log shows none."""
    return as_int(setting(inp, "tp_size", "tensor_parallel_size")) or inp.context.tensor_parallel_size or 1

#: SGLang's warning that the pool filled while decoding and running requests were retracted
RETRACT_RULE = "sglang.kv-pool-retract"
#: SGLang's --schedule-conservativeness default (server_args.py 0.3.0-0.5.3) and the step offered
SCHEDULE_CONSERVATIVENESS_DEFAULT = 1.0
SCHEDULE_CONSERVATIVENESS_STEP = 0.3


def _raise_for_retraction(cur: float | None) -> Remedy | None:
    """A larger pool for the retraction warning: optional, the scheduler copes on its own."""
    rid = "sglang.mem-fraction-static.raise"
    if cur is None:
        return unsized_remedy(rid, "retract")
    value = round(cur + SGLANG_LOWER_STEP, 2)
    if value > SGLANG_MAX_FRACTION:
        return None
    return Remedy(
        id=rid,
        title=remedy_text(rid, "title", fraction=fmt_fraction(value)),
        flags={"--mem-fraction-static": fmt_fraction(value)},
        fits=None,
        confidence="low",
        why=remedy_text(rid, "why_retract_sized", current=cur, value=fmt_fraction(value), maximum=SGLANG_MAX_FRACTION),
    )


@remedy("sglang.schedule-conservativeness")
def schedule_conservativeness(inp: AdviceInput) -> Remedy | None:
    """``--schedule-conservativeness`` up by 0.3 (from 1.0, its default in 0.3.0-0.5.3): the
    scheduler reserves more KV tokens per running request before admitting new ones."""
    if not _mine(inp) or inp.finding.rule != RETRACT_RULE:
        return None
    cur = as_float(setting(inp, "schedule_conservativeness"))
    base = cur if cur is not None else SCHEDULE_CONSERVATIVENESS_DEFAULT
    value = round(base + SCHEDULE_CONSERVATIVENESS_STEP, 2)
    key = "why" if cur is not None else "why_default"
    return Remedy(
        id="sglang.schedule-conservativeness",
        title=remedy_text("sglang.schedule-conservativeness", "title", value=str(value)),
        flags={"--schedule-conservativeness": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text("sglang.schedule-conservativeness", key, current=str(base), value=str(value)),
    )


@remedy("sglang.mem-fraction-static.raise")
def raise_fraction(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    cur = _current_fraction(inp)
    if inp.finding.rule == RETRACT_RULE:
        return _raise_for_retraction(cur)
    suggested = as_float(inp.fig("suggested_mem_fraction_static"))
    pre = as_int(inp.context.extra.get("sglang_avail_before_load_bytes"))
    post = as_int(inp.context.extra.get("sglang_avail_after_load_bytes"))
    weights = inp.context.weights_bytes if inp.context.extra.get("sglang_avail_after_load_bytes") is not None else None
    if suggested is not None:
        value = floor_to(suggested, 2) + 0.01
        why = remedy_text("sglang.mem-fraction-static.raise", "why_suggested", suggested=suggested, value=fmt_fraction(value))
        conf = "high"
    elif post is not None and (pre or weights):
        # "Load weight end" alone states both: free before loading = free after + the weights' usage
        before = pre if pre else post + (weights or 0)
        minimum = 1 - post / before
        value = ceil_to(minimum + SGLANG_MIN_KV_SHARE, 2)
        why = remedy_text(
            "sglang.mem-fraction-static.raise", "why_measured" if pre else "why_measured_end", before=before,
            after=post, weights=weights, minimum=f"{minimum:.4f}", kv_share=f"{SGLANG_MIN_KV_SHARE:.2f}",
            value=fmt_fraction(value),
        )
        conf = "medium"
        tp = _tp(inp)
        reserve = sglang_default_reserve(before, inp.context.engine_version, tp)
        if value > SGLANG_MAX_FRACTION and ceil_to(minimum, 2) < SGLANG_MAX_FRACTION:
            value = SGLANG_MAX_FRACTION  # a pool still forms below the ceiling: the ceiling, said to be tight
            why = join_sentences([why, remedy_text("sglang.mem-fraction-static.raise", "why_capped",
                                                   maximum=fmt_fraction(SGLANG_MAX_FRACTION))])
        if value <= SGLANG_MAX_FRACTION and (1 - value) * before < reserve:
            # what stays outside the pool is less than SGLang's own default keeps for activations and
            # CUDA graphs on this GPU: the fraction may build a pool and fail right after
            conf = "low"
            why = join_sentences([why, remedy_text("sglang.mem-fraction-static.raise", "why_tight",
                                                   outside=int((1 - value) * before), reserve=reserve)])
    elif cur is not None and cur < SGLANG_DEFAULT_FRACTION:
        value = SGLANG_DEFAULT_FRACTION
        why = remedy_text("sglang.mem-fraction-static.raise", "why_default", current=cur, default=SGLANG_DEFAULT_FRACTION)
        if cur <= SGLANG_SHARED_FRACTION:
            # a fraction this low is a choice more often than a slip: the rest of the GPU may be another tenant's
            why = join_sentences([why, remedy_text("sglang.mem-fraction-static.raise", "why_shared")])
        conf = "medium"
    elif cur is not None:
        value = round(cur + 0.02, 2)
        why = remedy_text("sglang.mem-fraction-static.raise", "why_step", current=cur)
        conf = "low"
    else:
        return None
    if value > SGLANG_MAX_FRACTION:
        return Remedy(
            id="sglang.mem-fraction-static.raise",
            title=remedy_text("sglang.mem-fraction-static.raise", "title_cannot"),
            flags={},
            fits=False,
            confidence="low",
            why=join_sentences([why, remedy_text("sglang.mem-fraction-static.raise", "why_too_high", maximum=SGLANG_MAX_FRACTION)]),
        )
    if cur is not None and value <= cur:
        return None
    return Remedy(
        id="sglang.mem-fraction-static.raise",
        title=remedy_text("sglang.mem-fraction-static.raise", "title", fraction=fmt_fraction(value)),
        flags={"--mem-fraction-static": fmt_fraction(value)},
        fits=True if conf == "high" or (conf == "medium" and suggested is None) else None,
        confidence=conf,  # type: ignore[arg-type]
        why=why,
    )


@remedy("sglang.mem-fraction-static.lower")
def lower_fraction(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    cur = _current_fraction(inp)
    if cur is None:
        if inp.finding.phase != "cudagraph-capture":
            return None
        # SGLang's own first advice when capture fails (cuda_graph_runner.py 0.4.6-0.5.3): worded
        rem = unsized_remedy("sglang.mem-fraction-static.lower", "capture")
        rem.confidence = "medium"
        return rem
    req, total = inp.fig("requested_bytes"), inp.fig("total_bytes") or inp.context.gpu_total_bytes
    step = SGLANG_LOWER_STEP
    if req and total:
        step = max(step, ceil_to(req / total, 2))
    value = floor_to(cur - step, 2)
    if value <= 0.3:
        return None
    return Remedy(
        id="sglang.mem-fraction-static.lower",
        title=remedy_text("sglang.mem-fraction-static.lower", "title", fraction=fmt_fraction(value)),
        flags={"--mem-fraction-static": fmt_fraction(value)},
        saves_bytes=int((cur - value) * total) if total else None,
        fits=True if (req and total and (cur - value) * total >= req) else None,
        confidence="medium",
        why=remedy_text("sglang.mem-fraction-static.lower", "why", current=cur, step=f"{step:.2f}", value=fmt_fraction(value)),
    )


def _captured_sizes(inp: AdviceInput) -> list[int]:
    raw = inp.context.extra.get("sglang_cuda_graph_bs")
    if raw is None:
        return []
    if isinstance(raw, list):
        return [int(x) for x in raw]
    return [int(x) for x in str(raw).replace(",", " ").split() if x.isdigit()]


def _release_default_max_bs(inp: AdviceInput) -> tuple[int | None, dict[str, object]]:
    """SGLang's default largest captured batch for the run's release, GPU and TP (None when one is unknown)."""
    text = inp.context.engine_version or inp.hints.get("version")
    version = parse_version(text)
    total = as_int(inp.fig("total_bytes")) or inp.context.gpu_total_bytes
    if version is None or not total:
        return None, {}
    tp = _tp(inp)
    default = release_cuda_graph_max_bs(version, total / 2**20, tp)
    return default, {"version": text, "gpu": total, "tp": tp}


@remedy("sglang.cuda-graph-max-bs")
def cuda_graph_max_bs(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    sizes = _captured_sizes(inp)
    cur = as_int(setting(inp, "cuda_graph_max_bs")) or (max(sizes) if sizes else None)
    why_key = "why"
    extra: dict[str, object] = {}
    if cur is None:
        cur, extra = _release_default_max_bs(inp)
        why_key = "why_default"
    if cur is None or cur < 2:
        return None
    value = cur // 2
    if sizes:
        smaller = [s for s in sizes if s <= value]
        value = max(smaller) if smaller else value
    return Remedy(
        id="sglang.cuda-graph-max-bs",
        title=remedy_text("sglang.cuda-graph-max-bs", "title", batch=value),
        flags={"--cuda-graph-max-bs": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text("sglang.cuda-graph-max-bs", why_key, current=cur, value=value, **extra),
        tradeoff=remedy_text("sglang.cuda-graph-max-bs", "cost", value=value),
    )


@remedy("sglang.disable-cuda-graph")
def disable_cuda_graph(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    return Remedy(
        id="sglang.disable-cuda-graph",
        title=remedy_text("sglang.disable-cuda-graph", "title"),
        flags={"--disable-cuda-graph": ""},
        fits=True if inp.finding.phase == "cudagraph-capture" else None,
        confidence="medium",
        why=remedy_text("sglang.disable-cuda-graph", "why"),
    )


@remedy("sglang.chunked-prefill-size")
def chunked_prefill(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp) or inp.fig("step") == "Decode" or inp.finding.rule == RETRACT_RULE:
        return None  # a decode-time OOM: smaller prefill chunks do not shrink what running requests hold
    cur = as_int(setting(inp, "sglang_chunked_prefill_size", "chunked_prefill_size"))
    avail = as_int(inp.fig("available_tokens"))
    want = as_int(inp.fig("requested_tokens"))
    if avail is not None and want is not None and avail >= want:
        avail = None  # the pool had the tokens asked for (free + evictable): it does not size a chunk
    candidates = [v for v in ((cur // 2) if cur and cur > 0 else None, avail) if v]
    if not candidates:
        return None
    value = round_down(min(candidates), 64)
    if want and value >= want:
        value = round_down(want // 2, 64)  # a chunk no smaller than the failing prefill would not shrink it
    if value < 128:
        return None
    halved = bool(cur and cur > 0)
    key = "why_both" if (halved and avail) else "why_half" if halved else "why_pool"
    return Remedy(
        id="sglang.chunked-prefill-size",
        title=remedy_text("sglang.chunked-prefill-size", "title", tokens=value),
        flags={"--chunked-prefill-size": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text("sglang.chunked-prefill-size", key, current=cur, available=avail),
    )


def _pages(inp: AdviceInput) -> PageShortfall | None:
    """The paged-allocation figures of an SGLang pool failure (see :mod:`oomdoctor.advisor.kv_pages`)."""
    if inp.finding.rule != "sglang.kv-pool-exhausted":
        return None
    return page_shortfall(inp.figures, inp.context)


def _page_size_one_is_default(version: str | None) -> bool:
    """Whether 1 is ``--page-size``'s default at ``version``: ``1`` in ServerArgs 0.4.4-0.4.x, ``None``
    from 0.5, which ``__post_init__`` turns into 1 unless the attention backend forces a size."""
    return default_of("sglang", "--page-size", version) in ("1", "None")


@remedy("sglang.page-size")
def page_size_one(inp: AdviceInput) -> Remedy | None:
    """``--page-size 1`` when whole pages made a pool with the tokens asked for fail."""
    if not _mine(inp):
        return None
    pages = _pages(inp)
    if pages is None or forced_backend(inp.context) is not None:
        return None  # FlashMLA, Cutlass MLA, TRT-LLM MLA/MHA and Ascend override the page size
    key = "why_decode" if pages.worst is not None else "why_prefill"
    why = remedy_text(
        "sglang.page-size", key, page=pages.page_size, requests=pages.requested, worst=pages.worst,
        available=pages.available,
    )
    if _page_size_one_is_default(inp.context.engine_version):
        why = join_sentences([why, remedy_text("sglang.page-size", "why_default")])
    return Remedy(
        id="sglang.page-size",
        title=remedy_text("sglang.page-size", "title"),
        flags={"--page-size": "1"},
        fits=True,  # one token per token asked for: the available tokens (evicting as needed) cover them
        confidence="high",
        why=why,
    )


def _max_running_for_pages(inp: AdviceInput) -> Remedy | None:
    """``--max-running-requests ⌊available / page_size⌋``: that many fresh pages fit in what was available."""
    pages = _pages(inp)
    if pages is None:
        return None
    value = pages.available // pages.page_size
    cur = as_int(setting(inp, "max_running_requests"))
    running = pages.requested if pages.worst is not None else as_int(setting(inp, "sglang_running_requests"))
    ceiling = min(v for v in (cur, running) if v) if (cur or running) else None
    if value < 1 or (ceiling is not None and value >= ceiling):
        return None
    return Remedy(
        id="sglang.max-running-requests",
        title=remedy_text("sglang.max-running-requests", "title", requests=value),
        flags={"--max-running-requests": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text(
            "sglang.max-running-requests", "why_pages", available=pages.available, page=pages.page_size, requests=value
        ),
    )


@remedy("sglang.max-running-requests")
def max_running_requests(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    paged = _max_running_for_pages(inp)
    if paged is not None:
        return paged
    cur = as_int(setting(inp, "max_running_requests")) or inp.context.max_num_seqs
    running = as_int(setting(inp, "sglang_running_requests"))
    key = "why_limit"
    if running and (not cur or running < cur):
        cur, key = running, "why_running"
    if not cur or cur < 2:
        return None
    value = cur // 2
    return Remedy(
        id="sglang.max-running-requests",
        title=remedy_text("sglang.max-running-requests", "title", requests=value),
        flags={"--max-running-requests": str(value)},
        fits=None,
        confidence="medium",
        why=remedy_text("sglang.max-running-requests", key, current=cur),
    )


@remedy("sglang.tp-size")
def tp_size(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp):
        return None
    gpus = as_int(inp.hints.get("gpus")) or inp.context.gpu_count
    tp = _tp(inp)
    if not gpus or tp * 2 > gpus:
        return None
    return Remedy(
        id="sglang.tp-size",
        title=remedy_text("sglang.tp-size", "title", gpus=tp * 2),
        flags={"--tp-size": str(tp * 2)},
        fits=None,
        confidence="medium",
        why=remedy_text("sglang.tp-size", "why", gpus=gpus, new_tp=tp * 2, tp=tp),
    )


@remedy("sglang.quantization")
def quantization(inp: AdviceInput) -> Remedy | None:
    if not _mine(inp) or checkpoint_quantized(inp.context) or setting(inp, "quantization") not in (None, "None"):
        return None
    w = inp.context.weights_bytes
    return Remedy(
        id="sglang.quantization",
        title=remedy_text("sglang.quantization", "title"),
        flags={"--quantization": "fp8"},
        saves_bytes=w // 2 if w else None,
        fits=None,
        confidence="low",
        why=remedy_text("sglang.quantization", "why_sized", weights=w, half=w // 2) if w
        else remedy_text("sglang.quantization", "why"),
    )
