"""V1 "No available memory for the cache blocks" after "Available KV cache memory: -X GiB" (vllm 0.10.1
v1/worker/gpu_worker.py, v1/core/kv_cache_utils.py): raising --gpu-memory-utilization helps only when
(new − current) × total covers the deficit plus one request's KV. With the total in the log the
utilization needed is computed and a raise above the ceiling is "not enough alone"; without it the
raise is not known to be enough and ranks after the rest. V1 sizes the profile batch by
max_num_batched_tokens, so --max-model-len is no remedy for the budget."""

from __future__ import annotations

from pathlib import Path

from oomdoctor import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm"
RAISE = ("vllm.gpu-memory-utilization.raise", "vllm.gpu-memory-utilization.raise-for-kv")


def _one(text: str):  # type: ignore[no-untyped-def]
    report = diagnose(text)
    assert len(report.findings) == 1
    return report.findings[0]


def _raise(f):  # type: ignore[no-untyped-def]
    return next(r for r in f.remedies if r.id in RAISE)


def _no_max_model_len(f) -> bool:  # type: ignore[no-untyped-def]
    return not any("--max-model-len" in r.flags for r in f.remedies)


def test_total_known_and_the_ceiling_not_enough() -> None:
    f = _one((FIXTURES / "synthetic-v1-negative-kv-budget.log").read_text())
    r = _raise(f)
    # 2.77 GiB deficit + one 32768-token request of Qwen2.5-7B (56 KiB a token: 1.75 GiB) = 4.52 GiB
    # over a 22.49 GiB A10G: 0.90 + 4.52 / 22.49 = 1.11, above 0.95
    assert r.fits is False and r.flags == {}
    assert "0.90 + 4.52 GiB / 22.49 GiB = 1.11" in r.why
    assert f.remedies[-1] is r  # after what fits (--cpu-offload-gb 5)
    assert {"--cpu-offload-gb": "5"} in [x.flags for x in f.remedies]
    assert _no_max_model_len(f)


def test_total_known_and_a_raise_that_covers_it() -> None:
    text = (FIXTURES / "synthetic-v1-negative-kv-budget.log").read_text()
    text = text.replace("NVIDIA A10G                    On  |", "NVIDIA H100 80GB HBM3          On  |")
    text = text.replace("1MiB /  23028MiB", "1MiB /  81559MiB").replace("-2.77 GiB", "-0.42 GiB")
    f = _one(text)
    r = _raise(f)
    # 0.42 GiB + 1.75 GiB = 2.17 GiB over 79.65 GiB: 0.90 + 0.0273 = 0.93 (0.95 is more than needed)
    assert r.flags == {"--gpu-memory-utilization": "0.93"} and r.fits is True
    assert f.remedies[0] is r
    assert _no_max_model_len(f)


def test_total_unknown_is_not_known_to_be_enough() -> None:
    f = _one((FIXTURES / "synthetic-v1-no-blocks.log").read_text())
    r = _raise(f)
    assert r.flags == {"--gpu-memory-utilization": "0.95"}
    assert r.fits is False and r.confidence == "low"
    # 430.08 MiB / (0.95 − 0.90) = 8.40 GiB: the smallest GPU on which the step covers the deficit
    assert "8.40 GiB or more" in r.why
    assert f.remedies[0] is not r
    assert _no_max_model_len(f)


def test_no_figure_keeps_the_messages_advice_first() -> None:
    # no KV figure at all: nothing to weigh the raise against, vLLM's own advice stays first
    f = _one(
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine.\n"
    )
    r = _raise(f)
    assert r.fits is None and f.remedies[0] is r


def _raise_calc(kind: str = "vllm.kv-cache.no-blocks", ctx: dict | None = None, **figures: int):  # type: ignore[no-untyped-def]
    from oomdoctor.advisor.registry import AdviceInput, calculator
    from oomdoctor.report import Context, Finding, Location

    finding = Finding(rule="t", kind=kind, engine="vllm", severity="error", phase="kv-cache-alloc", title="t",
                      message="m", location=Location(line=1, end_line=1), figures=dict(figures))
    context = Context(engine="vllm", engine_version="0.10.1", **(ctx or {}))
    return calculator("vllm.gpu-memory-utilization.raise")(AdviceInput(finding, context, {}))


def test_blind_raise_boundaries() -> None:
    llama = {"model": "meta-llama/Llama-3.1-8B", "max_model_len": 8192, "kv_cache_bytes": 5 * 2**30}
    # a stated budget of 0 is no budget: one 8192-token request (128 KiB a token) = 1 GiB is missing, and
    # 0.95 − 0.90 covers it only on a GPU of 1 GiB / 0.05 = 20 GiB or more (the message's figure wins
    # over the context's positive KV size)
    r = _raise_calc(ctx=llama, kv_cache_available_bytes=0)
    assert r is not None and r.fits is False and "20.00 GiB or more" in r.why
    above = _raise_calc(ctx=llama, kv_cache_available_bytes=1)
    assert above is not None and above.fits is None
    # only tokens: what is missing is said in tokens
    tokens = _raise_calc(kind="vllm.kv-cache.max-len-exceeds", kv_cache_tokens=3664, max_seq_len=4096)
    assert tokens is not None and "lacks 432 tokens (4096 − 3664)" in tokens.why
    same = _raise_calc(kind="vllm.kv-cache.max-len-exceeds", kv_cache_tokens=4096, max_seq_len=4096)
    assert same is not None and "The log does not show how much is missing" in same.why
