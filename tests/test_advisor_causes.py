"""Diagnose before prescribing: the cause table's examples, real corpus logs per wrong pattern of
issue 13, the version gate, and every labelled fix of the tuning corpus that is not in the top three.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.advisor.prescription import CAUSES, cause_table, load_table, table_path
from oomdoctor.advisor.versions import flag_exists
from oomdoctor.report import Finding
from tests.engines_util import diagnose, diagnose_text, errors, only_error, remedy, remedy_ids

EXAMPLES = [(cid, i, ex) for cid, entry in cause_table().items() for i, ex in enumerate(entry.examples)]


@pytest.mark.parametrize("cause_id,i,example", EXAMPLES, ids=[f"{c}:example[{i}]" for c, i, _ in EXAMPLES])
def test_cause_examples(cause_id: str, i: int, example: object) -> None:
    report = oomdoctor.diagnose(example.log.encode(), source="<example>")  # type: ignore[attr-defined]
    # a recovered failure's cause (pipeline-parallel-fallback) is named on its warning
    errs = [f for f in report.findings if f.severity == "error"] or report.findings
    assert errs, "no finding"
    assert errs[0].cause is not None and errs[0].cause.id == cause_id, errs[0].cause


def test_every_cause_has_an_entry_and_a_summary() -> None:
    table = cause_table()
    assert set(table) == set(CAUSES)
    assert all(e.summary for e in table.values())


def test_table_rejects_unknown_remedy_and_cause(tmp_path: object) -> None:
    from pathlib import Path

    text = table_path().read_text("utf-8")
    bad = Path(str(tmp_path)) / "causes.toml"
    bad.write_text(text.replace('remedy = "gpu.free-other-processes"', 'remedy = "gpu.no-such-remedy"', 1))
    with pytest.raises(ValueError, match="unknown remedy"):
        load_table(bad, known_remedies={"x"})
    bad.write_text(text.replace('id = "unknown"', 'id = "gremlins"'))
    with pytest.raises(ValueError, match="vocabulary"):
        load_table(bad)


def test_remedy_table_is_checked(tmp_path: object) -> None:
    from pathlib import Path

    from oomdoctor.advisor.prescription import load_remedy_table, remedy_info

    assert remedy_info("vllm.cpu-offload-gb").cost == 10 and remedy_info("vllm.cpu-offload-gb").lever == "weights"
    assert remedy_info("vllm.tensor-parallel-size").additive is False
    assert remedy_info("no.such-remedy").cost == 5
    # trade-offs in words are data too: the ranked remedy carries the table's text
    f = only_error(diagnose("deepspeed/other-079.log"))
    assert remedy(f, "host.add-swap").tradeoff == remedy_info("host.add-swap").tradeoff != ""
    bad = Path(str(tmp_path)) / "remedies.toml"
    bad.write_text('[remedy."vllm.max-model-len"]\ncost = 4\ncolour = "red"\n')
    with pytest.raises(ValueError, match="colour"):
        load_remedy_table(bad)
    bad.write_text('[remedy."vllm.no-such-knob"]\ncost = 4\n')
    with pytest.raises(ValueError, match="no calculator"):
        load_remedy_table(bad, known_remedies={"vllm.max-model-len"})


# -- the wrong patterns, each on a real log ----------------------------------------------------------

def test_1_pytorch_hint_is_not_the_users_setting() -> None:
    """other-070: the message's own 'try setting ...expandable_segments:True' set nothing. 2.35 GiB
    of 4 GiB is free for a 20 MiB request: the memory was there (a driver fault, not fragmentation),
    and the fix that worked was expandable segments."""
    report = diagnose("transformers/other-070.log")
    assert report.context.expandable_segments is None
    f = only_error(report)
    assert f.cause is not None and f.cause.id == "driver-fault"
    assert f.remedies[0].env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert remedy_ids(f)[1] == "ask.driver-facts" and "gpu.free-other-processes" not in remedy_ids(f)


def test_1_pre_2_1_pytorch_gets_max_split_size_not_expandable_segments() -> None:
    """other-053: 'reserved in total' (PyTorch < 2.1): 30.70 − 24.89 = 5.81 GiB reserved-unallocated,
    18 % of the 31.72 GiB card, against 152 MiB: fragmentation."""
    f = only_error(diagnose("pytorch/other-053.log"))
    assert f.cause is not None and f.cause.id == "fragmentation"
    assert "torch.expandable-segments" not in remedy_ids(f)
    # 152 MiB rounded up to a power of two = 256
    assert f.remedies[0].env == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256"}


def test_1_slack_on_a_full_card_is_capacity_not_fragmentation() -> None:
    """other-011: 76.80 − 73.95 = 2.85 GiB reserved-unallocated is 3.6 % of the 79.33 GiB card, under
    FRAGMENTATION_SHARE: defragmenting would let this 172 MiB through and the next step fail."""
    f = only_error(diagnose("deepspeed/other-011.log"))
    assert f.cause is not None and f.cause.id != "fragmentation"
    assert "torch.max-split-size" not in remedy_ids(f)[:1]


def test_2_memory_outside_the_process_comes_first() -> None:
    """20 GiB requested on 23.69 GiB with 1.34 GiB reserved and 0 free: ~22 GiB is held elsewhere."""
    log = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 23.69 GiB total capacity; "
           "1.34 GiB already allocated; 0 bytes free; 1.34 GiB reserved in total by PyTorch)")
    f = oomdoctor.diagnose(log.encode()).findings[0]
    assert f.cause is not None and f.cause.id == "other-processes"
    fig = f.figures
    assert f.account is not None
    assert f.account.get("outside-pytorch") == fig["total_bytes"] - fig["free_bytes"] - fig["reserved_bytes"]
    top = f.remedies[0]
    assert top.id == "gpu.free-other-processes" and top.run[0].command.startswith("nvidia-smi ")
    assert "torch.reduce-batch" not in remedy_ids(f)


def test_2_the_failing_process_is_not_another_process() -> None:
    log = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 232.00 MiB. GPU 0 has a total capacity "
           "of 23.57 GiB of which 154.25 MiB is free. Process 4242 has 23.40 GiB memory in use. Including "
           "non-PyTorch memory, this process has 23.40 GiB memory in use. Of the allocated memory 22.88 GiB is "
           "allocated by PyTorch, and 188.29 MiB is reserved by PyTorch but unallocated.")
    f = oomdoctor.diagnose(log.encode()).findings[0]
    assert f.cause is not None and f.cause.id != "other-processes"
    assert "gpu.free-other-processes" not in remedy_ids(f)


@pytest.mark.parametrize("fixture", ["vllm/new-008.log", "vllm/vllm-013.log"])
def test_3_vllms_own_advice_is_given(fixture: str) -> None:
    """'No available memory for the cache blocks. Try increasing gpu_memory_utilization'."""
    f = only_error(diagnose(fixture))
    r = remedy(f, "vllm.gpu-memory-utilization.raise")
    # no figures: the version's default 0.90 + 0.05
    assert r.flags == {"--gpu-memory-utilization": "0.95"} and r.rank <= 3
    assert "default" in r.why


def test_3_graph_estimate_is_the_cause_when_it_dwarfs_the_card() -> None:
    """new-008: 'Estimated CUDA graph memory: 118.65 GiB total' before the KV sizing failure."""
    f = only_error(diagnose("vllm/new-008.log"))
    assert f.cause is not None and f.cause.id == "cudagraph-capture" and "118.65 GiB" in f.cause.summary
    assert remedy(f, "vllm.cudagraph-estimate-off").env == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    assert "vllm.quantization" not in remedy_ids(f)


def test_2_startup_with_the_card_taken_frees_the_gpu_first() -> None:
    """vllm-018: 7.34 GiB free of 139.72 GiB; utilization 0.04 'fits' only a tiny model."""
    f = only_error(diagnose("vllm/vllm-018.log"))
    assert f.cause is not None and f.cause.id == "other-processes" and "132.38 GiB" in f.cause.summary
    assert f.remedies[0].id == "gpu.free-other-processes" and f.remedies[0].fits is True
    low = remedy(f, "vllm.gpu-memory-utilization.fit-free")
    assert low.flags == {"--gpu-memory-utilization": "0.04"} and low.fits is None and low.confidence == "low"


def test_4_tensor_parallel_without_a_gpu_count() -> None:
    """seed-001, the guide's own example: shard over the smallest N, 'if you have N'."""
    f = only_error(diagnose("vllm/seed-001.log"))
    r = remedy(f, "vllm.tensor-parallel-size")
    assert r.flags == {"--tensor-parallel-size": "2"} and "if you have 2" in r.title and r.confidence == "low"
    assert r.rank <= 3
    assert "vllm.max-num-seqs" not in remedy_ids(f)  # cannot change the weights' budget


