"""SGLang: detection, kinds, phases and figures on real and synthetic logs."""

from __future__ import annotations

import oomdoctor
from tests.corpus import FIXTURES
from tests.engines_util import diagnose, diagnose_text, errors, figures, only_error


def test_corpus_not_enough_memory_reads_current_fraction() -> None:
    f = only_error(diagnose("sglang/other-021.log"))
    assert (f.rule, f.kind, f.engine) == ("sglang.not-enough-memory", "sglang.oom", "sglang")
    assert f.figures == {"mem_fraction_static": 0.2}
    assert f.phase == "kv-cache-alloc"


def test_healthy_startup_is_context_not_error() -> None:
    r = diagnose("sglang/synthetic-healthy-startup.log")
    assert not errors(r)
    ctx = r.context
    assert ctx.engine == "sglang"
    assert ctx.kv_cache_tokens == 421328
    assert ctx.max_model_len == 131072
    assert ctx.max_num_seqs == 4096
    assert ctx.weights_bytes == round(15.06 * 2**30)
    assert ctx.extra["sglang_avail_before_load_bytes"] == round(78.68 * 2**30)
    assert ctx.extra["sglang_avail_after_pool_bytes"] == round(10.21 * 2**30)


def test_corpus_kv_allocated_start_up_gives_no_error() -> None:
    r = diagnose("sglang/other-058.log")
    assert not errors(r)
    assert r.context.engine == "sglang"
    assert r.context.kv_cache_tokens == 2795207
    assert r.context.extra["sglang_k_bytes"] == 57241176637


def test_cuda_graph_failure_wins_over_the_embedded_torch_oom() -> None:
    f = only_error(diagnose("sglang/synthetic-cuda-graph-oom.log"))
    assert f.rule == "sglang.cuda-graph-capture-failed"
    assert f.phase == "cudagraph-capture"
    assert figures(f, "requested_bytes", "total_bytes", "free_bytes") == {
        "requested_bytes": 2**30,
        "total_bytes": round(79.10 * 2**30),
        "free_bytes": 512 * 2**20,
    }


def test_prefill_pool_exhaustion_figures() -> None:
    f = only_error(diagnose("sglang/synthetic-prefill-oom.log"))
    assert f.rule == "sglang.kv-pool-exhausted"
    assert f.figures == {"step": "Prefill", "requested_tokens": 8192, "prefill_tokens": 8192, "available_tokens": 3000}
    assert f.phase == "inference"


def test_batch_lines_say_a_bare_torch_oom_came_while_serving() -> None:
    """SGLang's Prefill/Decode batch lines are inference progress: a PyTorch OOM printed without
    a traceback after them is an inference failure; without them nothing says which phase."""
    f = only_error(diagnose("sglang/synthetic-decode-then-cuda-oom.log"))
    assert (f.rule, f.engine, f.phase) == ("torch.cuda-oom", "sglang", "inference")
    log = (FIXTURES / "sglang/synthetic-decode-then-cuda-oom.log").read_bytes()
    without = b"".join(line for line in log.splitlines(keepends=True) if b" batch. #" not in line)
    assert only_error(oomdoctor.diagnose(without)).phase == "unknown"


def test_a_negative_profiled_token_budget_is_the_pool_failing() -> None:
    """fresh-112: SGLang's warning before its 'Not enough memory' (model_runner init_memory_pool):
    a profiled budget at or below zero tokens leaves no KV pool."""
    f = only_error(diagnose_text(
        "[2025-07-02 07:41:59 DP0 TP0] max_total_tokens=131072 is larger than the profiled value -561981. "
        "Use the profiled value instead.\n"
    ))
    assert (f.rule, f.phase, f.figures) == (
        "sglang.profiled-tokens-negative", "kv-cache-alloc", {"max_total_tokens": 131072, "profiled_tokens": -561981}
    )
    assert f.cause is not None and f.cause.id == "kv-budget-exhausted"
    assert f.remedies[0].id == "sglang.mem-fraction-static.raise"


def test_a_pool_that_had_the_tokens_sizes_no_chunk() -> None:
    """new-023: "Available full tokens: 8070656 (full_available_size=7936 + full_evictable_size_=8062720)"
    for an 8192-token prefill: a --chunked-prefill-size of 8070656 would raise the chunk, not lower it,
    and with no current chunk size in the log nothing sizes a smaller one."""
    from tests.engines_util import diagnose, only_error, remedy_ids

    f = only_error(diagnose("sglang/new-023.log"))
    assert f.figures["available_tokens"] == 8070656 and f.figures["requested_tokens"] == 8192
    assert "sglang.chunked-prefill-size" not in remedy_ids(f)


def test_a_pool_that_counted_enough_is_not_said_to_have_had_less() -> None:
    """new-023's pool counted 8070656 tokens available (evictable included) for 8192: the summary does
    not say "8192 needed and 8070656 left" as if that were a shortage."""
    from tests.engines_util import diagnose, only_error

    f = only_error(diagnose("sglang/new-023.log"))
    assert f.cause is not None and f.cause.summary == (
        "The KV pool is full with the running requests: 8192 more tokens were needed, and the 8070656 it counted "
        "as available (cached prefixes it could evict included) could not be handed out.")
