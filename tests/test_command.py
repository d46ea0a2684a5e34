"""The corrected command: flags replaced in place, never duplicated; env prefixed; shown by renderers."""

from __future__ import annotations

import json

from oomdoctor.advisor.command import apply_flags, argv_from_launch_args, corrected_command
from oomdoctor.api import diagnose
from oomdoctor.render.markdown import render_markdown
from oomdoctor.render.text import render_text
from oomdoctor.report import Context, Remedy


def rem(**kw: object) -> Remedy:
    return Remedy(id="x", title="t", **kw)  # type: ignore[arg-type]


def test_replaces_every_spelling_once() -> None:
    argv = ["vllm", "serve", "m", "--max-model-len", "32768", "--max_model_len=1", "-tp", "2", "--enforce-eager"]
    out = apply_flags(argv, {"--max-model-len": "4096", "--tensor-parallel-size": "4"})
    assert out == ["vllm", "serve", "m", "--max-model-len", "4096", "--tensor-parallel-size", "4", "--enforce-eager"]


def test_appends_missing_flags_and_switches() -> None:
    out = apply_flags(["vllm", "serve", "m"], {"--enforce-eager": "", "--kv-cache-dtype": "fp8"})
    assert out == ["vllm", "serve", "m", "--enforce-eager", "--kv-cache-dtype", "fp8"]


def test_equals_form_and_switch_followed_by_flag() -> None:
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--enforce-eager", "--gpu-memory-utilization=0.95"]
    out = apply_flags(argv, {"--gpu-memory-utilization": "0.88"})
    assert out == ["python", "-m", "vllm.entrypoints.openai.api_server", "--enforce-eager",
                   "--gpu-memory-utilization", "0.88"]


def test_whether_a_flag_takes_a_value_comes_from_the_parser_data() -> None:
    # --enable-sleep-mode is a switch in vLLM's parser: the model after it is not its value
    argv = ["vllm", "serve", "--enable-sleep-mode", "Qwen/Qwen2.5-7B", "--max-model-len", "4096"]
    assert apply_flags(argv, {"--enable-sleep-mode": ""}, "0.11.0") == argv
    # --served-model-name takes a value, even one that looks like an option
    argv = ["vllm", "serve", "m", "--served-model-name", "-chat", "--max-model-len", "4096"]
    assert apply_flags(argv, {"--served-model-name": "chat"}, "0.11.0") == [
        "vllm", "serve", "m", "--served-model-name", "chat", "--max-model-len", "4096"]
    # 0.9.2's parser wants a value after --enable-chunked-prefill; 0.14.0's takes none
    argv = ["vllm", "serve", "m", "--enable-chunked-prefill", "True"]
    assert apply_flags(argv, {"--enable-chunked-prefill": "False"}, "0.9.2") == [
        "vllm", "serve", "m", "--enable-chunked-prefill", "False"]


def test_idempotent() -> None:
    argv = ["vllm", "serve", "m", "--max-model-len", "4096"]
    assert apply_flags(argv, {"--max-model-len": "4096"}) == argv


