"""llama.cpp / ollama at context creation: the compute-buffer reservation, pipeline parallelism's
retry, several GPUs, and ollama's own estimate of the compute graph.

Wordings: llama.cpp b7108 src/llama-context.cpp as vendored by ollama 0cf7794b1 ("pipeline
parallelism enabled (n_copies=%d)", "compute buffer allocation failed, retrying without pipeline
parallelism", "failed to allocate compute pp buffers"); v0.5.0 as bundled by node-llama-cpp 3.22.1
(the same retry printed by sched_reserve); ollama v0.5.7 llm/memory.go ("offload to cuda" with
memory.graph.full / .partial, memory.required.kv, memory.weights.repeating).
"""

from __future__ import annotations

import oomdoctor
from oomdoctor.advisor.product_knobs import in_product_knobs
from oomdoctor.report import Remedy
from tests.corpus import FIXTURES
from tests.engines_util import diagnose

RETRY = "llama_context: compute buffer allocation failed, retrying without pipeline parallelism\n"


def _remedies(finding: object) -> dict[str, dict[str, str]]:
    return {r.id: {**r.flags, **r.env, **r.settings} for r in finding.remedies}  # type: ignore[attr-defined]


# -- 1. the recovered retry ---------------------------------------------------------------------


def test_the_retry_that_went_on_is_a_warning_with_one_optional_remedy() -> None:
    r = diagnose("llamacpp/synthetic-pp-recovered.log")
    assert r.summary.errors == 0
    [f] = r.findings
    assert (f.severity, f.phase, f.figures["buffer_type"], f.figures["buffer_bytes"]) == (
        "warning", "kv-cache-alloc", "CUDA1", 5106565120,
    )
    assert f.cause is not None and f.cause.id == "pipeline-parallel-fallback"
    assert "one compute-buffer copy" in f.cause.summary and "4 copies" in f.cause.summary
    # only the optional one: 2048 × 1281.51 MiB / 4870.00 MiB = 538.9 → 512
    assert _remedies(f) == {"ggml.ubatch-size.pipeline": {"-ub": "512"}}
    assert f.remedies[0].tradeoff.startswith("Optional")


def test_the_same_retry_in_v0_5_0_wording_sched_reserve() -> None:
    log = (FIXTURES / "llamacpp/synthetic-pp-recovered.log").read_text(encoding="utf-8").replace(
        "llama_context: compute buffer allocation failed", "sched_reserve: compute buffer allocation failed"
    )
    r = oomdoctor.diagnose(log.encode())
    assert [(f.severity, f.cause.id if f.cause else None) for f in r.findings] == [
        ("warning", "pipeline-parallel-fallback")
    ]


def test_a_retry_that_fails_too_keeps_both_failures_errors() -> None:
    r = diagnose("llamacpp/synthetic-pp-retry-failed.log")
    assert [(f.severity, f.phase, f.figures["buffer_bytes"]) for f in r.findings] == [
        ("error", "kv-cache-alloc", 10213130240),
        ("error", "kv-cache-alloc", 2687521280),
    ]
    assert all(f.cause is not None and f.cause.id == "activation-peak" for f in r.findings)


def test_without_the_retry_line_the_pipelined_failure_is_an_error() -> None:
    log = (FIXTURES / "llamacpp/synthetic-pp-recovered.log").read_text(encoding="utf-8")
    r = oomdoctor.diagnose(log.replace(RETRY, "").encode())
    assert [f.severity for f in r.findings] == ["error"]
    assert r.findings[0].cause is not None and r.findings[0].cause.id != "pipeline-parallel-fallback"


# -- 2. the phase of context creation ---------------------------------------------------------


def test_compute_buffers_at_context_creation_are_kv_cache_alloc_and_while_decoding_inference() -> None:
    creation = (
        "llama_new_context_with_model: n_ctx      = 2048\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1766.75 MiB on device 0: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1852573696\n"
        "llama_new_context_with_model: failed to allocate compute buffers\n"
    )
    decoding = (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB on device 1: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 10345253120\n"
        "llama_kv_cache_update_impl: failed to allocate compute buffers\n"
    )
    served = (
        "llama_context: n_ctx         = 8192\n"
        "main: model loaded\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 512.00 MiB on device 0: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 536870912\n"
    )
    phases = [[f.phase for f in oomdoctor.diagnose(t.encode()).findings] for t in (creation, decoding, served)]
    assert phases == [["kv-cache-alloc"], ["inference"], ["inference"]]


def test_a_compute_buffer_at_context_creation_is_not_named_the_kv_cache() -> None:
    r = diagnose("ollama/other-005.log")
    [f] = [f for f in r.findings if f.severity == "error"]
    assert (f.phase, f.cause.id if f.cause else None) == ("kv-cache-alloc", "activation-peak")
    assert "ollama.num-batch" in _remedies(f)


# -- 3. several GPUs ----------------------------------------------------------------------------