def test_5_no_combination_when_one_change_covers_it() -> None:
    for path in ("vllm/vllm-001.log", "vllm/vllm-002.log", "vllm/vllm-008.log"):
        for f in errors(diagnose(path)):
            combos = [r for r in f.remedies if r.id.startswith("combined:")]
            singles = [r for r in f.remedies if not r.id.startswith("combined:")]
            for c in combos:
                assert not any((r.saves_bytes or 0) >= (c.saves_bytes or 0) and r.fits for r in singles)


def test_6_trtllm_triton_load_gets_max_batch_size() -> None:
    """other-024: the engine's runtime buffers did not fit at model load; rebuild with a smaller batch."""
    f = only_error(diagnose("trtllm/other-024.log"))
    assert remedy(f, "trtllm.max-batch-size").rank <= 3


def test_6_sglang_decode_oom_gets_no_prefill_knob() -> None:
    """new-025: 'Decode out of memory': 167 requests running (the last batch line), not a prefill chunk."""
    f = only_error(diagnose("sglang/new-025.log"))
    assert "sglang.chunked-prefill-size" not in remedy_ids(f)
    assert f.remedies[0].flags == {"--max-running-requests": "83"}


def test_6_llamacpp_cpu_buffer_is_host_memory() -> None:
    """other-004 (ollama on Windows): 'failed to allocate CPU buffer': host RAM, no transformers setting."""
    f = only_error(diagnose("ollama/other-004.log"))
    assert f.cause is not None and f.cause.id == "host-ram"
    assert "host.low-cpu-mem-usage" not in remedy_ids(f)


