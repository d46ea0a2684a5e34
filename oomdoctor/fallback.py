"""The fallback detector's two pieces of code: the generic figure extractor and the kind name.

The fallback itself is data: rule ``generic.oom`` in ``rules/fallback.toml`` (out-of-memory
vocabulary, lowest priority, ``roles = true``). It claims a line that no specific rule claims;
its finding takes the log's engine at the end of the scan (``<engine>.oom``, or ``generic.oom``
when no engine is known) and yields to a specific rule's message about the same failure.

:func:`role_figures` reads the figures of a message no rule knows: each size takes its role from
the words around it ("tried to allocate 2.00 GiB" -> ``requested_bytes``, "79.15 GiB total
capacity" -> ``total_bytes``, "8.81 MiB is free" -> ``free_bytes``). A size whose role the words
do not tell is left out: figures are extracted exactly or not at all.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import regex

from oomdoctor.units import SizeError, parse_size

#: the fallback rule's id, and its kind before the log's engine is known
FALLBACK_RULE = FALLBACK_KIND = "generic.oom"
#: the fallback rules' engine: ids and kinds start with it ("generic.oom", "generic.oom-recovered")
FALLBACK_ENGINE = "generic"


def is_fallback(rule_id: str) -> bool:
    """Whether ``rule_id`` names one of the fallback rules."""
    return rule_id.startswith(FALLBACK_ENGINE + ".")

#: engine name -> the prefix its kinds use (the rest use the engine name)
_KIND_PREFIX = {
    "tensorrt-llm": "trtllm",
    "llama.cpp": "ggml",
    "ollama": "ggml",
    "pytorch": "torch",
    "tensorflow": "xla",
    "jax": "xla",
}

class _Patterns(NamedTuple):
    """The extractor's regexes, compiled on first use: only a message no rule knows needs them."""

    #: a size with its unit, or a bare byte count right after a role word ("needed 827046512")
    size: regex.Pattern[str]
    #: role words, nearest one before the size wins (within its clause); the value is the figure name
    before: list[tuple[regex.Pattern[str], str]]
    #: role words right after the size ("8.81 MiB is free", "79.15 GiB total capacity")
    after: list[tuple[regex.Pattern[str], str]]
    gpu: regex.Pattern[str]
    #: where a clause ends: the words before it do not describe the sizes after it
    clause_end: regex.Pattern[str]


@cache
def _patterns() -> _Patterns:
    return _Patterns(
        size=regex.compile(
            r"(?<![\w.,])(?P<num>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s?(?P<unit>[KMGTP]i?B|bytes?|B)\b"
            r"(?:\s*\((?P<exact>\d+)\s?(?:bytes?|B)\))?"
            r"|(?<=\b(?:needed|need|requested|required|available|free|remaining|total|allocate|allocating|limit)"
            r"\s?[:=]?\s?)(?P<bare>\d{5,})(?![\w.])(?!\s*(?:tokens?|blocks?|pages?|elements?|items?|MB|GB|KB|%))",
            regex.IGNORECASE,
        ),
        before=[
            (regex.compile(r"\b(?:(?:tried|try|trying|failed|unable|attempt(?:ed|ing)?) to allocate|"
                           r"(?:could not|couldn't|cannot|can't|can not) allocate|allocating|"
                           r"requested|request(?:ing)?|needed|needs?|required?|requires)\b", regex.I), "requested_bytes"),
            (regex.compile(r"\b(?:total|capacity)\b", regex.I), "total_bytes"),
            (regex.compile(r"\b(?:free|available|remaining|left)\b", regex.I), "free_bytes"),
            (regex.compile(r"\b(?:limit|allowed|max(?:imum)?)\b", regex.I), "allowed_bytes"),
            (regex.compile(r"\b(?:in use|used|usage)\b", regex.I), "in_use_bytes"),
            (regex.compile(r"\ballocated\b", regex.I), "allocated_bytes"),
        ],
        after=[
            (regex.compile(r"^\s?(?:is |are )?(?:free|available|remaining)\b", regex.I), "free_bytes"),
            (regex.compile(r"^\s?(?:total|capacity)\b", regex.I), "total_bytes"),
            (regex.compile(r"^\s?(?:is |are )?(?:in use|used)\b", regex.I), "in_use_bytes"),
            # (PyTorch <= 2.0's clauses, quoted without their head: "1.24 GiB already allocated",
            # "1.25 GiB reserved in total by PyTorch")
            (regex.compile(r"^\s?(?:is |are )?(?:already )?allocated\b", regex.I), "allocated_bytes"),
            (regex.compile(r"^\s?(?:is |are )?reserved\b", regex.I), "reserved_bytes"),
            (regex.compile(r"^\s?(?:is |are )?(?:requested|needed|required)\b", regex.I), "requested_bytes"),
        ],
        gpu=regex.compile(r"(?:\bGPU\s?#?|device:GPU:|\bcuda:|\bdevice ordinal\s)(?P<n>\d{1,2})\b", regex.I),
        clause_end=regex.compile(r"[;.!?]\s|,\s(?=\w+\s\w)|\n"),
    )


def kind_for(engine: str | None, kind: str = FALLBACK_KIND) -> str:
    """A fallback ``kind`` for a log of ``engine``: ``generic.oom`` becomes ``<engine>.oom``
    (``vllm.oom``, ``trtllm.oom``, ...), and stays when no engine is known."""
    generic, _, rest = kind.partition(".")
    if not engine or generic != FALLBACK_ENGINE:
        return kind
    prefix = _KIND_PREFIX.get(engine, engine)
    prefix = regex.sub(r"[^a-z0-9\-]+", "-", prefix.lower()).strip("-")
    return f"{prefix}.{rest}" if prefix else kind


def _role_before(text: str) -> str | None:
    best: tuple[int, str] | None = None
    for pat, role in _patterns().before:
        for m in pat.finditer(text):
            if best is None or m.end() > best[0]:
                best = (m.end(), role)
    return best[1] if best else None


def _role_after(text: str) -> str | None:
    for pat, role in _patterns().after:
        if pat.search(text):
            return role
    return None


def role_figures(text: str) -> dict[str, Any]:
    """Figures of an unknown out-of-memory message: every size whose role its words tell
    (the first size of each role), and the GPU index where it names one GPU only."""
    pats = _patterns()
    out: dict[str, Any] = {}
    prev_end = 0
    for m in pats.size.finditer(text):
        # the words before the size: back to the previous size or the start of its clause
        lead = text[prev_end : m.start()]
        cut = [c.end() for c in pats.clause_end.finditer(lead)]
        lead = lead[cut[-1] :] if cut else lead
        prev_end = m.end()
        nxt = pats.size.search(text, m.end())
        tail = text[m.end() : nxt.start() if nxt else len(text)][:40]
        role = _role_after(tail) or _role_before(lead[-60:])
        if role is None or role in out:
            continue
        try:
            if m.group("bare"):
                value = int(m.group("bare"))
            elif m.group("exact"):
                value = int(m.group("exact"))
            else:
                value = parse_size(m.group("num").replace(",", "") + m.group("unit"))
        except (SizeError, ValueError):
            continue
        out[role] = value
    indices = {int(g.group("n")) for g in pats.gpu.finditer(text)}
    if len(indices) == 1:
        # (two GPUs named: several ranks' messages run together, and which one a size is of is not told)
        out["gpu_index"] = indices.pop()
    return out