def test_tensor_split_from_each_gpus_figures_and_savings_on_the_failing_gpu_alone() -> None:
    r = diagnose("llamacpp/synthetic-pp-retry-failed.log")
    f = r.findings[1]
    ts = next(x for x in f.remedies if x.id == "ggml.tensor-split")
    assert ts.flags == {"-ts": "71,29"}
    # CUDA1's layers (6602.25 + 2688 MiB) less 29 % of all of them (27144.25 MiB)
    assert ts.saves_bytes == 1487318549
    # -ngl: CUDA1's model buffer over the 65 layers: ⌈2563.02 / 101.57⌉ = 26 fewer
    assert _remedies(f)["ggml.n-gpu-layers"] == {"-ngl": "39"}
    # the KV figures are CUDA1's own (2688 MiB), not the 8192 MiB over both GPUs
    kv = next(x for x in f.remedies if x.id == "ggml.kv-cache-type")
    assert kv.saves_bytes == int(2688 * 2**20 * (1 - 8.5 / 16))
    # the pipelined request (9740 MiB) is more than any split frees: no -ts for it
    assert "ggml.tensor-split" not in _remedies(r.findings[0])


def test_tensor_split_without_the_figures_is_worded_without_numbers() -> None:
    log = (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB on device 1: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 10345253120\n"
        "graph_reserve: failed to allocate compute buffers\n"
    )
    [f] = oomdoctor.diagnose(log.encode()).findings
    ts = next(x for x in f.remedies if x.id == "ggml.tensor-split")
    assert (ts.flags, ts.settings, ts.confidence, ts.saves_bytes) == ({}, {}, "low", None)
    assert "CUDA1" in ts.title and "--tensor-split" in ts.title


def test_no_tensor_split_when_the_request_exceeds_all_the_layers_on_that_gpu() -> None:
    # ik_llama.cpp over 11 GPUs: a 273 GiB compute buffer against 379 MiB of KV cache on CUDA0
    [f] = diagnose("llamacpp/other-003.log").findings
    assert "ggml.tensor-split" not in _remedies(f)


def test_llama_cpp_python_takes_the_split_as_a_list() -> None:
    rem = Remedy(id="ggml.tensor-split", title="t", flags={"-ts": "71,29"}, fits=None, confidence="medium", why="w")
    out = in_product_knobs(rem, "llama-cpp-python")
    assert out is not None and (out.flags, out.settings) == ({}, {"tensor_split": "[71, 29]"})


# -- 4. ollama's estimate of the compute graph ----------------------------------------------------


def test_ollama_estimate_short_of_the_failed_buffer_sizes_num_gpu_and_gpu_overhead() -> None:
    r = diagnose("ollama/synthetic-graph-estimate.log")
    [f] = r.findings
    assert (f.severity, f.phase, f.product) == ("error", "kv-cache-alloc", "ollama")
    got = _remedies(f)
    # 1582 MiB − max(560.0, 677.5) MiB = 904.5 MiB; 3.9 GiB / 32 = 124.8 MiB a layer: 33 − 8
    assert got["ollama.num-gpu"] == {"num_gpu": "25"}
    assert got["ollama.gpu-overhead"] == {"OLLAMA_GPU_OVERHEAD": "948961280"}
    assert f.remedies[0].id == "ollama.gpu-overhead"
    assert "677.50 MiB" in f.remedies[0].why and "memory.graph" in f.remedies[0].why
    # the KV cache (memory.required.kv 256 MiB) is small against the 904.5 MiB shortfall
    assert "ollama.kv-cache-type" not in got and "ollama.num-parallel" not in got


def test_ollama_estimate_that_covered_the_buffer_gives_no_overhead() -> None:
    log = (FIXTURES / "ollama/synthetic-graph-estimate.log").read_text(encoding="utf-8")
    log = log.replace('memory.graph.partial="677.5 MiB"', 'memory.graph.partial="1.6 GiB"')
    [f] = oomdoctor.diagnose(log.encode()).findings
    assert "ollama.gpu-overhead" not in _remedies(f)


def test_flash_attention_auto_set_to_enabled_gets_no_fa_remedy() -> None:
    r = diagnose("llamacpp/synthetic-pp-retry-failed.log")
    assert r.context.extra["llama_flash_attn"] == "enabled"
    assert all("ggml.flash-attn" not in _remedies(f) for f in r.findings)


def test_llama_cpp_python_gets_the_computed_split_as_a_keyword_list() -> None:
    launch = "python -m llama_cpp.server --model m.gguf --n_gpu_layers -1 --n_ctx 32768 --n_batch 4096 --n_ubatch 4096\n"
    log = launch + (FIXTURES / "llamacpp/synthetic-pp-retry-failed.log").read_text(encoding="utf-8")
    f = oomdoctor.diagnose(log.encode()).findings[1]
    assert f.product == "llama-cpp-python"
    ts = next(x for x in f.remedies if x.id == "ggml.tensor-split")
    assert (ts.flags, ts.settings) == ({}, {"tensor_split": "[71, 29]"})
    assert [c.text for c in ts.code] == ["Llama(..., tensor_split=[71, 29])"]


def test_several_cuda_devices_listed_make_a_device_0_failure_a_split_question() -> None:
    one = (
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4096.00 MiB on device 0: cudaMalloc failed: out of memory\n"
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 4294967296\n"
        "graph_reserve: failed to allocate compute buffers\n"
    )
    two = "ggml_cuda_init: found 2 CUDA devices:\n" + one
    assert "ggml.tensor-split" not in _remedies(oomdoctor.diagnose(one.encode()).findings[0])
    assert _remedies(oomdoctor.diagnose(two.encode()).findings[0])["ggml.tensor-split"] == {}
