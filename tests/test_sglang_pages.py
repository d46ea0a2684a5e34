"""SGLang's paged KV allocator: with --page-size > 1 the pool can fail with more tokens available
than the message asks for (sglang 0.4.4+ schedule_batch.py alloc_paged_token_slots_decode/extend).

Constructed logs in the wording of sglang 0.4.6 (``Avaliable``, free and evictable on their own
lines) and 0.5.2 (``Available tokens: A (available_size=F + evictable_size=E)``).
"""

from __future__ import annotations

from oomdoctor.report import Finding
from tests.engines_util import diagnose_text, only_error, remedy, remedy_ids

LAUNCH = "$ python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct{args} --port 30000\n"
DECODE_046 = """[2025-06-01 10:05:00 TP0] Decode batch. #running-req: 48, #token: 120000, token usage: 0.98, gen throughput (token/s): 2100.00
[2025-06-01 10:05:01 TP0] Decode out of memory. Try to lower your batch size.
Try to allocate 48 tokens.
Avaliable tokens: 2048
self.token_to_kv_pool_allocator.available_size()=1984
self.tree_cache.evictable_size()=64
"""
PREFILL_052 = """[2025-09-01 10:05:01 TP0] Prefill out of memory. Try to lower your batch size.
Try to allocate 4000 tokens.
Available tokens: 4032 (available_size=4000 + evictable_size=32)
"""


def _dump(**args: str) -> str:
    inner = ", ".join(f"{k}={v}" for k, v in args.items())
    return f"[2025-09-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', {inner}, tp_size=1)\n"


def _finding(text: str) -> Finding:
    f = only_error(diagnose_text(text))
    assert f.rule == "sglang.kv-pool-exhausted"
    return f


def test_decode_page_64_names_page_granularity_with_the_arithmetic() -> None:
    f = _finding(LAUNCH.format(args=" --page-size 64") + DECODE_046)
    assert f.figures == {
        "step": "Decode", "requested_tokens": 48, "decode_tokens": 48, "available_tokens": 2048, "evictable_tokens": 64,
    }  # fmt: skip
    assert f.cause is not None and f.cause.id == "kv-page-granularity"
    assert "up to 48 × 64 = 3072 tokens, more than the 2048 available" in f.cause.summary
    assert remedy_ids(f)[:2] == ["sglang.page-size", "sglang.max-running-requests"]
    first = remedy(f, "sglang.page-size")
    assert first.flags == {"--page-size": "1"}
    assert first.fits is True
    assert "48 × 64 = 3072" in first.why and "SGLang's default page size" in first.why
    limit = remedy(f, "sglang.max-running-requests")
    assert limit.flags == {"--max-running-requests": "32"}  # ⌊2048 / 64⌋
    assert "⌊2048 available tokens / page size 64⌋ = 32" in limit.why


def test_decode_page_1_keeps_the_pool_budget_cause_and_its_remedies() -> None:
    f = _finding(LAUNCH.format(args=" --page-size 1") + DECODE_046)
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert "sglang.page-size" not in remedy_ids(f)
    assert remedy(f, "sglang.max-running-requests").flags == {"--max-running-requests": "24"}  # half the 48 running


def test_decode_without_a_page_size_keeps_todays_remedies() -> None:
    f = _finding(LAUNCH.format(args="") + DECODE_046)
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert "sglang.page-size" not in remedy_ids(f)
    assert remedy(f, "sglang.max-running-requests").flags == {"--max-running-requests": "24"}


def test_decode_whose_whole_pages_fit_is_not_blamed_on_the_page_size() -> None:
    # 48 requests x 16 = 768 tokens of fresh pages fit in 2048: the page size does not explain it
    f = _finding(LAUNCH.format(args=" --page-size 16") + DECODE_046)
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert "sglang.page-size" not in remedy_ids(f)


def test_a_pool_short_of_the_tokens_asked_for_is_not_page_granularity() -> None:
    log = DECODE_046.replace("Avaliable tokens: 2048", "Avaliable tokens: 12")
    f = _finding(LAUNCH.format(args=" --page-size 64") + log)
    assert f.figures["available_tokens"] == 12
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert "sglang.page-size" not in remedy_ids(f)


def test_prefill_server_args_dump_page_16() -> None:
    f = _finding(_dump(mem_fraction_static="0.88", max_running_requests="None", page_size="16") + PREFILL_052)
    assert f.figures == {
        "step": "Prefill", "requested_tokens": 4000, "prefill_tokens": 4000, "available_tokens": 4032, "evictable_tokens": 32,
    }  # fmt: skip
    assert f.cause is not None and f.cause.id == "kv-page-granularity"
    assert f.cause.summary == (
        "With --page-size 16, every prefilled request starts on a fresh 16-token page: the 4000 tokens asked for "
        "need up to 16 − 1 more per request, and the 4032 available ran short."
    )
    assert remedy_ids(f)[0] == "sglang.page-size"
    assert remedy(f, "sglang.page-size").flags == {"--page-size": "1"}
    assert remedy(f, "sglang.max-running-requests").flags == {"--max-running-requests": "252"}  # ⌊4032 / 16⌋


def test_prefill_server_args_dump_without_page_size_keeps_todays_cause() -> None:
    f = _finding(_dump(mem_fraction_static="0.88", chunked_prefill_size="8192") + PREFILL_052)
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert "sglang.page-size" not in remedy_ids(f)
    # half of 8192 is 4096, no smaller than the 4000-token prefill that failed (the pool's 4032 had
    # them, counting 32 evictable): half the prefill, rounded down to 64, shrinks it
    assert remedy(f, "sglang.chunked-prefill-size").flags == {"--chunked-prefill-size": "1984"}


def test_a_backend_that_forces_its_page_size_gets_no_page_size_1() -> None:
    # sglang 0.4.6-0.5.x ServerArgs: FlashMLA only supports a page_size of 64 and sets it
    dump = _dump(attention_backend="'flashmla'", page_size="64")
    f = _finding(dump + DECODE_046)
    assert f.cause is not None and f.cause.id == "kv-page-granularity"
    assert "sglang.page-size" not in remedy_ids(f)
    assert remedy(f, "sglang.max-running-requests").flags == {"--max-running-requests": "32"}


def test_prefill_page_1_keeps_todays_cause() -> None:
    f = _finding(_dump(page_size="1", chunked_prefill_size="8192") + PREFILL_052)
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert "sglang.page-size" not in remedy_ids(f)
