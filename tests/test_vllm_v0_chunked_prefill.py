"""V0 without chunked prefill profiles max_num_batched_tokens = max(max_model_len, 2048) tokens
(config.py SchedulerConfig.__post_init__, vllm 0.6.6 and 0.7.3; on by itself only above 32768,
engine/arg_utils.py): --enable-chunked-prefill (2048 tokens from 0.6.0, 512 before) shrinks the
profile's activation peak for a long length. And where the log gives the KV tokens, the length and
the KV bytes (V0's memory-profiling message and "# GPU blocks"), the bytes missing are computed."""

from __future__ import annotations

from pathlib import Path

from oomdoctor import diagnose
from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Location

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm"
CHUNKED = "vllm.enable-chunked-prefill"
GiB = 2**30


def _one(name: str):  # type: ignore[no-untyped-def]
    report = diagnose((FIXTURES / name).read_text())
    assert len(report.findings) == 1
    return report.findings[0]


def test_kv_short_fixture_sizes_the_missing_bytes_and_chunked_prefill_fits() -> None:
    f = _one("synthetic-v0-long-context-kv-short.log")
    chunked = next(r for r in f.remedies if r.id == CHUNKED)
    assert chunked.flags == {"--enable-chunked-prefill": ""}
    # 2.14 GiB peak × (32768 − 2048) / 32768 = 2.01 GiB, more than the 1.38 GiB missing
    assert chunked.fits is True and chunked.rank == 2
    assert "2.01 GiB" in chunked.why and "1.38 GiB is missing" in chunked.why
    raise_ = next(r for r in f.remedies if r.id.startswith("vllm.gpu-memory-utilization.raise"))
    # (32768 − 21456) tokens × 2.62 GiB / 21456 tokens = 1.38 GiB; 0.90 + 1.38 / 22.05 = 0.97 > 0.95
    assert "The log does not show how much is missing" not in raise_.why
    assert "(32768 − 21456) tokens × 128.04 KiB per token" in raise_.why
    assert raise_.fits is False
    assert f.remedies[0].flags == {"--max-model-len": "21456"}


def test_profile_oom_fixture_offers_chunked_prefill_first() -> None:
    f = _one("synthetic-v0-long-context-profile-oom.log")
    assert f.phase == "profiling"
    assert f.remedies[0].id == CHUNKED and f.remedies[0].flags == {"--enable-chunked-prefill": ""}
    assert "max(max_model_len, 2048) = 32768" in f.remedies[0].why


def _inp(length: int, version: str | None = "0.6.6", kind: str = "vllm.kv-cache.max-len-exceeds",
         phase: str = "kv-cache-alloc", **args: str) -> AdviceInput:
    finding = Finding(rule="t", kind=kind, engine="vllm", severity="error", phase=phase, title="t", message="m",
                      location=Location(line=1, end_line=1), figures={})
    ctx = Context(engine="vllm", engine_version=version, max_model_len=length, launch_args=dict(args))
    return AdviceInput(finding, ctx, {})


def test_only_v0_long_and_off() -> None:
    calc = calculator(CHUNKED)
    r = calc(_inp(8192))
    assert r is not None and "takes 2048 tokens, not 8192" in r.title
    assert calc(_inp(8191)) is None  # the peak unknown: a profile of fewer than 4 chunks gains little
    assert calc(_inp(40960)) is None  # V0 turns it on by itself above 32768
    assert calc(_inp(40960, chunked_prefill_enabled="False")) is not None  # turned off by the user
    assert calc(_inp(16384, enable_chunked_prefill="True")) is None
    assert calc(_inp(16384, version="0.8.5")) is None  # V1: the profile batch is max_num_batched_tokens
    assert calc(_inp(16384, kind="torch.cuda-oom", phase="inference")) is None
    assert calc(_inp(16384, kind="torch.cuda-oom", phase="profiling")) is not None
    before = calc(_inp(4096, version="0.5.5"))
    assert before is not None and "takes 512 tokens, not 4096" in before.title


def _ctx_inp(length: int, version: str = "0.6.6", **ctx: object) -> AdviceInput:
    inp = _inp(length, version)
    return AdviceInput(inp.finding, inp.context.model_copy(update=ctx), {})


def test_boundaries() -> None:
    calc = calculator(CHUNKED)
    # V0 turns it on by itself above 32768 only: 32768 is still off
    assert calc(_inp(32768)) is not None and calc(_inp(32769)) is None
    # a budget equal to the length is V0's own default without chunked prefill; one below it means it is on
    assert calc(_ctx_inp(16384, max_num_batched_tokens=16384)) is not None
    assert calc(_ctx_inp(16384, max_num_batched_tokens=16383)) is None
    assert calc(_ctx_inp(16384, max_num_batched_tokens=16385)) is None  # a budget the user set: kept
    r = calc(_inp(8192, version="0.6.0"))
    assert r is not None and "takes 2048 tokens, not 8192" in r.title
    # the peak known: any profile batch above the chunk; the profile is at least 2048 tokens
    peak = 2 * GiB
    assert calc(_ctx_inp(2048, activation_peak_bytes=peak)) is None  # 2048 tokens: nothing to cut
    small = calc(_ctx_inp(1024, version="0.5.5", activation_peak_bytes=peak))
    assert small is not None and "takes 512 tokens, not 2048" in small.title
    assert small.saves_bytes == peak * (2048 - 512) // 2048