def test_7_version_gate() -> None:
    assert flag_exists("vllm", "--quantization=fp8", "0.2.7") is False
    assert flag_exists("vllm", "--quantization=fp8", "0.6.3") is True
    assert flag_exists("vllm", "--kv-cache-dtype=fp8", "0.3.3") is False
    assert flag_exists("vllm", "--swap-space", "0.17.1") is True
    assert flag_exists("vllm", "--swap-space", "0.18.0") is False
    assert flag_exists("vllm", "--swap-space", None) is False  # unknown version: the current one
    assert flag_exists("vllm", "--max-model-len", None) is True
    assert flag_exists("vllm", "--no-such-flag", "0.6.0") is False  # neither sampled parser (0.5.5, 0.6.6) has it
    assert flag_exists("llama.cpp", "-c", "b1234") is None


def test_7_no_vllm_serve_before_the_cli_existed() -> None:
    from oomdoctor.advisor import rank_remedies
    from oomdoctor.advisor.registry import AdviceInput
    from oomdoctor.report import Context, Location

    f = Finding(rule="t", kind="vllm.kv-cache.max-len-exceeds", engine="vllm", severity="error",
                phase="kv-cache-alloc", title="t", message="m", location=Location(line=1, end_line=1),
                figures={"max_seq_len": 8192, "kv_cache_tokens": 4512})
    for version, has in (("0.2.7", False), ("0.6.3", True)):
        ctx = Context(engine="vllm", engine_version=version, model="m", launch_args={"model": "m"})
        ctx.typed_args.update({"model": "m"})  # as a logged ``non-default args`` dump sets them
        top = rank_remedies(["vllm.max-model-len"], AdviceInput(f, ctx))[0]
        assert (top.command is not None and top.command.startswith("vllm serve")) is has, (version, top.command)


def test_7_old_vllm_never_gets_fp8_weights() -> None:
    """vllm-001 runs 0.2.7: --quantization fp8 came in 0.5.0."""
    for f in errors(diagnose("vllm/vllm-001.log")):
        assert all(r.flags.get("--quantization") != "fp8" for r in f.remedies)


def test_8_a_binding_cap_is_the_remedy() -> None:
    log = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 320.00 MiB. GPU 0 has a total capacity "
           "of 31.37 GiB of which 10.69 GiB is free. Including non-PyTorch memory, this process has 20.59 GiB "
           "memory in use. 20.00 GiB allowed; Of the allocated memory 19.76 GiB is allocated by PyTorch, and "
           "33.46 MiB is reserved by PyTorch but unallocated.")
    f = oomdoctor.diagnose(log.encode()).findings[0]
    assert f.cause is not None and f.cause.id == "memory-cap"
    # (20.59 GiB + 320 MiB) / 31.37 GiB + 0.01 = 0.6763 -> 0.68, below (20.59 + 10.69) / 31.37 = 0.99
    assert f.remedies[0].settings == {"torch.cuda.set_per_process_memory_fraction": "0.68"}
    assert f.remedies[0].fits is True


def test_8_a_cap_with_the_gpu_free_is_what_refused_it() -> None:
    """new-011 (XPU): 8.11 GiB requested with 16.54 GiB free and 8.27 GiB allowed: the allocator
    rounds the request up to whole segments, and the GPU had the memory: the fraction refused it.
    A smaller batch is not the answer to a cap."""
    f = only_error(diagnose("pytorch/new-011.log"))
    assert f.cause is not None and f.cause.id == "memory-cap"
    assert "torch.reduce-batch" not in remedy_ids(f)


def test_8_tgi_cap_from_allowed() -> None:
    """other-078 (LoRAX): '23.77 GiB allowed' is --cuda-memory-fraction's cap; lifting it is the fix."""
    f = only_error(diagnose("other/other-078.log"))
    assert f.cause is not None and f.cause.id == "memory-cap"
    # (allowed 23.77 GiB + free 23.44 GiB) / total 47.54 GiB = 0.993, rounded down: the most the GPU has
    assert f.remedies[0].flags == {"--cuda-memory-fraction": "0.99"}
    assert "torch.memory-fraction" not in remedy_ids(f)  # PyTorch's setter is not the user's knob in TGI


def test_9_bare_pytorch_oom_may_be_training() -> None:
    """other-071 (sd-scripts LoRA): gradient checkpointing is offered, marked 'if this is training'."""
    f = only_error(diagnose("other/other-071.log"))
    r = remedy(f, "training.gradient-checkpointing")
    assert r.rank <= 3 and r.confidence == "low" and "if this is training" in r.title


def test_10_global_host_oom_gets_swap_not_a_container_limit() -> None:
    """other-079: dmesg 'Out of memory: Killed process' (no cgroup): anon + file + shmem = 36.40 GiB; the
    DeepSpeed launcher ran 3 ranks, so swap is sized from 3 × 21.89 GiB anon + 14.51 GiB file + shmem."""
    f = only_error(diagnose("deepspeed/other-079.log"))
    assert f.cause is not None and f.cause.id == "host-ram" and "36.40 GiB" in f.cause.summary
    assert f.remedies[0].settings == {"swap size": "at least 81 GiB"}
    assert "host.container-memory-limit" not in remedy_ids(f)


