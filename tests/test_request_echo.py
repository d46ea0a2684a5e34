"""A server that logs what users send (vLLM's request logger, SGLang's ``--log-requests``) echoes
their prompts; a prompt that asks about an out-of-memory error is not one."""

from __future__ import annotations

import pytest

from oomdoctor.api import diagnose
from oomdoctor.reader import is_request_echo

PROMPT = "My training job says CUDA out of memory. Tried to allocate 2.00 GiB. What should I do?"
ECHOES = [
    # vllm 0.10.1 entrypoints/logger.py (RequestLogger.log_inputs)
    f"INFO 08-19 00:00:01 [logger.py:43] Received request chatcmpl-1f2e: prompt: '{PROMPT}', params: "
    "SamplingParams(n=1, temperature=0.7, max_tokens=256), prompt_token_ids: None, lora_request: None.",
    # sglang 0.4.6 managers/tokenizer_manager.py (--log-requests)
    f"[2025-06-01 10:00:00] Receive: obj=GenerateReqInput(text='{PROMPT}', sampling_params={{'max_new_tokens': 256}}, "
    "rid='9f0c', stream=False)",
]
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.00 GiB is free."
)


@pytest.mark.parametrize("echo", ECHOES)
def test_a_prompt_about_an_oom_is_not_one(echo: str) -> None:
    assert is_request_echo(echo)
    assert diagnose(echo + "\n").findings == []


@pytest.mark.parametrize("echo", ECHOES)
def test_a_failure_after_an_echoed_prompt_is_still_found(echo: str) -> None:
    report = diagnose(echo + "\n" + OOM + "\n")
    assert [(f.rule, f.location.line, f.figures["requested_bytes"]) for f in report.findings] == [
        ("torch.cuda-oom", 2, 2 << 30)
    ]


def test_the_program_saying_the_same_words_is_a_failure() -> None:
    assert not is_request_echo(OOM)
    assert not is_request_echo("ERROR 08-19 00:00:01 [engine.py:1] Received request failed: CUDA out of memory")
