"""The product the user runs and configures (rules/products.toml): how it is decided."""

from __future__ import annotations

from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.context import ContextCollector, product_for_engine
from oomdoctor.rulepack import RulePackError, default_pack, load_pack

PACK = default_pack()
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.10 GiB is free."


def _report(log: str) -> oomdoctor.Report:
    return oomdoctor.diagnose(log.encode("utf-8") + b"\n")


def test_every_product_rule_shows_its_product_in_an_example() -> None:
    missing = [
        c.rule.id
        for c in PACK.contexts
        if c.rule.product and not any(ex.get("values", {}).get("product") == c.rule.product for ex in c.rule.match)
    ]
    assert not missing


def test_every_product_an_engine_names_is_declared_once() -> None:
    engines = [e for p in PACK.products.values() for e in p.engines]
    # one product per engine: the fallback must not depend on the table's order
    assert len(engines) == len(set(engines))


@pytest.mark.parametrize(
    ("votes", "engine", "want"),
    [
        ([], "vllm", "vllm-serve"),  # no entry point named: vLLM's default
        (["vllm-python"], "vllm", "vllm-python"),  # a vote beats the engine's default
        (["vllm-python", "vllm-python", "vllm-serve"], "vllm", "vllm-python"),  # the most named
        (["vllm-python", "verl"], "vllm", "verl"),  # the RL framework over the vLLM it embeds
        (["llama.cpp"], "ollama", "ollama"),  # ollama over the llama.cpp inside it
        (["pytorch", "comfyui"], "pytorch", "comfyui"),
        (["vllm-python"], "sglang", "sglang"),  # vllm-python needs vLLM: a notebook alone is no vote
        ([], "ggml", "llama.cpp"),
        ([], "tensorrt-llm", "trtllm"),
        ([], None, None),
    ],
)
def test_the_most_specific_product_wins(votes: list[str], engine: str | None, want: str | None) -> None:
    c = ContextCollector(PACK.products)
    if engine:
        c.vote_engine(engine, 1)
    for i, p in enumerate(votes, start=2):
        c.vote_product(p, i)
    assert c.product() == want


def test_a_tie_goes_to_the_first_named() -> None:
    c = ContextCollector(PACK.products)
    c.vote_product("tgi", 7)
    c.vote_product("sglang", 3)
    assert c.product() == "sglang"


def test_an_engine_without_a_product_names_none() -> None:
    assert product_for_engine("host", PACK.products) is None
    assert product_for_engine("vllm", PACK.products) == "vllm-serve"


def test_the_finding_carries_the_runs_product() -> None:
    log = f'  File "/home/u/gen.py", line 12, in <module>\n    llm = LLM(model="Qwen/Qwen2.5-7B-Instruct")\n' \
          f'  File "/usr/lib/python3.11/site-packages/vllm/entrypoints/llm.py", line 177, in __init__\n{OOM}'
    report = _report(log)
    assert report.context.product == "vllm-python"
    assert [f.product for f in report.findings if f.severity == "error"] == ["vllm-python"]


def test_a_finding_takes_its_rules_engine_product_when_the_run_names_none() -> None:
    report = _report("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 0: cudaMalloc failed: out of memory")
    errors = [f for f in report.findings if f.severity == "error"]
    assert errors and all(f.product == "llama.cpp" for f in errors)


def test_a_prefix_process_names_its_product() -> None:
    report = _report("(APIServer pid=1) INFO 10-05 12:00:02 [utils.py:233] non-default args: {'model': 'Qwen/Qwen3-8B'}")
    assert report.context.product == "vllm-serve"
    report = _report(f'(ActorModelRayActor pid=348952)   File "/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", line 75, in create_and_map\n{OOM}')
    assert report.context.product == "openrlhf"


def test_a_context_rule_must_name_a_declared_product(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(
        '[[context]]\nid = "mine.tool"\nproduct = "no-such-tool"\ntriggers = ["mytool"]\npattern = \'\'\'mytool\'\'\'\n',
        "utf-8",
    )
    with pytest.raises(RulePackError, match=r'context "mine\.tool": product: .no-such-tool. is no \[\[product\]\] id'):
        load_pack([tmp_path])


def test_a_user_rule_file_adds_a_product(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(
        '[[product]]\nid = "mytool"\nname = "My Tool"\npriority = 50\n\n'
        '[[context]]\nid = "mine.tool"\nproduct = "mytool"\ntriggers = ["mytool/"]\npattern = \'\'\'[/\\\\]mytool[/\\\\]\'\'\'\n',
        "utf-8",
    )
    pack = load_pack([tmp_path])
    report = oomdoctor.diagnose(f'  File "/opt/mytool/run.py", line 3, in main\n{OOM}\n'.encode(), pack=pack)
    assert report.context.product == "mytool"


def test_text_and_markdown_show_the_product_by_name() -> None:
    from oomdoctor.render.markdown import render_markdown
    from oomdoctor.render.text import render_text

    log = f'  File "/usr/lib/python3.11/site-packages/vllm/entrypoints/llm.py", line 177, in __init__\n{OOM}'
    text = render_text(_report(log), width=200)
    assert "engine: vllm · product: vLLM (LLM class) · at" in text
    assert "product: **vLLM (LLM class)**" in render_markdown(_report(log))
    ja = oomdoctor.diagnose(log.encode() + b"\n", lang="ja")
    from oomdoctor.i18n import use_lang

    with use_lang("ja"):
        assert "製品：vLLM（LLMクラス）" in render_text(ja, width=200)


def test_a_bare_allocator_oom_under_vllm_serve_happened_inside_vllm() -> None:
    """The traceback names the `vllm` entry point and nothing names an engine: the product's
    `runs` makes vLLM the context's engine, so the cause is vLLM's own headroom, not a batch."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/vllm", line 10, in <module>\n'
        "    sys.exit(main())\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 19.88 MiB is free. Process 7 has 79.07 GiB memory in use. Of the allocated memory "
        "77.32 GiB is allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated."
    )
    report = _report(log)
    assert report.contexts[0].product == "vllm-serve" and report.contexts[0].engine == "vllm"
    f = report.findings[0]
    assert f.cause is not None and f.cause.id == "engine-headroom"
    assert f.remedies[0].id == "vllm.gpu-memory-utilization.lower"


def test_runs_names_an_engine_for_every_serving_product() -> None:
    runs = {p.id: p.runs for p in PACK.products.values() if p.runs}
    assert runs["vllm-serve"] == runs["vllm-python"] == "vllm"
    assert runs["lorax"] == "tgi" and runs["trtllm"] == "tensorrt-llm" and runs["ollama"] == "ollama"
    assert runs.get("pytorch") is None and runs.get("verl") is None  # a runtime, an RL framework: no single engine