def test_11_high_only_when_every_number_is_stated() -> None:
    from oomdoctor.advisor import rank_remedies
    from oomdoctor.advisor.registry import AdviceInput
    from oomdoctor.report import Context, Location

    f = Finding(rule="t", kind="vllm.startup.free-memory-below-target", engine="vllm", severity="error",
                phase="startup-check", title="t", message="m", location=Location(line=1, end_line=1),
                figures={"free_bytes": 40 * 2**30, "desired_bytes": 72 * 2**30})
    # the capacity comes from the user's --gpu hint (a catalog size), not from the log
    (r,) = rank_remedies(["vllm.gpu-memory-utilization.fit-free"], AdviceInput(f, Context(engine="vllm"), {"gpu": "A100-80GB"}))
    assert r.fits is True and r.confidence == "medium"


def test_why_line_in_every_human_renderer() -> None:
    from oomdoctor.render import renderer

    report = diagnose("deepspeed/other-079.log")
    for fmt in ("text", "markdown", "slack"):
        out = renderer(fmt)(report)
        assert "Why: The host ran out of RAM" in out, fmt
        assert out.index("Why:") < out.index("Add swap space"), fmt


def test_cause_and_account_in_the_json_report() -> None:
    import json

    from oomdoctor.render import renderer

    data = json.loads(renderer("json")(diagnose("deepspeed/other-079.log")))
    assert data["schema_version"] >= 2  # cause and account came with 2
    f = data["findings"][0]
    assert f["cause"]["id"] == "host-ram"
    rss = next(e for e in f["account"]["entries"] if e["name"] == "rss")
    assert rss["bytes"] == (22957108 + 72036 + 15143164) * 1024 and rss["source"] == "derived"
    anon = next(e for e in f["account"]["entries"] if e["name"] == "anon-rss")
    assert anon["source"] == "stated" and anon["line"] == f["location"]["line"]


# -- labelled fixes of the tuning corpus ---------------------------------------------------------------

def _fix_divergences() -> dict[str, str | None]:
    """fixture path (relative to fixtures/) -> the written reason, for every labelled fix the tool does not
    give (the ``fix`` entries of tests/corpus_divergences.json, which tests/test_corpus.py keeps current)."""
    from tests.corpus import FIXTURES, case_id, labelled_cases, load_divergences, log_for

    known = {cid: aspects["fix"].get("reason") for cid, aspects in load_divergences().items() if "fix" in aspects}
    return {str(log_for(lp).relative_to(FIXTURES)): known[case_id(lp)] for lp in labelled_cases() if case_id(lp) in known}


#: fixtures whose label names a fix that cannot be in the top three -> why (the fix follows from
#: nothing the log shows, or is no flag). The reasons live beside the recorded divergence in
#: tests/corpus_divergences.json; every other labelled fix must be given: the list of cases comes from
#: the fixtures' labels, so a new labelled fixture is checked without an entry anywhere.
CANNOT = _fix_divergences()


def _labelled_fixes() -> dict[str, Path]:
    """fixture path (relative to fixtures/) -> its label, for every label naming a fix."""
    from tests.corpus import FIXTURES, fix_is_labelled, labelled_cases, load_label, log_for

    return {str(log_for(lp).relative_to(FIXTURES)): lp for lp in labelled_cases() if fix_is_labelled(load_label(lp))}


LABELLED_FIXES = _labelled_fixes()


def test_every_labelled_fix_is_given_or_listed_with_a_reason() -> None:
    assert len(LABELLED_FIXES) > 25  # the scan really sees the labels
    assert set(CANNOT) <= set(LABELLED_FIXES), sorted(set(CANNOT) - set(LABELLED_FIXES))
    unexplained = sorted(path for path, reason in CANNOT.items() if not reason or len(reason) < 40)
    assert not unexplained, f"fix divergences without a written reason in tests/corpus_divergences.json: {unexplained}"


@pytest.mark.parametrize("path", sorted(LABELLED_FIXES))
def test_labelled_fix_in_top_three_or_cannot(path: str) -> None:
    """Given in the top three (as evaluate.py scores it), or listed in CANNOT; strictly: once given, unlist it."""
    from tests.corpus import fix_found, load_label, log_for, report_for

    label_path = LABELLED_FIXES[path]
    found = fix_found(load_label(label_path), report_for(log_for(label_path)))
    if path in CANNOT:
        assert not found, f"{path} now given: drop its fix divergence (python -m pytest tests/test_corpus.py --update-divergences)"
    else:
        assert found, f"{path}: the label's fix is not in the top three (record the divergence and write its true reason in tests/corpus_divergences.json)"


def test_a_rule_from_a_rules_directory_gets_its_remedies(tmp_path: Path) -> None:
    """A rule the built-in pack lacks (``--rules DIR``) keeps the remedies it names (a kind of its own,
    so no cause prescribes them instead)."""
    (tmp_path / "mine.toml").write_text(
        '[[rule]]\nid = "mine.kv-short"\ntitle = "KV cache short"\nengine = "vllm"\n'
        'kind = "mine.kv-short"\nphase = "kv-cache-alloc"\ntriggers = ["my kv cache holds"]\n'
        "pattern = '''my kv cache holds (?P<kv_cache_tokens>\\d+) tokens, the model wants (?P<max_seq_len>\\d+)'''\n"
        'remedies = ["vllm.max-model-len"]\n'
        '[[rule.match]]\nlog = "my kv cache holds 4512 tokens, the model wants 8192"\n'
        'figures = { kv_cache_tokens = 4512, max_seq_len = 8192 }\n'
    )
    log = "my kv cache holds 4512 tokens, the model wants 8192\n"
    f = oomdoctor.diagnose(log, rules=[tmp_path]).findings[0]
    assert f.rule == "mine.kv-short"
    # 4512 tokens, a multiple of vLLM's 16-token block: the largest length that fits
    assert {"--max-model-len": "4512"} in [r.flags for r in f.remedies]


