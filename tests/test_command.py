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


def test_top_remedy_carries_the_command_in_every_renderer() -> None:
    report = diagnose(LOG)
    top = report.findings[0].remedies[0]
    assert top.flags == {"--max-model-len": "79200"}
    assert top.command == "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 79200"
    assert all(r.command is None for r in report.findings[0].remedies[1:])
    assert "$ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 79200" in render_text(report, width=200)
    assert "`vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 79200`" in render_markdown(report)
    data = json.loads(report.model_dump_json())
    assert data["findings"][0]["remedies"][0]["command"] == top.command


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
