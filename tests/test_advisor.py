"""Unit tests of the advisor's calculators, memory model and catalogs (exact values)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oomdoctor.advisor import rank_remedies, remedies_for
from oomdoctor.advisor.catalog import find_gpu, find_model, load_config
from oomdoctor.advisor.memory_model import (
    GiB,
    capacity_from_figures,
    capacity_tokens,
    capture_sizes,
    cudagraph_size_flag,
    facts,
    fp8_kv_flag_value,
    kv_bytes_for_len,
    parse_version,
)
from oomdoctor.advisor.registry import AdviceInput, calculator, remedy_ids
from oomdoctor.report import Context, Finding, Location, Remedy


def finding(kind: str = "vllm.kv-cache.max-len-exceeds", engine: str = "vllm", phase: str = "kv-cache-alloc",
            rule: str = "test", **figures: Any) -> Finding:
    return Finding(rule=rule, kind=kind, engine=engine, severity="error", phase=phase, title="t", message="m",
                   location=Location(line=1, end_line=1), figures=figures)


def calc(rid: str, f: Finding, ctx: Context | None = None, **hints: str) -> Remedy | None:
    return calculator(rid)(AdviceInput(f, ctx or Context(), dict(hints)))


# -- memory model -----------------------------------------------------------------------------


def test_bytes_per_token_matches_research_table() -> None:
    llama = find_model("meta-llama/Llama-3.1-8B-Instruct")
    assert llama is not None
    assert llama.kv_entry_bytes(2) * llama.layers == 131072
    assert kv_bytes_for_len(llama, 131072, 2) == 16 * GiB  # the "16.00 GiB KV cache is needed" of vLLM V1
    qwen = find_model("Qwen/Qwen2.5-7B")
    assert qwen is not None and qwen.kv_entry_bytes(2) * qwen.layers == 56 * 1024
    ds = find_model("deepseek-ai/DeepSeek-R1")
    assert ds is not None and ds.is_mla
    assert ds.kv_entry_bytes(2) * ds.layers == 70272  # 61 × 576 × 2
    assert ds.kv_entry_bytes(2, tp=8) == ds.kv_entry_bytes(2)  # MLA latents are not split by TP
    l70 = find_model("meta-llama/Llama-3.3-70B-Instruct")
    assert l70 is not None
    assert l70.kv_entry_bytes(2, tp=2) * l70.layers == 160 * 1024
    assert l70.kv_heads_per_rank(16) == 1  # replicated beyond 8 KV heads


def test_sliding_window_layers_cost_only_the_window() -> None:
    gemma = find_model("google/gemma-2-9b-it")
    assert gemma is not None
    page = 16 * gemma.kv_entry_bytes(2)
    # 21 full layers × 512 pages + 21 sliding layers × (cdiv(min(4095 + 2048, 8192), 16) + 1) pages
    assert kv_bytes_for_len(gemma, 8192, 2) == 21 * 512 * page + 21 * (384 + 1) * page


def test_capacity_tokens_is_vllm_estimate() -> None:
    llama = find_model("meta-llama/Llama-3.1-8B")
    assert llama is not None
    # 10 GiB / 128 KiB per token = 81920 tokens
    assert capacity_tokens(llama, 10 * GiB, 2) == 81920
    assert capacity_tokens(llama, 10 * GiB - 1, 2) == 81920 - 16
    assert capacity_tokens(llama, 10 * GiB, 1) == 163840  # fp8 KV
    assert capacity_tokens(llama, 0, 2) == 0


def test_capacity_from_printed_figures_never_exceeds_vllm_estimate() -> None:
    # vllm-054: 71.16 GiB needed for 202752, 28.57 GiB available, vLLM estimated 81392
    cap = capacity_from_figures(76407468196, 30676803912, 202752)
    assert cap <= 81392
    assert cap >= 81392 * 0.999
    assert cap % 16 == 0
    # rule example: 4.26 GiB needed for 100000, 4.25 GiB available, vLLM estimated 99744
    assert capacity_from_figures(4574140170, 4563402752, 100000) <= 99744


def test_version_rules() -> None:
    assert parse_version("0.11.1") == (0, 11, 1)
    assert parse_version("v0.9.2rc1") == (0, 9, 2)
    assert cudagraph_size_flag((0, 11, 1)) == "--max-cudagraph-capture-size"
    assert cudagraph_size_flag((0, 10, 0)) == "--cuda-graph-sizes"
    assert cudagraph_size_flag((0, 8, 5)) is None
    assert fp8_kv_flag_value((0, 3, 3)) == "fp8_e5m2"
    assert fp8_kv_flag_value((0, 2, 7)) is None
    assert fp8_kv_flag_value((0, 8, 1)) is None
    assert len(capture_sizes(512)) == 51  # "PIECEWISE=51 (largest=512)"


def test_catalog_lookups() -> None:
    assert find_model("/models/Qwen2.5-7B-Instruct/") is find_model("Qwen/Qwen2.5-7B-Instruct")
    a10g = find_gpu("NVIDIA A10G")
    assert a10g is not None and a10g.cc == 86 and not a10g.fp8_tensor_cores
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.fp8_tensor_cores
    t4 = find_gpu("Tesla T4")
    # no log in the corpus names a T4 next to its capacity: the nominal 16 GiB, labelled as such
    assert t4 is not None and not t4.reported and t4.memory_bytes == 16 * GiB


def test_config_json_geometry(tmp_path: Any) -> None:
    cfg = {"_name_or_path": "my/llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
           "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
           "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    geo = load_config(p)
    assert (geo.layers, geo.kv_heads, geo.head_dim) == (32, 8, 128)
    assert geo.kv_entry_bytes(2) * geo.layers == 131072
    assert geo.params is not None and abs(geo.params - 8.03) < 0.01  # Llama-3.1-8B has 8.03B
    gemma3 = {"text_config": {"num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
                              "head_dim": 128, "hidden_size": 5376, "sliding_window": 1024,
                              "sliding_window_pattern": 6}, "torch_dtype": "bfloat16"}
    p.write_text(json.dumps(gemma3))
    g3 = load_config(p)
    assert (g3.layers, g3.sliding_window_layers, g3.sliding_window) == (62, 52, 1024)


def test_facts_sources() -> None:
    f = facts(finding(total_bytes=24 * GiB), Context(engine="vllm", model="Qwen/Qwen2.5-7B", weights_bytes=5 * GiB),
              {"gpu": "A10G"})
    assert f.total is not None and f.total.source == "message"
    assert f.weights is not None and f.weights.source == "context"
    assert f.utilization is not None and (f.utilization.value, f.utilization.source) == (0.9, "default")
    assert f.geometry is not None and f.geometry.source == "catalog"
    f2 = facts(finding(), Context(engine="vllm", engine_version="0.20.1"), {"gpu": "A10G"})
    assert f2.total is not None and f2.total.source.startswith("catalog")
    assert f2.utilization is not None and f2.utilization.value == 0.92


# -- calculators ------------------------------------------------------------------------------


def test_max_model_len_v0_and_v1() -> None:
    r = calc("vllm.max-model-len", finding(max_seq_len=8192, kv_cache_tokens=4512))
    assert r is not None and r.flags == {"--max-model-len": "4512"} and r.fits is True
    r = calc("vllm.max-model-len", finding(max_seq_len=202752, kv_cache_needed_bytes=76407468196,
                                           kv_cache_available_bytes=30676803912, estimated_max_model_len=81392))
    assert r is not None and r.flags == {"--max-model-len": "81392"}
    assert r.sources["capacity"] == "message"
    # block size from the context
    r = calc("vllm.max-model-len", finding(max_seq_len=8192, kv_cache_tokens=4520), Context(block_size=32))
    assert r is not None and r.flags == {"--max-model-len": "4512"}


def test_max_model_len_not_for_other_engines_or_no_gain() -> None:
    assert calc("vllm.max-model-len", finding(engine="pytorch", max_seq_len=8192, kv_cache_tokens=4512)) is None
    assert calc("vllm.max-model-len", finding(max_seq_len=4096, kv_cache_tokens=8192)) is None


def test_raise_utilization_for_kv_bounded_by_free() -> None:
    f = finding(max_seq_len=32768, kv_cache_needed_bytes=4 * GiB, kv_cache_available_bytes=3 * GiB)
    ctx = Context(engine="vllm", gpu_total_bytes=24 * GiB, gpu_memory_utilization=0.85)
    r = calc("vllm.gpu-memory-utilization.raise-for-kv", f, ctx)
    # 0.85 + 1 GiB / 24 GiB = 0.8917 → 0.90
    assert r is not None and r.flags == {"--gpu-memory-utilization": "0.90"} and r.fits is True
    assert r.sources["total"] == "context"
    # weights exceed the budget: no flag, ranked last with the reason
    ctx2 = Context(engine="vllm", gpu_total_bytes=24 * GiB, gpu_memory_utilization=0.9, weights_bytes=30 * GiB)
    f2 = finding(max_seq_len=32768, kv_cache_needed_bytes=4 * GiB, kv_cache_available_bytes=1 * GiB)
    r2 = calc("vllm.gpu-memory-utilization.raise-for-kv", f2, ctx2)
    assert r2 is not None and r2.fits is False and r2.flags == {} and "weights alone" in r2.why


def test_fp8_kv_cache_gated_by_gpu_and_version() -> None:
    f = finding(max_seq_len=8192, kv_cache_tokens=4512)
    r = calc("vllm.kv-cache-dtype-fp8", f, Context(engine="vllm"), gpu="T4")
    assert r is not None and r.fits is False and r.flags == {} and "T4" in r.why
    r = calc("vllm.kv-cache-dtype-fp8", f, Context(engine="vllm", engine_version="0.3.3"))
    assert r is not None and r.flags == {"--kv-cache-dtype": "fp8_e5m2"}
    assert calc("vllm.kv-cache-dtype-fp8", f, Context(engine="vllm", kv_cache_dtype="fp8")) is None
    # fp8 alone not enough: combined with the longest max-model-len the fp8 cache holds
    r = calc("vllm.kv-cache-dtype-fp8", finding(max_seq_len=131072, kv_cache_tokens=40000))
    assert r is not None and r.flags == {"--kv-cache-dtype": "fp8", "--max-model-len": "80000"} and r.fits is True


def test_fit_free_utilization() -> None:
    f = finding(kind="vllm.startup.free-memory-below-target", phase="startup-check", free_bytes=24438363914,
                total_bytes=25769803776, gpu_memory_utilization=0.97, desired_bytes=24996709663)
    r = calc("vllm.gpu-memory-utilization.fit-free", f)
    assert r is not None and r.flags == {"--gpu-memory-utilization": "0.93"}
    assert float(r.flags["--gpu-memory-utilization"]) <= 24438363914 / 25769803776


def test_enforce_eager_and_capture_size() -> None:
    f = finding(kind="torch.cuda-oom", phase="cudagraph-capture", requested_bytes=256 * 2**20)
    ctx = Context(engine="vllm", engine_version="0.11.2", cudagraph_bytes=1 * GiB)
    r = calc("vllm.enforce-eager", f, ctx)
    assert r is not None and r.flags == {"--enforce-eager": ""} and r.fits is True and r.saves_bytes == GiB
    r = calc("vllm.cudagraph-capture-size", f, ctx)
    # 51 sizes up to 512 → 35 up to 256: saves 16/51 of 1 GiB
    assert r is not None and r.flags == {"--max-cudagraph-capture-size": "256"}
    assert r.saves_bytes == int(GiB * 16 / 51) and r.fits is True
    assert calc("vllm.cudagraph-capture-size", f, Context(engine="vllm")) is None  # version unknown
    assert calc("vllm.enforce-eager", finding(kind="torch.cuda-oom", engine="pytorch", phase="training")) is None
    assert calc("vllm.enforce-eager", f, Context(engine="vllm", enforce_eager=True)) is None


def test_tensor_parallel_needs_gpus_and_divides_heads() -> None:
    f = finding(kind="vllm.kv-cache.no-blocks")
    ctx = Context(engine="vllm", model="Qwen/Qwen2.5-7B-Instruct", gpu_total_bytes=24 * GiB,
                  gpu_memory_utilization=0.9, weights_bytes=int(14.2 * GiB), kv_cache_bytes=-GiB, max_model_len=32768)
    assert calc("vllm.tensor-parallel-size", f, ctx) is None  # one GPU, no hint
    r = calc("vllm.tensor-parallel-size", f, ctx, gpus="4")
    assert r is not None and r.flags == {"--tensor-parallel-size": "2"} and r.fits is True
    assert r.sources["gpus"] == "hint"
    # 28 heads: 8 does not divide them
    r = calc("vllm.tensor-parallel-size", f, ctx.model_copy(update={"tensor_parallel_size": 4}), gpus="8")
    assert r is None


def test_cpu_offload_and_quantization() -> None:
    f = finding(kind="torch.cuda-oom", phase="weights-load", requested_bytes=int(1.5 * GiB), free_bytes=GiB // 2)
    ctx = Context(engine="vllm", weights_bytes=10 * GiB)
    r = calc("vllm.cpu-offload-gb", f, ctx)
    assert r is not None and r.flags == {"--cpu-offload-gb": "1"}  # 1.5 GiB − 0.5 GiB free = 1 GiB
    # a weights-load failure of an unknown version: online fp8 would create the 16-bit weights first
    assert calc("vllm.quantization", f, ctx, gpu="L4") is None
    kv = finding(kind="torch.cuda-oom", phase="kv-cache-alloc", requested_bytes=int(1.5 * GiB), free_bytes=GiB // 2)
    r = calc("vllm.quantization", kv, ctx, gpu="T4")
    assert r is not None and r.fits is False and r.flags == {}
    r = calc("vllm.quantization", kv, ctx, gpu="L4")
    assert r is not None and r.flags == {"--quantization": "fp8"} and r.saves_bytes == 5 * GiB and r.fits is True
    r = calc("vllm.quantization-4bit", f, Context(engine="vllm", model="meta-llama/Llama-3.1-8B"))
    assert r is not None and r.saves_bytes == int(8.03e9 * 2) - int(8.03e9 * 0.53)
    assert r.sources["parameters"] == "catalog"


def test_swap_space_only_where_the_flag_exists() -> None:
    f = finding(kind="host.oom-killed", phase="unknown")
    r = calc("vllm.swap-space", f, Context(engine="vllm", engine_version="0.8.5", launch_args={"swap_space": "16"}),
             gpus="4")
    assert r is not None and r.flags == {"--swap-space": "1"} and r.saves_bytes == 60 * GiB
    assert calc("vllm.swap-space", f, Context(engine="vllm", engine_version="0.18.0")) is None
    # an unknown version is the current release, whose parser (0.34.0) has no --swap-space
    assert calc("vllm.swap-space", f, Context(engine="vllm", launch_args={"swap_space": "16"}), gpus="4") is None


def test_expandable_segments_reports_fragmentation() -> None:
    f = finding(kind="torch.cuda-oom", engine="pytorch", phase="training", requested_bytes=GiB,
                reserved_unallocated_bytes=2 * GiB)
    r = calc("torch.expandable-segments", f, Context())
    assert r is not None and r.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert r.fits is True and "2.00 GiB" in r.why


def test_max_num_seqs_from_vocab() -> None:
    f = finding(kind="torch.cuda-oom", phase="warmup", num_dummy_requests=256, requested_bytes=100 * 2**20)
    r = calc("vllm.max-num-seqs", f, Context(engine="vllm"))
    assert r is not None and r.flags == {"--max-num-seqs": "128"}


def test_all_ids_registered() -> None:
    ids = set(remedy_ids())
    for rid in ("vllm.max-model-len", "vllm.kv-cache-dtype-fp8", "vllm.gpu-memory-utilization.raise-for-kv",
                "vllm.gpu-memory-utilization.fit-free", "vllm.gpu-memory-utilization.lower", "vllm.enforce-eager",
                "vllm.max-num-seqs", "vllm.max-num-batched-tokens", "vllm.tensor-parallel-size",
                "vllm.cpu-offload-gb", "vllm.quantization", "vllm.swap-space", "torch.expandable-segments",
                "gpu.free-other-processes", "torch.reduce-batch", "vllm.cudagraph-capture-size",
                "vllm.pipeline-parallel-size", "vllm.quantization-4bit"):
        assert rid in ids


# -- ranking ----------------------------------------------------------------------------------


def test_ranking_fits_then_confidence_then_cost() -> None:
    f = finding(max_seq_len=8192, kv_cache_tokens=4512)
    rems = rank_remedies(["vllm.kv-cache-dtype-fp8", "vllm.max-model-len"], AdviceInput(f, Context(engine="vllm")))
    assert [r.id for r in rems] == ["vllm.max-model-len", "vllm.kv-cache-dtype-fp8"]
    assert [r.rank for r in rems] == [1, 2]


def test_unhelpful_advice_ranks_last() -> None:
    f = finding(max_seq_len=8192, kv_cache_tokens=4512)
    rems = rank_remedies(["vllm.kv-cache-dtype-fp8", "vllm.max-model-len"],
                         AdviceInput(f, Context(engine="vllm"), {"gpu": "V100"}))
    assert rems[-1].id == "vllm.kv-cache-dtype-fp8" and rems[-1].fits is False


def test_combination_when_nothing_fits_alone() -> None:
    # 3 GiB missing; expandable segments frees 1 GiB of fragmentation, eager frees 2.5 GiB of graphs
    f = finding(kind="torch.cuda-oom", phase="warmup", requested_bytes=3 * GiB, free_bytes=0,
                reserved_unallocated_bytes=1 * GiB)
    ctx = Context(engine="vllm", cudagraph_bytes=int(2.5 * GiB))
    rems = rank_remedies(["torch.expandable-segments", "vllm.enforce-eager"], AdviceInput(f, ctx))
    top = rems[0]
    assert top.id == "combined:torch.expandable-segments+vllm.enforce-eager"
    assert top.fits is True and top.flags == {"--enforce-eager": ""}
    assert top.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert top.saves_bytes == int(3.5 * GiB)


def test_no_remedy_repeats_a_flag_in_use() -> None:
    f = finding(max_seq_len=8192, kv_cache_tokens=4512)
    ctx = Context(engine="vllm", launch_args={"kv_cache_dtype": "fp8"}, kv_cache_dtype="fp8")
    rems = rank_remedies(["vllm.max-model-len", "vllm.kv-cache-dtype-fp8"], AdviceInput(f, ctx))
    assert [r.id for r in rems] == ["vllm.max-model-len"]


@pytest.mark.parametrize("engine", ["pytorch", "sglang", "tgi"])
def test_vllm_calculators_silent_for_other_engines(engine: str) -> None:
    f = finding(kind="torch.cuda-oom", engine=engine, phase="training", requested_bytes=GiB, free_bytes=0,
                num_dummy_requests=256, total_bytes=24 * GiB, gpu_memory_utilization=0.9)
    ctx = Context(engine=engine, max_num_batched_tokens=8192, weights_bytes=GiB, max_num_seqs=256)
    for rid in remedy_ids():
        if rid.startswith("vllm."):
            assert calc(rid, f, ctx, gpus="4") is None, rid


def test_remedies_for_unknown_rule_is_an_ask() -> None:
    # remedies follow the cause, so a known kind gets its cause's remedies whatever the rule; a rule and
    # kind oomdoctor does not know, with no figures, get no knob: the facts that would size one are asked for
    rems = remedies_for(finding(rule="no.such.rule", kind="no.such.kind", engine="other", phase="unknown"), Context())
    assert [r.id for r in rems] == ["ask.launch-facts"] and rems[0].run[0].command == "nvidia-smi"
    assert rems[0].flags == rems[0].env == rems[0].settings == {}
    # a warning is not an error: nothing to ask
    warn = finding(rule="no.such.rule", kind="no.such.kind", engine="other", phase="unknown")
    warn.severity = "warning"
    assert remedies_for(warn, Context()) == []
    # vLLM's KV message without figures still gets vLLM's own advice, a step above the default utilization
    assert [r.id for r in remedies_for(finding(rule="no.such.rule"), Context())] == ["vllm.gpu-memory-utilization.raise"]


def test_free_other_processes_skips_the_failing_process() -> None:
    f = finding(kind="torch.cuda-oom", engine="pytorch", phase="inference", requested_bytes=96 * 2**20,
                free_bytes=63900221, allocated_bytes=13797582438,
                other_processes=[{"pid": 868956, "in_use_bytes": 15537044193}])
    assert calc("gpu.free-other-processes", f, Context()) is None
    f2 = finding(kind="torch.cuda-oom", engine="pytorch", phase="inference", requested_bytes=GiB, free_bytes=0,
                 in_use_bytes=10 * GiB, other_processes=[{"pid": 1, "in_use_bytes": 10 * GiB},
                                                         {"pid": 2, "in_use_bytes": 3 * GiB}])
    r = calc("gpu.free-other-processes", f2, Context())
    assert r is not None and r.saves_bytes == 3 * GiB and "pid 2" in r.why and r.fits is True


def test_lower_utilization_only_after_the_kv_cache_exists() -> None:
    f = finding(kind="torch.cuda-oom", engine="pytorch", phase="profiling", requested_bytes=800 * 2**20,
                total_bytes=16 * GiB, free_bytes=GiB // 2)
    assert calc("vllm.gpu-memory-utilization.lower", f, Context(engine="vllm")) is None
    f2 = f.model_copy(update={"phase": "cudagraph-capture"})
    r = calc("vllm.gpu-memory-utilization.lower", f2, Context(engine="vllm", gpu_memory_utilization=0.95))
    # 0.95 − 800 MiB / 16 GiB = 0.9012 → 0.90 (free/total at failure time is no bound here)
    assert r is not None and r.flags == {"--gpu-memory-utilization": "0.90"}
    assert calc("torch.reduce-batch", f2, Context(engine="vllm")) is None


def test_max_num_seqs_from_the_logits_rows() -> None:
    # Qwen2.5-7B: 152064 × 4 B = 594 KiB per dummy request; 300 MiB → 518 rows; 1024 − 518 = 506 → 256
    f = finding(kind="torch.cuda-oom", phase="warmup", num_dummy_requests=1024, requested_bytes=300 * 2**20)
    r = calc("vllm.max-num-seqs", f, Context(engine="vllm", model="Qwen/Qwen2.5-7B-Instruct"))
    assert r is not None and r.flags == {"--max-num-seqs": "256"}
    assert r.saves_bytes == (1024 - 256) * 152064 * 4
    assert r.sources == {"dummy requests": "message", "geometry": "catalog: config.json of Qwen/Qwen2.5-7B-Instruct"}


def test_sliding_window_capacity_is_not_linear() -> None:
    # Gemma 3 27B: 52 of 62 layers keep a 1024-token window. Linear extrapolation from the message
    # (needed ∝ length) would overshoot; with the geometry the answer is vLLM's own search.
    gemma = find_model("google/gemma-3-27b-it")
    assert gemma is not None
    need = kv_bytes_for_len(gemma, 131072, 2)
    avail = 10 * GiB
    assert capacity_from_figures(need, avail, 131072) > capacity_tokens(gemma, avail, 2, limit=131072)
    f = finding(max_seq_len=131072, kv_cache_needed_bytes=need, kv_cache_available_bytes=avail)
    r = calc("vllm.max-model-len", f, Context(engine="vllm", model="google/gemma-3-27b-it"))
    assert r is not None
    value = int(r.flags["--max-model-len"])
    assert value == capacity_tokens(gemma, avail - int(0.005 * GiB), 2, limit=131072)
    assert kv_bytes_for_len(gemma, value, 2) <= avail


def test_mla_rounds_to_the_mla_block_size() -> None:
    f = finding(max_seq_len=163840, kv_cache_needed_bytes=10 * GiB, kv_cache_available_bytes=3 * GiB)
    r = calc("vllm.max-model-len", f, Context(engine="vllm", model="deepseek-ai/DeepSeek-V3"))
    assert r is not None and int(r.flags["--max-model-len"]) % 128 == 0
    assert r.sources["block_size"] == "default for MLA backends"


def test_nominal_gpu_size_lowers_confidence() -> None:
    f = finding(max_seq_len=32768, kv_cache_needed_bytes=4 * GiB, kv_cache_available_bytes=3 * GiB)
    r = calc("vllm.gpu-memory-utilization.raise-for-kv", f, Context(engine="vllm"), gpu="A10G")
    # 0.90 (default) + 1 GiB / 24 GiB (nominal) = 0.9417 → 0.95; the real A10G is smaller, so not "fits"
    assert r is not None and r.flags == {"--gpu-memory-utilization": "0.95"}
    assert r.fits is None and r.confidence == "low" and r.sources["total"] == "catalog (nominal size)"


def test_mps_ratio_steps_and_bound() -> None:
    from oomdoctor.advisor.remedies_generic import mps_ratio_for

    gib = 2**30
    # the ratio lets 5 % more than what failed through (MPS_HEADROOM): 1.7 x needed x 1.05 / limit
    assert mps_ratio_for(27 * gib, 27 * gib) == 1.8  # at the limit (rounded figures): 1.785
    assert mps_ratio_for(28 * gib, 27 * gib) == 1.9  # 1.763 alone, 1.851 with the headroom
    assert mps_ratio_for(29 * gib, 27 * gib) == 2.0  # 1.917 with the headroom: the bound itself is allowed
    assert mps_ratio_for(31 * gib, 27 * gib) == 2.0  # 1.952 fits under the bound, 2.049 with the headroom does not
    assert mps_ratio_for(32 * gib, 27 * gib) is None  # 2.015: above PyTorch's bound
    # fresh-020: 6.04 GB + 1.04 GB + 459.07 MB against 6.77 GB: 1.890 needs 1.9, which would leave
    # about 39 MiB; with the headroom 1.985, so 2.0
    assert mps_ratio_for(6485400617 + 1116691497 + 481369784, 7269232148) == 2.0


def test_mps_over_the_limit_by_exactly_what_the_message_says() -> None:
    import oomdoctor

    report = oomdoctor.diagnose(
        "RuntimeError: MPS backend out of memory (MPS allocated: 15.05 GB, other allocations: 11.91 GB, "
        "max allowed: 27.20 GB). Tried to allocate 1.16 GB on private pool. Use "
        "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may cause system failure).\n"
    )
    # the message's own advice is among the remedies, but not first: MPS's "max allowed" is the
    # machine's limit (a multiple of its working set), and lifting it risks the whole system
    f = report.findings[0]
    assert f.cause is not None and f.cause.id == "activation-peak"  # 15.05 of 27.20 GB before the step
    (watermark,) = [r for r in f.remedies if r.id == "torch.mps-high-watermark"]
    assert f.remedies[0].id != "torch.mps-high-watermark"
    # 1.7 x (15.05 + 11.91 + 1.16) / 27.20 = 1.7575, x 1.05 headroom = 1.845: up to the next 0.1, 1.9
    # (PyTorch's bound is 2.0)
    assert watermark.env == {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "1.9"}
    # 15.05 + 11.91 + 1.16 - 27.20 GB (binary) = 0.92 GiB = 942.08 MiB; 27.20 / 1.7 = 16.00 GiB recommended
    assert "942.08 MiB over the 27.20 GiB limit" in watermark.why
    assert "about 16.00 GiB" in watermark.why and "1.9 × it is about 30.40 GiB" in watermark.why
    no_limit = oomdoctor.diagnose(
        "RuntimeError: MPS backend out of memory (MPS allocated: 30.15 GiB, other allocations: 464.00 KiB). "
        "Tried to allocate 72.00 MiB on shared pool.\n"
    )
    assert "torch.mps-high-watermark" not in [r.id for r in no_limit.findings[0].remedies]


def test_utilization_ceiling_counts_what_vllm_already_holds() -> None:
    """Free memory stated by a PyTorch OOM inside vLLM excludes vLLM's own memory: the ceiling is
    (in use + free) / total; free memory stated alone (the start-up check) caps at free / total."""
    from oomdoctor.advisor.registry import AdviceInput
    from oomdoctor.advisor.remedies_vllm import _util_cap, get_facts

    gib = 1 << 30
    ctx = Context(engine="vllm", engine_version="0.11.0", gpu_memory_utilization=0.8)
    mid_run = Finding(rule="torch.cuda-oom", kind="torch.cuda-oom", engine="vllm", severity="error", phase="inference",
                      title="t", message="m", location=Location(line=1, end_line=1),
                      figures={"total_bytes": 80 * gib, "free_bytes": 2 * gib, "in_use_bytes": 69 * gib,
                               "requested_bytes": 4 * gib})
    inp = AdviceInput(mid_run, ctx)
    # (69 + 2) / 80 = 0.8875 -> 0.88 (rounded down), not 2 / 80
    assert _util_cap(get_facts(inp), inp)[0] == 0.88
    start_up = mid_run.model_copy(update={"figures": {"total_bytes": 80 * gib, "free_bytes": 2 * gib,
                                                      "desired_bytes": 72 * gib}})
    inp = AdviceInput(start_up, ctx)
    assert _util_cap(get_facts(inp), inp)[0] == 0.02  # 2 / 80 = 0.025 -> 0.02


def test_mps_over_what_any_ratio_allows_keeps_the_messages_zero() -> None:
    """new-014: 15.72 GiB + 2.41 MiB + 5.81 GiB against 18.13 GiB at 1.7: 2.02 x the working set, past
    PyTorch's 2.0, so only the message's 0.0 (no limit) is left, at low confidence."""
    from tests.engines_util import diagnose, remedy

    f = diagnose("other/new-014.log").findings[0]
    r = remedy(f, "torch.mps-high-watermark")
    assert r.env == {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": "0.0"} and r.confidence == "low"
    assert "PyTorch's highest ratio" in r.why