# -- the KV cache's own allocation is not an activation ---------------------------------------------

_VLLM_KV_ALLOC = """\
(APIServer pid=1) INFO 06-01 09:59:00 [utils.py:326] non-default args: {'gpu_memory_utilization': 0.98}
(EngineCore pid=500) ERROR 06-01 10:00:00 [core.py:700]   File "/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 6537, in _allocate_kv_cache_tensors
(EngineCore pid=500) ERROR 06-01 10:00:00 [core.py:700]     tensor = torch.zeros(
(EngineCore pid=500) ERROR 06-01 10:00:00 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 200.00 MiB is free. Including non-PyTorch memory, this process has 78.98 GiB memory in use. Of the allocated memory 77.50 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.
"""


def test_vllm_kv_cache_allocation_above_the_default_budget_computes_nothing_from_it() -> None:
    # no utilization in the log, and PyTorch holds 77.50 GiB > 0.90 × 79.19 GiB = 71.27 GiB: the run's
    # utilization is not the default, so no value is computed from 0.90
    text = "\n".join(_VLLM_KV_ALLOC.splitlines()[1:]) + "\n"
    f = only_error(oomdoctor.diagnose(text.encode(), source="<kv>"))
    lower = next(r for r in f.remedies if r.id == "vllm.gpu-memory-utilization.lower")
    assert lower.flags == {} and "71.27 GiB" in lower.why and "2.00 GiB / 79.19 GiB = 0.03" in lower.why


def test_vllm_kv_cache_allocation_is_named_as_the_kv_cache_and_its_budget() -> None:
    f = only_error(oomdoctor.diagnose(_VLLM_KV_ALLOC.encode(), source="<kv>"))
    assert f.phase == "kv-cache-alloc" and f.cause is not None
    assert f.cause.id == "kv-cache-exceeds-free"
    assert f.cause.summary.startswith("Allocating the KV cache (2.00 GiB more) failed with this process already holding 78.98 GiB")
    assert "activation" not in f.cause.summary
    top = f.remedies[0]
    # the logged 0.98: 0.98 − 2.00 GiB / 79.19 GiB = 0.9547… → 0.95
    assert top.id == "vllm.gpu-memory-utilization.lower" and top.flags == {"--gpu-memory-utilization": "0.95"}
    assert top.title == "Size vLLM's budget to what the GPU can give (0.95)"
    assert "outside" not in top.title and "allocating 2.00 GiB more of it failed" in top.why
    # nothing that leaves the budget as it is: smaller weights only grow a budget-sized cache
    assert not {"vllm.quantization", "vllm.cpu-offload-gb", "vllm.enforce-eager", "torch.reduce-batch"} & {
        r.id for r in f.remedies
    }


def test_llamacpp_kv_cache_allocation_gets_the_context_not_flash_attention() -> None:
    log = (
        "llama_context: n_ctx         = 65536\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMalloc failed: out of memory\n"
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 8589934592\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache\n"
    )
    f = only_error(oomdoctor.diagnose(log.encode(), source="<kv>"))
    assert f.phase == "kv-cache-alloc" and f.cause is not None and f.cause.id == "kv-cache-exceeds-free"
    assert f.cause.summary == "Allocating the KV cache for 65536 tokens of context (8.00 GiB) failed: it is more than the GPU had free."
    ids = [r.id for r in f.remedies]
    assert ids[0] == "ggml.ctx-size" and f.remedies[0].flags == {"-c": "32768"}
    assert "ggml.flash-attn" not in ids and "ggml.ubatch-size" not in ids  # the compute buffer is not what failed


QUANTIZE = {"vllm.quantization", "vllm.quantization-4bit", "sglang.quantization", "tgi.quantize"}


@pytest.mark.parametrize(
    "log,cause",
    [("vllm/vllm-013.log", "kv-budget-exhausted"), ("vllm/vllm-015.log", "kv-budget-exhausted"),
     ("vllm/vllm-025.log", "activation-peak")],
)
def test_no_quantization_where_the_weights_are_not_the_problem(log: str, cause: str) -> None:
    """Quantizing changes the model; where the budget that ran out has a cheaper knob (utilization,
    batch, context) an expert calls it harmful in the top three (corpus labels: 0 of 60 such cases
    rank it first)."""
    f = only_error(diagnose(log))
    assert f.cause is not None and f.cause.id == cause
    assert not QUANTIZE & set(remedy_ids(f))


def test_quantization_stays_for_weights_that_do_not_fit() -> None:
    f = only_error(diagnose("vllm/vllm-023.log"))
    assert f.cause is not None and f.cause.id == "weights-exceed-device"
    assert "vllm.quantization" in remedy_ids(f)[:3] or "vllm.quantization-4bit" in remedy_ids(f)[:3]


