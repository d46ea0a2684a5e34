"""Corpus failures the tool cannot find, each with the reason the log itself gives: a regression
that finds one by guessing, or a change that makes one findable, fails here."""

from __future__ import annotations

import re

import pytest

import oomdoctor
from tests.corpus import FIXTURES

#: out-of-memory vocabulary in any engine's wording (the fallback's, loosely)
_OOM_WORDS = re.compile(r"out of memory|outofmemory|\boom\b|resource exhausted|failed to allocate|"
                        r"cannot allocate|memory allocation|not enough (?:\w+ )?memory", re.I)
#: vLLM's cudagraph-capture hint: healthy, it names out-of-memory as a possibility only
_HINT = "If out-of-memory error occurs during cudagraph capture"

#: fixture -> why no failure can be reported from its excerpt
UNDETECTABLE = {
    "vllm/vllm-029": "the excerpt ends mid-line in the error's first words ('Error executing metho'); "
    "before it only the memory profile and the capture hint, no error text",
    "vllm/vllm-041": "the excerpt's output was cut ('max output size exceeded'): a worker's traceback "
    "through capture_model with no exception line",
}


@pytest.mark.parametrize("case", sorted(UNDETECTABLE))
def test_an_excerpt_without_error_text_gives_no_finding(case: str) -> None:
    data = (FIXTURES / f"{case}.log").read_bytes()
    text = data.decode("utf-8", "replace")
    assert not [ln for ln in text.splitlines() if _OOM_WORDS.search(ln) and _HINT not in ln]
    report = oomdoctor.diagnose(data, source="log")
    assert not [f for f in report.findings if f.severity == "error"]
