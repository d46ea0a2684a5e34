"""``oomdoctor fit``: verdict, budget table, flags, CLI; and agreement with the post-mortem advice."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.advisor.catalog import find_gpu, find_model
from oomdoctor.advisor.fit import fit, v1_message
from oomdoctor.advisor.memory_model import GiB, kv_bytes_for_len
from oomdoctor.api import diagnose
from oomdoctor.cli import main
from oomdoctor.cli.fit_cmd import parse_memory


def test_fits_with_a_budget_table() -> None:
    geo, gpu = find_model("meta-llama/Llama-3.1-8B"), find_gpu("A100-80GB")
    assert geo is not None and gpu is not None
    res = fit(geo, gpu)
    assert res.fits is True and res.remedies == [] and res.finding is None
    terms = [t for t, _, _ in res.rows]
    assert terms[:3] == ["GPU memory", "vLLM budget (× 0.90)", "weights"]
    assert res.kv_needed == 16 * GiB  # 131072 tokens × 128 KiB
    assert res.capacity_tokens == 131072


def test_does_not_fit_and_says_what_does() -> None:
    geo, gpu = find_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("A10G")
    assert geo is not None and gpu is not None
    res = fit(geo, gpu, max_model_len=131072)
    assert res.fits is False
    assert res.kv_needed == kv_bytes_for_len(geo, 131072, 2)
    top = res.remedies[0]
    assert top.flags == {"--max-model-len": str(res.capacity_tokens)}
    assert res.capacity_tokens < 131072 and res.capacity_tokens % 16 == 0
    assert top.command == f"vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len {res.capacity_tokens}"
    # the recommended length really fits the KV budget
    assert kv_bytes_for_len(geo, res.capacity_tokens, 2) <= res.kv_budget


def test_weights_exceed_the_card() -> None:
    geo, gpu = find_model("meta-llama/Llama-3.1-70B"), find_gpu("L4")
    assert geo is not None and gpu is not None
    res = fit(geo, gpu)
    assert res.fits is False and res.kv_budget < 0
    assert res.finding is not None and res.finding.kind == "vllm.kv-cache.no-blocks"
    util = [r for r in res.remedies if r.id == "vllm.gpu-memory-utilization.raise-for-kv"]
    assert util and util[0].fits is False and util[0].flags == {} and res.remedies[-1].fits is False
    assert all(r.id != "vllm.tensor-parallel-size" for r in res.remedies)  # one GPU, no hint


def test_more_gpus_enable_tensor_parallel() -> None:
    geo, gpu = find_model("Qwen/Qwen2.5-32B-Instruct"), find_gpu("L40S")
    assert geo is not None and gpu is not None
    res = fit(geo, gpu, gpus=4, max_model_len=32768)
    tp = [r for r in res.remedies if r.id == "vllm.tensor-parallel-size"]
    assert tp and tp[0].flags == {"--tensor-parallel-size": "2"} and tp[0].fits is True  # 40 heads: 2 divides


def test_fp8_kv_halves_the_need() -> None:
    geo, gpu = find_model("meta-llama/Llama-3.1-8B"), find_gpu("L4")
    assert geo is not None and gpu is not None
    auto = fit(geo, gpu, max_model_len=65536)
    fp8 = fit(geo, gpu, max_model_len=65536, kv_cache_dtype="fp8")
    assert fp8.kv_needed * 2 == auto.kv_needed
    assert fp8.capacity_tokens >= auto.capacity_tokens


@pytest.mark.parametrize(
    ("model", "gpu", "length"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", "A10G", 131072),
        ("meta-llama/Llama-3.1-8B", "L4", 131072),
        ("mistralai/Mistral-7B-Instruct-v0.3", "RTX 4060", 32768),
        ("google/gemma-2-9b-it", "A10G", 8192),
        ("meta-llama/Llama-3.1-8B", "A100-80GB", 131072),
    ],
)
def test_fit_and_post_mortem_agree(model: str, gpu: str, length: int) -> None:
    """The failure vLLM would print for this configuration gets the same top remedy post-mortem."""
    geo, spec = find_model(model), find_gpu(gpu)
    assert geo is not None and spec is not None
    res = fit(geo, spec, max_model_len=length)
    args = f"{{'model_tag': '{model}', 'max_model_len': {length}, 'model': '{model}'}}"
    log = f"INFO 01-01 00:00:00 [api_server.py:1] non-default args: {args}\n"
    if res.kv_budget > 0 and not res.fits:
        log += v1_message(length, res.kv_needed, res.kv_budget, res.capacity_tokens) + "\n"
    report = diagnose(log, {"gpu": gpu})
    errors = [f for f in report.findings if f.severity == "error"]
    if res.kv_budget <= 0:  # vLLM fails earlier ("No available memory for the cache blocks")
        assert res.finding is not None and res.finding.kind == "vllm.kv-cache.no-blocks"
        return
    assert (not errors) == res.fits
    if errors:
        post = errors[0].remedies[0]
        assert post.flags == res.remedies[0].flags
        assert post.command == res.remedies[0].command


def test_cli_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = {"_name_or_path": "my/llama", "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
           "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    assert main(["fit", "--model-config", str(p), "--gpu", "A10G"]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "--max-model-len" in out and "KV cache" in out
    assert main(["fit", "--model-config", str(p), "--gpu", "A10G", "--max-model-len", "8192", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True and data["kv_needed_bytes"] == 8192 * 131072
    assert data["budget"][0]["term"] == "GPU memory"


def test_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--model", "no/such-model", "--gpu", "A10G"]) == 2
    assert main(["fit", "--model", "Qwen/Qwen3-8B", "--gpu", "Voodoo5"]) == 2
    assert "unknown GPU" in capsys.readouterr().err


def test_smallest_combination_when_nothing_fits_alone() -> None:
    geo, gpu = find_model("meta-llama/Llama-3.1-70B"), find_gpu("A10G")
    assert geo is not None and gpu is not None
    res = fit(geo, gpu, gpus=4)
    top = res.remedies[0]
    # 4 × A10G: TP 4 alone leaves 32.9 GiB of bf16 weights per GPU; with a 4-bit checkpoint 8.7 GiB
    assert top.id == "combined:vllm.tensor-parallel-size+vllm.quantization-4bit"
    assert top.flags == {"--tensor-parallel-size": "4"} and "4-bit" in top.settings["model"]
    assert top.fits is True
    geo2, gpu2 = find_model("Qwen/Qwen2.5-32B-Instruct"), find_gpu("RTX 4090")
    assert geo2 is not None and gpu2 is not None
    # the nominal 24 GiB (the catalog's 4090 is PyTorch's 23.64 GiB, where the plan differs)
    top2 = fit(geo2, None, total_bytes=24 * GiB).remedies[0]
    assert top2.id == "combined:vllm.quantization-4bit+vllm.kv-cache-dtype-fp8"
    assert top2.flags == {"--kv-cache-dtype": "fp8"}


def test_the_command_keeps_the_model_name_the_user_gave(capsys: pytest.CaptureFixture[str]) -> None:
    """An -Instruct variant shares its base model's geometry but must be served under its own name."""
    code = main(["fit", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "A10G",
                 "--max-model-len", "131072", "--format", "json"])
    assert code == 1
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert out["remedies"][0]["command"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct ")


def test_fit_gpus_2_and_hint_gpus_2_give_the_same_tensor_parallel_advice() -> None:
    """The same shortfall: fit --gpus 2 and a post-mortem with --hint gpus=2 advise the same TP."""
    model, gpu, length = "meta-llama/Llama-3.1-70B", "A100-80GB", 8192
    geo, spec = find_model(model), find_gpu(gpu)
    assert geo is not None and spec is not None
    res = fit(geo, spec, gpus=2, max_model_len=length)
    fit_tp = [r.flags for r in res.remedies if "--tensor-parallel-size" in r.flags]
    assert fit_tp and fit_tp[0]["--tensor-parallel-size"] == "2"
    args = f"{{'model_tag': '{model}', 'max_model_len': {length}, 'model': '{model}'}}"
    log = f"INFO 01-01 00:00:00 [api_server.py:1] non-default args: {args}\n"
    log += (res.finding.message if res.finding else "") + "\n"
    report = diagnose(log, {"gpu": gpu, "gpus": "2"})
    post_tp = [r.flags for f in report.findings for r in f.remedies if "--tensor-parallel-size" in r.flags]
    assert post_tp[:1] == fit_tp[:1]


def test_fit_names_only_real_repositories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--model", "Llama-3.1-8B", "--gpu", "A10G", "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "meta-llama/Llama-3.1-8B"
    assert out["remedies"][0]["command"].startswith("vllm serve meta-llama/Llama-3.1-8B ")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                               "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
                               "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}))
    assert main(["fit", "--model-config", str(cfg), "--gpu", "A10G", "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "<model>"


def test_fit_reports_concurrency_and_labels_nominal_memory(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    geo, spec = find_model("meta-llama/Llama-3.1-8B"), find_gpu("H100")
    assert geo is not None and spec is not None
    res = fit(geo, spec)
    # vLLM's "Maximum concurrency": KV tokens / max model len, with decimals
    assert res.concurrency == res.kv_tokens / 131072 and res.kv_tokens % 16 == 0
    assert res.kv_tokens == res.kv_budget // (16 * 131072) * 16  # 128 KiB per token, 16-token blocks
    assert f"FITS: {res.concurrency:.2f} full-length requests at once" in out
    assert "catalog: H100, usable, as vLLM reports it" in out
    assert "in one request" not in out and "in this log" not in out.split("What makes")[0]


def test_gpu_memory_units_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_memory("24GB") == 24 * 10**9
    assert parse_memory("24GiB") == 24 * 2**30
    assert parse_memory("24") == 24 * 2**30
    main(["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu-memory", "24GB", "--format", "json"])
    assert json.loads(capsys.readouterr().out)["total_bytes"] == 24 * 10**9
    assert main(["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu-memory", "24 parsecs"]) == 2


def test_catalog_lists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "--list-gpus"]) == 0
    out = capsys.readouterr().out
    for card in ("B200", "GB200", "H20", "L40S", "RTX 5090", "MI300X", "MI325X", "A10G", "H100"):
        assert any(line.split("  ")[0].strip() == card for line in out.splitlines()), card
    assert main(["fit", "--list-models"]) == 0
    assert "meta-llama/Llama-3.1-8B" in capsys.readouterr().out


def test_reported_memory_is_sourced(capsys: pytest.CaptureFixture[str]) -> None:
    spec = find_gpu("NVIDIA A10")
    assert spec is not None and spec.reported and spec.memory_bytes == int(22.09 * 2**30)
    main(["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A10", "--max-model-len", "8192", "--format", "json"])
    budget = json.loads(capsys.readouterr().out)["budget"]
    assert budget[0] == {"term": "GPU memory", "bytes": int(22.09 * 2**30),
                         "source": "catalog: A10, usable, as PyTorch reports it (vllm-025: vLLM issue 10034)"}


@pytest.mark.parametrize("width", [80, 120])
def test_fit_text_fits_the_width_and_keeps_commands_whole(width: int) -> None:
    from oomdoctor.cli.fit_cmd import render_fit_text

    geo, spec = find_model("meta-llama/Llama-3.1-8B"), find_gpu("A10G")
    assert geo is not None and spec is not None
    res = fit(geo, spec)
    lines = render_fit_text(res, width=width).splitlines()
    assert all(len(line) <= width for line in lines if not line.lstrip().startswith("$ "))
    assert f"$ {res.remedies[0].command}" in [line.strip() for line in lines]


#: post-mortem wording: a pre-flight plan has no log and no vLLM estimate (issue 15 §4)
_POST_MORTEM = ("this log", "the log", "log's", "own estimate", "このログ", "ログの", "vLLM自身")


def _plan_texts(lang: str) -> list[str]:
    from oomdoctor.i18n import use_lang

    with use_lang(lang):
        res = fit(find_model("meta-llama/Llama-3.1-8B-Instruct"), find_gpu("L4"), max_model_len=131072)
    assert res.remedies
    return [t for r in res.remedies for t in (r.title, r.why, r.tradeoff or "")]


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_fit_words_its_remedies_as_a_plan_not_a_post_mortem(lang: str) -> None:
    texts = _plan_texts(lang)
    assert [t for t in texts if any(w in t for w in _POST_MORTEM)] == []
    joined = "\n".join(texts)
    if lang == "en":
        assert "From the maximum model length this plan leaves room for (" in joined
        assert "(an estimated 512.00 MiB for this plan)" in joined
    else:
        assert "この構成で収まる最大モデル長の推定値（" in joined
        assert "（この構成での推定値は512.00 MiB）" in joined


def test_the_same_remedies_keep_their_post_mortem_wording_for_a_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the plan flag changes the wording: fit's own input, read as a log, speaks of the log."""
    import dataclasses

    import oomdoctor.advisor as advisor
    from oomdoctor.advisor.fit import KV_IDS

    seen = []
    real = advisor.rank_remedies
    monkeypatch.setattr(advisor, "rank_remedies", lambda ids, inp: seen.append(inp) or real(ids, inp))
    fit(find_model("meta-llama/Llama-3.1-8B-Instruct"), find_gpu("L4"), max_model_len=131072)
    assert [inp.planned for inp in seen] == [True]
    as_log = real(KV_IDS, dataclasses.replace(seen[0], planned=False))
    whys = {r.id: r.why for r in as_log}
    assert "vLLM's own estimate of the maximum model length" in whys["vllm.max-model-len"]
    assert "(512.00 MiB in this log)" in whys["vllm.enforce-eager"]


def test_fit_speaks_the_locale_language(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """fit's verdict, remedies and errors follow OOMDOCTOR_LANG / LANG like the post-mortem."""
    monkeypatch.setenv("OOMDOCTOR_LANG", "ja")
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["fit", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4", "--max-model-len", "131072"]) == 1
    out = capsys.readouterr().out
    assert "収まりません：131072トークンのリクエスト1件にKVキャッシュが16.00 GiB必要ですが" in out
    assert "1. コンテキスト長を48352トークンに制限する" in out
    assert "--max-model-len 48352" in out
    assert main(["fit", "--model", "no/such-model", "--gpu", "A10G"]) == 2
    assert "'no/such-model'はカタログにありません" in capsys.readouterr().err


# -- issue 33: real weight bytes, --gpus N planning -----------------------------------------------

LLAMA_8B_CONFIG = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
                   "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
                   "_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A safetensors file whose header lists ``tensors`` (name: dtype, shape, bytes); zero data."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, size) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_fit_model_dir_reads_the_safetensors_headers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B_CONFIG))
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors",
                      {"a": ("BF16", [1000, 1000], 2_000_000), "b": ("F8_E4M3", [3000], 3_000_000)})
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"c": ("F32", [10], 40)})
    assert main(["fit", "--model", str(tmp_path), "--gpu", "H100", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    weights = next(b for b in out["budget"] if b["term"] == "weights")
    assert weights["bytes"] == 5_000_040
    assert weights["source"] == f"safetensors headers ({tmp_path}, 2 files)"
    assert out["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_fit_hub_model_reads_config_and_headers_from_the_hub(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """huggingface_hub mocked: no network in tests."""
    from types import SimpleNamespace

    from oomdoctor.advisor import weights

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA_8B_CONFIG))
    tensor = SimpleNamespace(dtype="BF16", data_offsets=(0, 16_000_000_000))
    meta = SimpleNamespace(files_metadata={"model.safetensors": SimpleNamespace(tensors={"w": tensor})})
    fake = SimpleNamespace(hf_hub_download=lambda repo, name, revision=None: str(cfg),
                           get_safetensors_metadata=lambda repo, revision=None: meta)
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake)
    assert weights.hub_weight_bytes("org/new-model") == weights.WeightBytes(
        16_000_000_000, "Hub safetensors headers (org/new-model)", True, (("BF16", 16_000_000_000),))
    assert main(["fit", "--model", "org/new-model", "--gpu", "H100", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    weights_row = next(b for b in out["budget"] if b["term"] == "weights")
    assert weights_row == {"term": "weights", "bytes": 16_000_000_000,
                           "source": "Hub safetensors headers (org/new-model)"}
    assert out["model"] == "org/new-model"


def test_fit_hub_offline_falls_back_to_the_catalog_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not installed
    assert main(["fit", "--model", "org/unknown-model", "--gpu", "H100"]) == 2


@pytest.mark.parametrize(("gpus", "tp", "length", "command"), [
    (2, 2, 9552, "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 2 --max-model-len 9552"),
    (4, 4, 131072, "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4"),
])
def test_fit_gpus_n_plans_tensor_parallelism(gpus: int, tp: int, length: int, command: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """70B (131.5 GiB of bf16 weights) on 2× and 4× H100: the plan uses the GPUs and exits 0."""
    assert main(["fit", "--model", "meta-llama/Llama-3.1-70B", "--gpu", "H100", "--gpus", str(gpus),
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["tensor_parallel_size"], out["max_model_len"], out["fits"]) == (tp, length, True)
    assert out["command"] == command
    assert out["plans"][0] == {"tensor_parallel_size": 1, "fits": False, "capacity_tokens": 0}
    # the planned length is the largest the plan's KV budget holds (per GPU, 2 KV heads at TP 4)
    geo, spec = find_model("meta-llama/Llama-3.1-70B"), find_gpu("H100")
    assert geo is not None and spec is not None
    single = fit(geo, spec, gpus=gpus, tensor_parallel_size=tp)
    assert single.capacity_tokens == length


def test_tp_candidates_divide_the_heads() -> None:
    from oomdoctor.advisor.fit import tp_candidates

    qwen32, llama70 = find_model("Qwen/Qwen2.5-32B-Instruct"), find_model("meta-llama/Llama-3.1-70B")
    assert qwen32 is not None and llama70 is not None
    assert tp_candidates(qwen32, 8) == [1, 2, 4, 8]  # 40 heads, 8 KV heads
    assert tp_candidates(llama70, 6) == [1, 2, 4]  # 64 heads: 3, 5 and 6 do not divide


def test_dtype_does_not_resize_a_quantized_checkpoint(tmp_path: Path) -> None:
    """An FP8 checkpoint served with --dtype float16 keeps its 1-byte linear layers (issue 33 §2)."""
    from oomdoctor.advisor.catalog import load_config

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**LLAMA_8B_CONFIG, "quantization_config": {"quant_method": "fp8"}}))
    geo, spec = load_config(cfg), find_gpu("H100")
    assert spec is not None
    assert fit(geo, spec, dtype="float16").weights == fit(geo, spec).weights == geo.weight_bytes()
    # embeddings and lm_head (2 × 128256 × 4096) at 2 B, the rest at 1 B
    emb = 2 * 128256 * 4096
    assert geo.weights_total == int((32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336)) * 1
                                    + (emb + 32 * 2 * 4096 + 4096) * 2)


def test_an_ambiguous_gpu_says_which_size_it_plans_for(capsys: pytest.CaptureFixture[str]) -> None:
    from oomdoctor.advisor.catalog import gpu_sizes

    assert gpu_sizes("A100") == ["A100-40GB", "A100-80GB"] and gpu_sizes("V100") == ["V100-16GB", "V100-32GB"]
    assert gpu_sizes("A100-80GB") == [] and gpu_sizes("A10") == [] and gpu_sizes("H20") == []
    main(["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A100", "--format", "json"])
    captured = capsys.readouterr()
    assert json.loads(captured.out)["gpu"] == "A100-40GB"
    assert "--gpu A100 is sold in several sizes (A100-40GB, A100-80GB); planning for A100-40GB." in captured.err
    main(["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A100-80GB", "--format", "json"])
    assert "several sizes" not in capsys.readouterr().err


def test_a_vision_tower_is_counted_in_16_bits() -> None:
    """A multimodal checkpoint: the text model quantized, the vision tower (here 2 layers of width
    64, MLP 256, GELU: 2 × (4·64² + 2·64·256) parameters) at 2 B."""
    from oomdoctor.advisor.weights import config_weight_bytes

    text = {**LLAMA_8B_CONFIG, "quantization_config": {"quant_method": "fp8"}}
    vision = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 256, "hidden_act": "gelu"}
    plain, multimodal = config_weight_bytes(text), config_weight_bytes({**text, "vision_config": vision})
    assert plain is not None and multimodal is not None
    assert multimodal.total - plain.total == 2 * (4 * 64 * 64 + 2 * 64 * 256) * 2


def test_runtime_quantization_keeps_embeddings_16_bit(capsys: pytest.CaptureFixture[str]) -> None:
    """fit --quantization fp8 on a bf16 catalog model: linear layers 1 B, embeddings + lm_head 2 B."""
    main(["fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "L4", "--quantization", "fp8",
          "--max-model-len", "8192", "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    weights = next(b for b in out["budget"] if b["term"] == "weights")
    emb = 2 * 128256 * 4096
    bf16 = int(8.03 * 1e9 * 2)  # the catalog's 8.03 B parameters at 2 B (float product, as fit computes it)
    assert weights["bytes"] == int((bf16 / 2 - emb) * 1 + emb * 2) == 9_080_673_151
    assert weights["source"] == "--quantization fp8: linear layers 1 B/param, embeddings and lm_head 2 B"


def test_values_on_a_nominal_gpu_size_are_less_confident() -> None:
    """A10G (nominal 24 GiB) against A10 (24 GB card, usable 22.09 GiB reported): the same advice,
    one step less confident where the GPU's size is only the vendor's."""
    geo, a10g, a10 = find_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("A10G"), find_gpu("A10")
    assert geo is not None and a10g is not None and a10 is not None and not a10g.reported and a10.reported
    nominal, usable = fit(geo, a10g, max_model_len=131072), fit(geo, a10, max_model_len=131072)
    assert nominal.remedies[0].id == usable.remedies[0].id == "vllm.max-model-len"
    assert (usable.remedies[0].confidence, nominal.remedies[0].confidence) == ("high", "medium")
    given = fit(geo, a10g, max_model_len=131072, total_bytes=24 * 2**30)  # --gpu-memory: the user's figure
    assert given.remedies[0].confidence == "high"