@pytest.mark.parametrize(
    "version,capacity_gib,gpu,want",
    [((0, 6, 4), None, None, 256),  # V0 default everywhere
     ((0, 8, 0), 80, None, None),  # 0.6.5-0.8.3: 1024 with V1, 256 with V0: unknown
     (None, 22, None, 256),  # every version from 0.8.4 gives 256 below 70 GiB
     (None, 80, "H100", None),  # 1024 or 256: the version decides
     ((0, 9, 0), 80, "NVIDIA H100 80GB HBM3", 1024),
     ((0, 9, 0), 80, "NVIDIA A100-SXM4-80GB", 256),  # 0.9.0 leaves A100 at 256
     ((0, 8, 4), 80, "NVIDIA A100-SXM4-80GB", 1024),
     ((0, 10, 0), 69, None, 256), ((0, 10, 0), 70, None, 1024),  # the 70 GiB boundary
     ((0, 10, 0), None, None, None)],
)
def test_default_max_num_seqs(version: tuple[int, int, int] | None, capacity_gib: int | None, gpu: str | None,
                              want: int | None) -> None:
    from oomdoctor.advisor.memory_model import default_max_num_seqs

    capacity = capacity_gib * 2**30 if capacity_gib is not None else None
    assert default_max_num_seqs(version, capacity, gpu) == want


def test_a_profiling_peak_with_no_max_num_seqs_halves_the_default() -> None:
    """vllm-025: the profile run OOMs on a 22 GiB card with no --max-num-seqs: 256 (the default
    below 70 GiB) halved is 128, marked as resting on a default; CPU offload is no remedy for it."""
    f = only_error(diagnose("vllm/vllm-025.log"))
    top = f.remedies[0]
    assert top.id == "vllm.max-num-seqs" and top.flags == {"--max-num-seqs": "128"}
    assert top.confidence == "low" and top.sources == {"dummy requests": "default"}
    assert "vllm.cpu-offload-gb" not in remedy_ids(f)


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

#: corpus fresh-054 (DeepSpeed-Chat OPT-1.3B on a 15 GB card), the message whole
_FRESH_054 = ("RuntimeError: CUDA out of memory. Tried to allocate 256.00 MiB (GPU 0; 14.56 GiB total capacity; "
              "13.30 GiB already allocated; 230.50 MiB free; 13.65 GiB reserved in total by PyTorch) If reserved "
              "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
              "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")


#: a plain DDP script's reducer failing (the frames of torch 2.1 nn/parallel/distributed.py, the
#: wording of its 2.1 OOM message), the user's own file and nothing of transformers or DeepSpeed
_PLAIN_DDP = """Traceback (most recent call last):
  File "/home/user/train.py", line 61, in main
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/parallel/distributed.py", line 811, in __init__
    self._ddp_init_helper(
  File "/usr/local/lib/python3.10/dist-packages/torch/nn/parallel/distributed.py", line 1100, in _ddp_init_helper
    self.reducer = dist.Reducer(
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.50 GiB. GPU 0 has a total capacty of 23.65 GiB \
of which 10.28 GiB is free. Including non-PyTorch memory, this process has 13.36 GiB memory in use. Of the allocated \
memory 12.90 GiB is allocated by PyTorch, and 12.97 MiB is reserved by PyTorch but unallocated. If reserved but \
unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory \
Management and PYTORCH_CUDA_ALLOC_CONF
"""


def test_9b_bare_oom_holding_the_card_shards_only_where_the_log_shows_several_gpus() -> None:
    """fresh-054: 13.65 of 14.56 GiB held by this process for a 256 MiB request, and nothing in the
    message names DeepSpeed, a rank or a second GPU: ZeRO-3 shards over ranks and saves nothing on one
    GPU, so it is not offered. The same message with a rank label ("[rank1]: ", torch's
    per-rank prefix) shows several ranks: ZeRO-3 / FSDP, "if this is training"."""
    f = only_error(diagnose_text(_FRESH_054))
    assert "training.shard-state" not in remedy_ids(f)
    assert remedy_ids(f)[:2] == ["torch.reduce-batch", "training.gradient-checkpointing"]
    ranked = only_error(diagnose_text("[rank1]: " + _FRESH_054))
    assert ranked.ranks == ["rank1"]
    r = remedy(ranked, "training.shard-state")
    assert r.rank == 2 and r.confidence == "low" and r.title.endswith("with DeepSpeed ZeRO-3 or FSDP (if this is training)")
    assert r.settings == {"zero_optimization.stage": "3"} and not r.flags and not r.env


def test_9b_training_on_one_gpu_gets_zero_offload_not_sharding() -> None:
    """The fresh-054 message under a loss.backward() frame (phase training) and no rank or second GPU:
    at most ZeRO-Offload, the optimizer states in host memory (deepspeed 0.14 offload_optimizer, device
    cpu, valid for stages 1-3), never zero_optimization.stage 3 alone."""
    text = ('Traceback (most recent call last):\n  File "/home/u/train.py", line 40, in <module>\n'
            '    loss.backward()\n  File "/usr/lib/python3/site-packages/torch/_tensor.py", line 522, in backward\n'
            '    torch.autograd.backward(\n' + _FRESH_054)
    f = only_error(diagnose_text(text))
    assert f.phase == "training" and f.ranks == []
    assert "training.shard-state" not in remedy_ids(f)
    r = remedy(f, "training.zero-offload")
    assert r.settings == {"zero_optimization.stage": "2", "zero_optimization.offload_optimizer.device": "cpu"}
    assert r.title == "Move the optimizer states to CPU memory with DeepSpeed ZeRO-Offload (one GPU)"
    assert r.confidence == "low" and r.rank == 3
    assert r.tradeoff.startswith("Needs the training loop run through deepspeed.initialize")