def test_corrected_command_from_argv_with_env() -> None:
    ctx = Context(command=["CUDA_VISIBLE_DEVICES=0", "vllm", "serve", "Qwen/Qwen2.5-7B", "--max-model-len", "32768"])
    cmd = corrected_command(ctx, rem(flags={"--max-model-len": "8192"}, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}))
    assert cmd == ("CUDA_VISIBLE_DEVICES=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                   "vllm serve Qwen/Qwen2.5-7B --max-model-len 8192")


def test_corrected_command_from_non_default_args() -> None:
    args = {"model_tag": "Qwen/Qwen2.5-7B", "max_model_len": "32768", "enforce_eager": "True", "model": "Qwen/Qwen2.5-7B"}
    assert argv_from_launch_args(args) == ["vllm", "serve", "Qwen/Qwen2.5-7B", "--max-model-len", "32768", "--enforce-eager"]
    ctx = Context(launch_args=args)
    assert corrected_command(ctx, rem(flags={"--max-model-len": "7200"})) is None  # not known to be typed
    ctx.typed_args.update(args)  # a `non-default args` dump: what the user typed
    cmd = corrected_command(ctx, rem(flags={"--max-model-len": "7200"}))
    assert cmd == "vllm serve Qwen/Qwen2.5-7B --max-model-len 7200 --enforce-eager"


def test_no_command_for_model_changes_or_unknown_launch() -> None:
    assert corrected_command(Context(), rem(flags={"--max-model-len": "1"})) is None
    ctx = Context(command=["vllm", "serve", "m"])
    assert corrected_command(ctx, rem(settings={"model": "a 4-bit checkpoint"})) is None


LOG = (
    "INFO 01-01 00:00:00 [api_server.py:1] non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', "
    "'max_model_len': 131072, 'model': 'meta-llama/Llama-3.1-8B-Instruct'}\n"
    "ValueError: To serve at least one request with the model's max seq len (131072), (16.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (9.67 GiB). Based on the available memory, the "
    "estimated maximum model length is 79200. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine.\n"
)


def test_every_remedy_carries_its_command_and_the_renderers_show_it() -> None:
    """Each remedy whose change is flags gets its own corrected command, not only the first (issue
    37). Text shows the whole command under the first and, after it, each remedy's flags under its
    program's name (the output stays short); Markdown and JSON carry every command."""
    report = diagnose(LOG)
    rems = report.findings[0].remedies
    assert rems[0].flags == {"--max-model-len": "79200"}
    assert [r.command for r in rems] == [
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 79200",
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 --kv-cache-dtype fp8",
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 131072 --gpu-memory-utilization 0.95",
    ]
    text = render_text(report, width=200).splitlines()
    assert "       $ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 79200" in text
    assert "       --max-model-len 79200" not in text  # the command carries the flags
    assert sum(line.lstrip().startswith("$ vllm serve") for line in text) == 1
    assert text.count("     flags of vllm serve:") == 2 and "       --kv-cache-dtype fp8" in text
    markdown = render_markdown(report)
    for r in rems:
        assert f"   - command:\n     ```shell\n     {r.command}\n     ```" in markdown
    data = json.loads(report.model_dump_json())
    assert [r["command"] for r in data["findings"][0]["remedies"]] == [r.command for r in rems]
    assert data["findings"][0]["remedies"][1]["code"] == [
        {"language": "shell", "where": "vllm serve", "text": "--kv-cache-dtype fp8", "keys": ["--kv-cache-dtype"]}]


def test_a_remedy_that_is_not_enough_alone_gets_no_command() -> None:
    from oomdoctor.advisor.ranking import _commands_and_code
    from oomdoctor.advisor.registry import AdviceInput
    from oomdoctor.report import Finding, Location

    ctx = Context(command=["vllm", "serve", "m"])
    f = Finding(rule="x", kind="k", engine="vllm", severity="error", title="t", message="m",
                location=Location(line=1, end_line=1))
    rems = [rem(flags={"--max-model-len": "4096"}), rem(flags={"--enforce-eager": ""}),
            Remedy(id="vllm.x", title="t", fits=False, flags={"--max-num-seqs": "8"})]
    _commands_and_code(rems, AdviceInput(f, ctx, {}))
    assert [r.command for r in rems] == ["vllm serve m --max-model-len 4096", "vllm serve m --enforce-eager", None]
    assert [c.where for r in rems for c in r.code] == ["vllm serve"] * 3


def test_user_scripts_only_get_flags_they_already_take() -> None:
    ctx = Context(command=["python3", "bench.py", "--model", "m", "--gpu-memory-utilization", "0.99"])
    assert corrected_command(ctx, rem(flags={"--gpu-memory-utilization": "0.95"})) == (
        "python3 bench.py --model m --gpu-memory-utilization 0.95")
    assert corrected_command(ctx, rem(flags={"--enforce-eager": ""})) is None
    ctx2 = Context(command=["/usr/bin/vllm", "serve", "m"])
    assert corrected_command(ctx2, rem(flags={"--enforce-eager": ""})) == "/usr/bin/vllm serve m --enforce-eager"


def test_non_default_args_in_their_command_line_forms() -> None:
    args = {"model_tag": "m", "model": "m", "dtype": "torch.bfloat16", "enable_prefix_caching": "False",
            "served_model_name": "['a', 'b']", "hf_overrides": "{'rope_theta': 1000000}"}
    assert argv_from_launch_args(args, "0.11.0") == [
        "vllm", "serve", "m", "--dtype", "bfloat16", "--no-enable-prefix-caching", "--served-model-name", "a", "b",
        "--hf-overrides", '{"rope_theta":1000000}',
    ]
    # chunked prefill took an optional value in 0.6: False is written out
    assert argv_from_launch_args({"model": "m", "enable_chunked_prefill": "False"}, "0.6.6") == [
        "vllm", "serve", "m", "--enable-chunked-prefill", "False"]
    # an argument reset to None has no command-line form: no command rather than a different one
    assert argv_from_launch_args({"model": "m", "quantization": "None"}) is None


def test_a_logged_sglang_launch_line_is_rebuilt_with_its_program() -> None:
    # the page-granularity case: the rebuilt command must run as typed, program and environment included
    report = diagnose(
        "$ CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct "
        "--tp-size 2 --page-size 64\n"
        "RuntimeError: Decode out of memory. Try to lower your batch size.\n"
        "Try to allocate 48 tokens.\n"
        "Avaliable tokens: 2048\n"
        "self.token_to_kv_pool_allocator.available_size()=2048\n"
        "self.tree_cache.evictable_size()=0\n"
    )
    top = report.findings[0].remedies[0]
    assert top.flags == {"--page-size": "1"}
    assert top.command == (
        "CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct "
        "--tp-size 2 --page-size 1"
    )


def test_the_fixtures_with_a_launch_command_give_each_remedy_its_own() -> None:
    """Over the fixture goldens: every command carries its own remedy's flags and env (so it is that
    remedy's, not the first's), and the remedies after the first get theirs too."""
    import shlex
    from pathlib import Path

    later = 0
    for golden in sorted((Path(__file__).resolve().parent.parent / "fixtures").glob("*/*.expected.json")):
        for finding in json.loads(golden.read_text(encoding="utf-8")).get("findings", []):
            for r in finding.get("remedies", []):
                if not r.get("command"):
                    continue
                words = shlex.split(r["command"])
                for flag, value in r["flags"].items():
                    i = words.index(flag)
                    assert value == "" or words[i + 1] == value, (golden.name, r["id"], flag)
                assert all(f"{k}={v}" in words for k, v in r["env"].items()), (golden.name, r["id"])
                assert r["fits"] is not False and not r["settings"], (golden.name, r["id"])
                later += r["rank"] > 1
    assert later >= 10
