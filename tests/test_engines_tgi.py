"""TGI: detection, kinds, phases and figures."""

from __future__ import annotations

from tests.engines_util import diagnose, errors, only_error


def test_corpus_prefill_tokens_is_a_warmup_failure() -> None:
    r = diagnose("tgi/other-017.log")
    f = only_error(r)
    assert (f.rule, f.kind, f.engine) == ("tgi.prefill-tokens", "tgi.oom", "tgi")
    assert f.figures == {"prefill_tokens": 1024}
    assert f.phase == "warmup"  # raised only inside flash_causal_lm.warmup()
    assert r.context.engine == "tgi"


def test_corpus_router_relayed_cuda_oom_is_tgi_oom_with_every_figure() -> None:
    f = only_error(diagnose("tgi/other-020.log"))
    assert (f.rule, f.kind, f.engine, f.phase) == ("tgi.server-cuda-oom", "tgi.oom", "tgi", "inference")
    assert f.figures == {
        "requested_bytes": 232783872,
        "gpu_index": 0,
        "total_bytes": 42294690447,
        "free_bytes": 228526653,
        "allocated_bytes": 39835821670,
        "reserved_unallocated_bytes": 1685774664,
        "other_processes": [{"pid": 862944, "in_use_bytes": 42058467246}],
    }


def test_healthy_startup_reads_args() -> None:
    r = diagnose("tgi/synthetic-healthy-startup.log")
    assert not errors(r)
    assert r.context.engine == "tgi"
    assert r.context.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert r.context.kv_cache_tokens == 421328
    assert r.context.extra["tgi_max_batch_prefill_tokens"] == 4096
    assert r.context.extra["tgi_max_input_tokens"] == 4095


def test_router_warmup_error_is_one_finding() -> None:
    f = only_error(diagnose("tgi/synthetic-warmup-prefill-oom.log"))
    assert f.rule == "tgi.prefill-tokens"
    assert f.figures == {"prefill_tokens": 8192}


def test_max_total_tokens() -> None:
    f = only_error(diagnose("tgi/synthetic-max-total-tokens.log"))
    assert (f.rule, f.phase, f.figures) == ("tgi.max-total-tokens", "kv-cache-alloc", {"max_total_tokens": 32000})
