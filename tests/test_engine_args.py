"""The engines' flags as generated from their parsers, and every command the fixtures produce
checked against them for the version each log reports."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from oomdoctor.advisor.command import _engine_flags, corrected_command, engine_of
from oomdoctor.advisor.engine_args import check_argv, cli_value, flag_spec, value_ok
from oomdoctor.advisor.versions import flag_exists
from oomdoctor.api import diagnose
from oomdoctor.report import Context, Remedy
from tests.corpus import fixture_report

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_flags_by_version() -> None:
    assert flag_exists("vllm", "--max-model-len", "0.11.0") is True
    assert flag_exists("vllm", "--max_model_len", None) is True  # vLLM accepts the underscore spelling
    # the engine-config dump's keys are not flags
    for bad in ("--max-seq-len", "--device-config", "--chunked-prefill-enabled"):
        assert flag_exists("vllm", bad, "0.11.0") is False
    # added in 0.10.x: absent in 0.9.2, present in 0.10.2; between samples that disagree the hand
    # table decides (since 0.10.2), and a flag it does not list is unknown there
    assert flag_exists("vllm", "--kv-cache-memory-bytes", "0.9.2") is False
    assert flag_exists("vllm", "--kv-cache-memory-bytes", "0.11.0") is True
    assert flag_exists("vllm", "--kv-cache-memory-bytes", "0.10.0") is False
    assert flag_exists("vllm", "--async-scheduling", "0.10.0") is None
    # an unknown version is the current release (the newest sample), for the advisor and the checker alike
    assert flag_exists("vllm", "--kv-cache-memory-bytes", None) is True
    # removed after 0.14: --swap-space
    assert flag_exists("vllm", "--swap-space", "0.8.5") is True
    assert flag_exists("vllm", "--swap-space", "0.34.0") is False
    assert flag_exists("vllm", "--no-enable-prefix-caching", "0.11.0") is True
    assert flag_exists("sglang", "--mem-fraction-static", "0.4.6") is True
    # TGI: no generated data, the hand table answers; the input limit's two spellings
    assert flag_exists("tgi", "--max-input-tokens", "3.0.0") is True
    assert flag_exists("tgi", "--max-input-tokens", "1.4.5") is False
    assert flag_exists("tgi", "--max-input-length", "1.4.5") is True
    assert flag_exists("tgi", "--speculate", "3.0.0") is None  # in neither


def test_one_gate_answers_from_the_generated_data_first() -> None:
    """The advisor's gate and the command checker are one function: the parsers' data decides every
    flag it covers, the hand table only what the samples cannot tell."""
    from oomdoctor.advisor.versions import hand_table_says

    # the hand table does not list --max-seq-len; the parsers prove no release has it
    assert hand_table_says("vllm", "--max-seq-len", "0.6.0") is None
    assert flag_exists("vllm", "--max-seq-len", "0.6.0") is False
    # choices come from the parsers too: fp8_ds_mla is no --kv-cache-dtype value in 0.8.5
    assert flag_exists("vllm", "--kv-cache-dtype=fp8_ds_mla", "0.8.5") is False
    # older than the oldest sample (0.5.5): the hand table (fp8 weights since 0.5.0)
    assert flag_exists("vllm", "--quantization=fp8", "0.4.3") is False
    assert flag_exists("vllm", "--quantization=fp8", "0.5.1") is True
    # environment variables and engines without generated data: the hand table
    assert flag_exists("vllm", "VLLM_USE_V1", "0.11.0") is False
    assert flag_exists("tgi", "--cuda-memory-fraction", "2.0.0") is True


def test_the_hand_table_never_contradicts_the_parsers() -> None:
    from oomdoctor.advisor.engine_samples import _data, sampled
    from oomdoctor.advisor.versions import _table, hand_table_says

    for engine in ("vllm", "sglang"):
        samples = _data(engine)["samples"]  # type: ignore[index]
        for flag in _table()[engine]:
            for s in samples:
                gen, hand = sampled(engine, flag, s), hand_table_says(engine, flag, s)
                assert gen is None or gen == hand, (engine, flag, s, gen, hand)


def test_switches_values_and_choices() -> None:
    assert flag_spec("vllm", "--enforce-eager", "0.11.0").kind == "switch"  # type: ignore[union-attr]
    assert value_ok("vllm", "--dtype", "bfloat16", "0.11.0") is True
    assert value_ok("vllm", "--dtype", "torch.bfloat16", "0.11.0") is False
    assert value_ok("vllm", "--kv-cache-dtype", "fp8", "0.8.5") is True
    assert value_ok("vllm", "--kv-cache-dtype", "fp8_ds_mla", "0.8.5") is False
    assert cli_value("torch.bfloat16") == "bfloat16"
    assert cli_value("LoadFormat.AUTO") == "auto"
    assert check_argv("vllm", ["--dtype", "torch.bfloat16", "--max-seq-len", "4096"], "0.11.0") == [
        "--dtype torch.bfloat16: not an accepted value",
        "--max-seq-len: not a flag of vllm",
    ]


def test_never_from_the_engine_config_dump() -> None:
    log = (
        "INFO 10-05 12:00:15 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-8B', "
        "dtype=torch.bfloat16, max_seq_len=40960, load_format=auto, device_config=cuda, tensor_parallel_size=1\n"
        "ValueError: To serve at least one request with the models's max seq len (40960), (5.62 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (2.10 GiB). Based on the available memory, the "
        "estimated maximum model length is 15296. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.\n"
    )
    report = diagnose(log)
    top = report.findings[0].remedies[0]
    assert top.flags == {"--max-model-len": "15296"}
    assert top.command is None  # nothing the user typed: the flags alone are shown


def test_a_flag_unknown_for_the_version_gives_no_full_command() -> None:
    ctx = Context(engine_version="0.9.2", command=["vllm", "serve", "m"])
    assert corrected_command(ctx, Remedy(id="x", title="t", flags={"--kv-cache-memory-bytes": "8G"})) is None
    ctx = Context(engine_version="0.11.0", command=["vllm", "serve", "m"])
    assert corrected_command(ctx, Remedy(id="x", title="t", flags={"--kv-cache-memory-bytes": "8G"})) == (
        "vllm serve m --kv-cache-memory-bytes 8G"
    )


def _commands() -> list[tuple[str, str, str | None]]:
    out = []
    for path in sorted(FIXTURES.glob("*/*.log")):
        report = fixture_report(path)
        for f in report.findings:
            for r in f.remedies:
                if r.command:
                    out.append((path.name, r.command, report.context.engine_version))
    return out


COMMANDS = _commands()


def test_the_fixtures_produce_commands() -> None:
    assert len(COMMANDS) >= 3


@pytest.mark.parametrize(("name", "command", "version"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_fixture_command_parses(name: str, command: str, version: str | None) -> None:
    argv = shlex.split(command)
    while argv and "=" in argv[0] and not argv[0].startswith("-"):
        argv = argv[1:]
    engine = engine_of(argv)
    if engine is None:
        return  # a user's script: only flags it already had were changed
    problems = check_argv(engine, _engine_flags(argv), version)
    # a flag the user typed may be unknown between samples, and with no version it may be one the
    # current release dropped (the user's release took it); nothing may be wrong for sure
    from oomdoctor.advisor.engine_samples import _data, sampled

    def some_release_has(problem: str) -> bool:
        flag = problem.split(":", 1)[0]
        return any(sampled(engine, flag, s) for s in _data(engine)["samples"])  # type: ignore[index]

    wrong = [p for p in problems if "unknown for this version" not in p and not (version is None and some_release_has(p))]
    assert wrong == []


def test_sglang_commands_are_checked_too() -> None:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-7B-Instruct", "--mem-fraction-static",
            "0.9"]
    ctx = Context(engine="sglang", engine_version="0.4.6", command=argv)
    cmd = corrected_command(ctx, Remedy(id="x", title="t", flags={"--mem-fraction-static": "0.8"}))
    assert cmd == "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --mem-fraction-static 0.8"
    cmd = corrected_command(ctx, Remedy(id="x", title="t", flags={"--context-length": "8192"}))
    assert cmd is not None and cmd.endswith("--context-length 8192")
    # a vLLM flag is not an SGLang flag: no command, only the flags to change
    assert corrected_command(ctx, Remedy(id="x", title="t", flags={"--max-model-len": "8192"})) is None
    assert check_argv("sglang", ["--kv-cache-dtype", "fp8"], "0.4.6") == ["--kv-cache-dtype fp8: not an accepted value"]


def _ggml_remedy_flags() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(FIXTURES.glob("*/*.log")):
        report = fixture_report(path)
        for f in report.findings:
            if f.engine not in ("llama.cpp", "ggml") and report.context.engine != "llama.cpp":
                continue
            for r in f.remedies:
                out.extend((path.name, r.id, flag) for flag in r.flags)
    return out


GGML_FLAGS = _ggml_remedy_flags()


def test_the_fixtures_give_llamacpp_remedies() -> None:
    assert {flag for _, _, flag in GGML_FLAGS} >= {"-c", "-ngl", "-ub", "-fa", "--cache-type-k"}


@pytest.mark.parametrize(("name", "remedy", "flag"), GGML_FLAGS, ids=[f"{n}-{r}-{f}" for n, r, f in GGML_FLAGS])
def test_every_llamacpp_remedy_flag_is_in_arg_cpp(name: str, remedy: str, flag: str) -> None:
    assert flag_exists("llama.cpp", flag, None) is True


def test_llamacpp_flags_from_arg_cpp() -> None:
    # spellings, kinds and environment variables as common/arg.cpp declares them
    assert flag_exists("llama.cpp", "--n-gpu-layers", None) is True
    assert flag_exists("llama.cpp", "--max-model-len", None) is False  # a vLLM flag
    assert flag_spec("llama.cpp", "-c", None) == flag_spec("llama.cpp", "-c", "4514")
    spec = flag_spec("llama.cpp", "--no-mmap", None)
    assert spec is not None and spec.kind == "switch"
    from oomdoctor.advisor.engine_samples import _data

    data = _data("llama.cpp")
    assert data is not None and data["flags"]["--ctx-size"]["env"] == "LLAMA_ARG_CTX_SIZE"
    assert data["samples"][0] == "b3889" and data["node_llama_cpp"]["b3889"] == "3.1.1"


def test_llamacpp_commands_are_checked() -> None:
    argv = ["llama-server", "-m", "model.gguf", "-c", "131072", "-ngl", "99"]
    assert engine_of(argv) == "llama.cpp"
    assert check_argv("llama.cpp", _engine_flags(argv), None) == []
    assert check_argv("llama.cpp", ["--gpu-memory-utilization", "0.8"], None) == [
        "--gpu-memory-utilization: not a flag of llama.cpp"
    ]
    ctx = Context(engine="llama.cpp", command=argv)
    cmd = corrected_command(ctx, Remedy(id="x", title="t", flags={"-c": "65536"}))
    assert cmd == "llama-server -m model.gguf -c 65536 -ngl 99"


def _tgi_remedy_flags() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(FIXTURES.glob("*/*.log")):
        report = fixture_report(path)
        if report.context.engine != "tgi":
            continue
        out.extend((path.name, r.id, flag) for f in report.findings for r in f.remedies for flag in r.flags)
    return out


TGI_FLAGS = _tgi_remedy_flags()


def test_every_tgi_remedy_flag_is_known() -> None:
    # TGI's launcher (Rust, clap) is on no reachable registry: its flags come from the hand table
    # (rules/advice/flags.toml [tgi]); a remedy flag may never be one the table says is absent
    assert {flag for _, _, flag in TGI_FLAGS} >= {"--cuda-memory-fraction", "--max-batch-prefill-tokens"}
    assert [t for t in TGI_FLAGS if flag_exists("tgi", t[2], None) is False] == []
