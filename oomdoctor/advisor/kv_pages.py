"""SGLang's paged KV allocator: when ``--page-size`` > 1 makes a pool with tokens to spare fail.

With ``--page-size`` P > 1 (sglang 0.4.4+) the token-to-KV pool hands out whole pages. A decode step
asks for one token per running request ("Try to allocate N tokens", N = ``len(seq_lens)``), but every
request whose last page is full takes a fresh page, so the step may need up to N x P tokens
(``alloc_paged_token_slots_decode`` evicts for exactly that). A prefill of R tokens may need up to
P - 1 more per request, to start on a page boundary. So "Avaliable tokens: A" with A >= N can still fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oomdoctor.advisor._engine_util import as_int
from oomdoctor.report import Context

#: attention backends for which sglang 0.4.6-0.5.x's ServerArgs forces a page size of its own
#: (server_args.py: ascend 128, flashmla 64, cutlass_mla 128, trtllm_mla 32/64, trtllm_mha 16/32/64)
PAGED_BACKENDS = frozenset({"ascend", "flashmla", "cutlass_mla", "trtllm_mla", "trtllm_mha"})
#: the launch arguments that name an attention backend
_BACKEND_ARGS = ("attention_backend", "decode_attention_backend", "prefill_attention_backend")


@dataclass(frozen=True)
class PageShortfall:
    """The figures of a paged-allocation failure."""

    step: str  #: "Decode" or "Prefill"
    requested: int  #: tokens the message says were asked for (N running requests in decode)
    available: int  #: tokens the message says were available (free + evictable)
    page_size: int
    #: decode: N x P, the tokens of whole pages the step may need; prefill: None (the message
    #: does not say how many requests the R tokens belong to)
    worst: int | None


def page_size_of(context: Context) -> int | None:
    """The ``--page-size`` the user launched with (the command line or the ``ServerArgs(...)`` dump)."""
    return as_int(context.launch_args.get("page_size"))


def forced_backend(context: Context) -> str | None:
    """The attention backend the user chose that forces its own page size, or None."""
    for name in _BACKEND_ARGS:
        v = context.launch_args.get(name)
        if v is not None and str(v).strip("'\"") in PAGED_BACKENDS:
            return str(v).strip("'\"")
    return None


def page_shortfall(figures: dict[str, Any], context: Context) -> PageShortfall | None:
    """The paged-allocation figures when the pool had at least the tokens asked for and the page size
    is above 1 (in decode, also below the N x P worst case); None otherwise."""
    step, req, avail = figures.get("step"), as_int(figures.get("requested_tokens")), as_int(figures.get("available_tokens"))
    page = page_size_of(context)
    if step not in ("Decode", "Prefill") or req is None or avail is None or page is None or page <= 1:
        return None
    if avail < req:
        return None
    worst: int | None = None
    if step == "Decode":
        worst = req * page
        if avail >= worst:
            return None  # whole pages for every request fit: the page size does not explain it
    return PageShortfall(step=str(step), requested=req, available=avail, page_size=page, worst=worst)