def test_9b_bare_message_gets_zero_offload_after_checkpointing_if_training() -> None:
    """The bare fresh-054 message (no phase, no program, no second GPU, the process holding most of
    the card): ZeRO-Offload is the one-GPU form of DeepSpeed's ZeRO (built for a single GPU), so it
    is offered "if this is training", after the cheaper batch and checkpointing, and ZeRO-3 is not."""
    f = only_error(diagnose_text(_FRESH_054))
    assert f.phase == "unknown"
    assert remedy_ids(f)[:3] == ["torch.reduce-batch", "training.gradient-checkpointing", "training.zero-offload"]
    r = remedy(f, "training.zero-offload")
    assert r.title == "Move the optimizer states to CPU memory with DeepSpeed ZeRO-Offload (if this is training)"
    assert r.settings == {"zero_optimization.stage": "2", "zero_optimization.offload_optimizer.device": "cpu"}
    assert "training.shard-state" not in remedy_ids(f)


def test_9b_plain_ddp_reducer_failure_shards_with_fsdp_first() -> None:
    """A plain PyTorch script wrapping its model in DistributedDataParallel (no Trainer, no DeepSpeed):
    the reducer's gradient buckets do not fit (cause training-state). The first remedy follows the
    cause: FSDP in place of DDP (torch.distributed.fsdp.FullyShardedDataParallel), not 8-bit Adam
    (no optimizer state exists yet at DDP's construction)."""
    f = only_error(diagnose_text(_PLAIN_DDP))
    assert f.cause is not None and f.cause.id == "training-state" and f.product == "pytorch"
    first = f.remedies[0]
    assert first.id == "training.shard-state" and first.confidence == "medium"
    assert first.settings == {"torch.distributed.fsdp.FullyShardedDataParallel": "model, in place of DistributedDataParallel(model)"}
    assert first.title == "Wrap the model in FullyShardedDataParallel instead of DistributedDataParallel"
    assert remedy_ids(f).index("training.optim-8bit") > 0


def test_9c_bare_oom_with_room_held_elsewhere_gets_no_sharding() -> None:
    """The same message with this process holding 60 % of the card (8.74 of 14.56 GiB reserved, 5.60 GiB
    free) and a 6 GiB request: the resident state is not the bulk, and sharding is not offered."""
    text = (_FRESH_054.replace("256.00 MiB", "6.00 GiB").replace("13.30 GiB already", "8.60 GiB already")
            .replace("230.50 MiB free", "5.60 GiB free").replace("13.65 GiB reserved", "8.74 GiB reserved"))
    f = only_error(diagnose_text(text))
    assert "training.shard-state" not in remedy_ids(f)
    assert "training.gradient-checkpointing" in remedy_ids(f)


def test_9d_generation_with_a_training_library_gets_no_training_remedy() -> None:
    """fresh-011 (text-generation-webui, transformers' generate on an 8 GB card, 7.22 GiB reserved): the
    phase is inference, so gradient checkpointing, bf16 training and 8-bit Adam are not remedies; the
    process fills the card, so its own switch for the weights comes first (--load-in-4bit, in
    v4.7.3's modules/shared.py; --auto-devices is not, and a chat UI has no batch size to halve)."""
    f = only_error(diagnose("transformers/fresh-011.log"))
    assert f.phase == "inference" and f.product == "text-generation-webui"
    assert not [rid for rid in remedy_ids(f) if rid.startswith("training.")]
    assert "torch.reduce-batch" not in remedy_ids(f)
    assert (f.remedies[0].id, f.remedies[0].flags) == ("weights.quantize-on-load", {"--load-in-4bit": ""})


def test_9f_vae_decoding_in_one_piece_gets_tiling_first() -> None:
    """synthetic-vae-decode: SDXL's VAE decodes a 2048 px latent in one pass (autoencoder_kl.py _decode)
    and 8 GiB does not fit: tiling is the peak's own knob, before offloading the weights."""
    f = only_error(diagnose("diffusers/synthetic-vae-decode.log"))
    first = f.remedies[0]
    assert first.id == "diffusers.vae-tiling" and first.settings == {"pipe.vae.enable_tiling()": "before calling the pipeline"}
    assert remedy_ids(f)[1] == "weights.offload"


def test_9g_tiled_decoding_gets_no_tiling() -> None:
    """The same failure inside tiled_decode: tiling is already on, so it is not offered again."""
    log = (FIXTURES / "diffusers/synthetic-vae-decode.log").read_text("utf-8").replace(
        "line 275, in _decode\n", "line 275, in _decode\n    return self.tiled_decode(z)\n"
        '  File "/usr/local/lib/python3.11/site-packages/diffusers/models/autoencoders/autoencoder_kl.py", line 366, in tiled_decode\n')
    assert "in tiled_decode" in log
    f = only_error(diagnose_text(log))
    assert "diffusers.vae-tiling" not in remedy_ids(f)


