"""The cause's own knob when the log gives no number to put on it.

A calculator answers ``None`` when the log lacks the figures its value needs (TGI's prefill
budget, SGLang's request limit or static fraction, llama.cpp's context). When that leaves the
cause without any of its own knobs, the knob is still the answer an expert gives first: it is
offered without a value ("lower --max-batch-prefill-tokens"), at low confidence, worded by the
remedy's ``title_unsized`` / ``why_unsized`` templates in ``rules/advice/remedies.toml`` (only
remedies with such templates can be offered this way), and an ask for the missing facts follows.
A log that shows no cause and no figure at all gets the rule's own first knob worded by its
``title_bare`` / ``why_bare`` templates (llama.cpp's and ollama's context).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from oomdoctor.advisor.prescription import remedy_info, remedy_text
from oomdoctor.report import Remedy


def can_be_unsized(remedy_id: str, variant: str = "unsized") -> bool:
    """True when the remedy table words ``remedy_id`` without a value (its ``variant`` templates)."""
    text = remedy_info(remedy_id).text
    return f"title_{variant}" in text and f"why_{variant}" in text


def unsized_remedy(remedy_id: str, variant: str = "unsized", **values: Any) -> Remedy:
    """``remedy_id`` as a direction with no value: the knob, why it is the one, how to size it,
    worded by its ``title_<variant>`` / ``why_<variant>`` templates (filled with ``values``). Where
    the table names the setting (``knob``) and words its value (``setting_<variant>``), the remedy
    carries that setting with the words as its value (prose, never code: code_lines.py)."""
    rem = Remedy(
        id=remedy_id,
        title=remedy_text(remedy_id, f"title_{variant}", **values),
        fits=None,
        confidence="low",
        why=remedy_text(remedy_id, f"why_{variant}", **values),
    )
    info = remedy_info(remedy_id)
    if info.knob and f"setting_{variant}" in info.text:
        rem.settings[info.knob] = remedy_text(remedy_id, f"setting_{variant}", **values)
    return rem


#: remedy id prefix -> the engine whose knob it is (an engine's knob is never offered for another)
ENGINE_OF_PREFIX: dict[str, str] = {
    "vllm": "vllm", "vllm-rs": "vllm-rs", "sglang": "sglang", "tgi": "tgi", "ggml": "ggml", "ollama": "ggml",
    "trtllm": "tensorrt-llm",
}


def _for_engine(remedy_id: str, engine: str | None) -> bool:
    owner = ENGINE_OF_PREFIX.get(remedy_id.split(".", 1)[0])
    if owner is None:
        return True
    if owner == "ggml":
        return engine in ("ggml", "llama.cpp", "ollama")
    return engine == owner


def unsized_lever(
    own: Iterable[str], computed: Iterable[str], engine: str | None, variant: str = "unsized"
) -> Remedy | None:
    """The first of the cause's own remedies ``own`` (in the prescription's order) that no
    calculator sized, that is ``engine``'s, and that the table can word without a value (its
    ``variant`` templates), as an unsized remedy; None when there is none."""
    done = set(computed)
    for rid in own:
        if rid not in done and _for_engine(rid, engine) and can_be_unsized(rid, variant):
            return unsized_remedy(rid, variant)
    return None