def test_9e_generate_script_is_not_training() -> None:
    """A script calling transformers' model.generate (synthetic-alloc-conf-2-10): no training remedy."""
    f = only_error(diagnose("pytorch/synthetic-alloc-conf-2-10.log"))
    assert f.phase == "inference"
    assert not [rid for rid in remedy_ids(f) if rid.startswith("training.")]


def test_9h_the_weights_request_is_not_the_shortfall() -> None:
    """seed-001: "Not enough GPU memory to allocate 24576 MiB for the model weights" with no free figure:
    24 GiB is the whole model, not what is missing, so no `--cpu-offload-gb 24` and no "24 GiB missing"."""
    f = only_error(diagnose("vllm/seed-001.log"))
    assert "vllm.cpu-offload-gb" not in remedy_ids(f)
    assert not [r for r in f.remedies if "is missing" in r.why]


def test_9i_a_contiguous_identical_batch_of_processes_is_the_jobs_own_ranks() -> None:
    """other-063 (no rank label on the line): 15 processes, PIDs 101549-101563, 1.19 GiB each on GPU 0:
    the job's other ranks' CUDA contexts, not strangers to stop; each rank selects its own device."""
    f = only_error(diagnose("pytorch/other-063.log"))
    assert f.cause is not None and f.cause.id == "placement" and "101549–101563" in f.cause.summary
    first = f.remedies[0]
    assert first.id == "gpu.rank-devices" and list(first.settings) == ["torch.cuda.set_device"]
    assert "gpu.free-other-processes" not in remedy_ids(f)


def test_9j_unlabelled_processes_of_different_sizes_are_not_siblings() -> None:
    """The same contiguous PIDs holding different amounts, with no rank label: nothing says they are
    one job's ranks, so the other processes stay other processes."""
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 52.00 MiB. GPU 0 has a total capacity "
            "of 31.74 GiB of which 39.62 MiB is free. Process 101549 has 3.19 GiB memory in use. Process 101550 has "
            "5.19 GiB memory in use. Process 101551 has 4.19 GiB memory in use. Process 101552 has 5.19 GiB memory in "
            "use. Including non-PyTorch memory, this process has 13.82 GiB memory in use. Of the allocated memory "
            "11.54 GiB is allocated by PyTorch, and 1.80 GiB is reserved by PyTorch but unallocated.")
    f = only_error(diagnose_text(text))
    assert f.cause is not None and f.cause.id == "other-processes"
    assert "gpu.rank-devices" not in remedy_ids(f)


def test_9k_free_memory_covering_the_request_is_not_fragmentation() -> None:
    """other-070: the driver reported more free than the 20 MiB requested: expandable segments are
    offered as another allocation path, saving nothing and claiming no fit, not as "fragmentation"."""
    f = only_error(diagnose("transformers/other-070.log"))
    assert f.cause is not None and f.cause.id == "driver-fault"
    r = remedy(f, "torch.expandable-segments")
    assert r.saves_bytes is None and r.fits is None and r.confidence == "low"
    assert "this is not fragmentation" in r.why


def test_9l_more_held_than_the_card_has_is_named() -> None:
    """other-014: 22.44 GiB allocated by PyTorch on an 8.00 GiB card: the driver backs the excess with
    host memory, and the work needs about 2.8x the card; "the GPU is full" would undersell it."""
    f = only_error(diagnose("pytorch/other-014.log"))
    assert f.cause is not None and f.cause.id == "activation-peak"
    assert f.cause.summary.startswith("This process holds 22.44 GiB, more than the GPU's 8.00 GiB")
    assert "about 2.8× the card" in f.cause.summary


def test_cuda_driver_error_is_the_expandable_segments_path() -> None:
    """vllm-040: "CUDA driver error: out of memory" from a Marlin repack: c10's driver-API check, in
    the caching allocator the expandable segments' cuMemMap path (WSL2). Not the weights: no
    quantization or tensor parallelism; turning the segments off first."""
    f = only_error(diagnose("vllm/vllm-040.log"))
    assert f.cause is not None and f.cause.id == "driver-fault"
    assert f.cause.summary.startswith('A CUDA driver-API call ran out of memory ("CUDA driver error")')
    assert remedy_ids(f)[:2] == ["torch.expandable-segments-off", "ask.driver-facts"]
    assert remedy(f, "torch.expandable-segments-off").env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}
    assert not any("quantization" in r or "tensor-parallel" in r for r in remedy_ids(f))


def test_bare_runtime_oom_in_the_optimizer_step_is_not_training_state() -> None:
    """other-069's shape: "CUDA error: out of memory" under `self.optimizer.step()`. The caching
    allocator would have named a size for optimizer states; a bare runtime error there is another
    call (pinned offload buffers, NCCL): the facts first, no precision or 8-bit Adam."""
    log = (
        "│    647 │   │   self.optimizer.step()                                                             │\n"
        "\n"
        "RuntimeError: CUDA error: out of memory\n"
    )
    f = only_error(diagnose_text(log))
    assert f.cause is not None and f.cause.id == "driver-fault"
    assert f.cause.summary.startswith("A CUDA runtime call ran out of memory in the optimizer step (optimizer.step)")
    assert remedy_ids(f) == ["ask.driver-facts"]
    assert remedy(f, "ask.driver-facts").title.startswith("Check what holds the GPU and the host's pinned memory")
