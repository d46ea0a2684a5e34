"""llama.cpp's build number, read from the line its programs print first, decides which flags
(and LLAMA_ARG_* variables) exist: the data is common/arg.cpp of sampled release builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomdoctor.advisor.command import corrected_command
from oomdoctor.advisor.engine_args import env_of, flag_spec, switch_value
from oomdoctor.advisor.engine_samples import option_of_env
from oomdoctor.advisor.versions import flag_exists
from oomdoctor.api import diagnose
from oomdoctor.report import Context, Remedy

ROOT = Path(__file__).resolve().parents[1]
KV_OOM = (ROOT / "fixtures/llamacpp/synthetic-kv-cache-oom.log").read_text(encoding="utf-8")
#: a compute-pool failure (flash attention shrinks that buffer), without the fixture's own build line
POOL_OOM = (ROOT / "fixtures/llamacpp/synthetic-runtime-cuda-error.log").read_text(encoding="utf-8").split("\n", 1)[1]


def _log(*head: str) -> str:
    return "\n".join(head) + "\n" + KV_OOM


@pytest.mark.parametrize(("line", "build"), [
    ("build: 4514 (3edfa7d3) with cc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0 for x86_64-linux-gnu", "4514"),
    ("main: build = 2960 (d03c98b7) with cc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0 for x86_64-linux-gnu", "2960"),
])
def test_the_build_is_the_engine_version(line: str, build: str) -> None:
    ctx = diagnose(_log(line)).context
    assert (ctx.engine, ctx.engine_version) == ("llama.cpp", build)


def test_flags_by_build() -> None:
    # -ot/--override-tensor came between b4600 and b5590; --cpu-moe by b6431
    assert flag_exists("llama.cpp", "--override-tensor", "4514") is False
    assert flag_exists("llama.cpp", "--override-tensor", "b5590") is True
    assert flag_exists("llama.cpp", "--override-tensor", "5000") is None  # between samples that differ
    assert flag_exists("llama.cpp", "--cpu-moe", "5590") is False
    assert flag_exists("llama.cpp", "--cpu-moe", "6431") is True
    assert flag_exists("llama.cpp", "-c", "3000") is None  # older than every sample
    spec = flag_spec("llama.cpp", "-fa", "4514")
    assert spec is not None and spec.kind == "switch"
    spec = flag_spec("llama.cpp", "-fa", "6431")
    assert spec is not None and spec.kind == "value"  # -fa on|off|auto
    # common_arg({"--mmap"}, {"--no-mmap"}, ..., bool value): two switches, not a value
    spec = flag_spec("llama.cpp", "--no-mmap", "8179")
    assert spec is not None and spec.kind == "switch"


def test_llama_arg_variables_stand_for_their_options() -> None:
    assert option_of_env("llama.cpp", "LLAMA_ARG_CTX_SIZE") == "--ctx-size"
    assert env_of("llama.cpp", "-c") == "LLAMA_ARG_CTX_SIZE"
    assert flag_exists("llama.cpp", "LLAMA_ARG_CTX_SIZE", "4514") is True
    assert flag_exists("llama.cpp", "LLAMA_ARG_N_CPU_MOE", "4514") is False  # --n-cpu-moe came later
    assert flag_exists("llama.cpp", "LLAMA_ARG_N_CPU_MOE", None) is True
    assert flag_exists("llama.cpp", "LLAMA_ARG_NO_SUCH_THING", "4514") is False
    assert flag_exists("vllm", "LLAMA_ARG_CTX_SIZE", None) is None


def test_flash_attention_is_spelled_as_the_build_takes_it() -> None:
    assert switch_value("llama.cpp", "-fa", "4514", "on") == ""
    assert switch_value("llama.cpp", "-fa", "6431", "on") == "on"
    old = diagnose("build: 4514 (3edfa7d3) with cc (GCC) 13.2.0 for x86_64-linux-gnu\n" + POOL_OOM)
    new = diagnose("build: 6431 (1d660d2f) with cc (GCC) 13.2.0 for x86_64-linux-gnu\n" + POOL_OOM)
    unknown = diagnose(POOL_OOM)  # no build line: the newest sample answers
    assert unknown.context.engine_version is None
    pick = {r.id: r.flags for r in old.findings[0].remedies}
    assert pick["ggml.flash-attn"] == {"-fa": ""}
    assert {r.id: r.flags for r in new.findings[0].remedies}["ggml.flash-attn"] == {"-fa": "on"}
    assert {r.id: r.flags for r in unknown.findings[0].remedies}["ggml.flash-attn"] == {"-fa": "on"}


def test_the_logged_command_is_rebuilt_whole_with_its_variables() -> None:
    report = diagnose(_log(
        "build: 4514 (3edfa7d3) with cc (GCC) 13.2.0 for x86_64-linux-gnu",
        "$ LLAMA_ARG_N_GPU_LAYERS=99 LLAMA_ARG_CTX_SIZE=131072 llama-server -m models/qwen2.5-7b-q8_0.gguf -fa",
    ))
    top = report.findings[0].remedies[0]
    assert top.flags == {"-c": "65536"}
    # -c now sets what LLAMA_ARG_CTX_SIZE did: the variable goes, the rest of the line stays
    assert top.command == "LLAMA_ARG_N_GPU_LAYERS=99 llama-server -m models/qwen2.5-7b-q8_0.gguf -fa -c 65536"


def test_a_variable_the_build_lacks_gives_no_full_command() -> None:
    remedy = Remedy(id="x", title="t", flags={"-c": "65536"})
    argv = ["LLAMA_ARG_N_CPU_MOE=4", "llama-server", "-m", "m.gguf"]
    assert corrected_command(Context(command=argv, engine="llama.cpp", engine_version="4514"), remedy) is None
    assert corrected_command(Context(command=argv, engine="llama.cpp", engine_version="6431"), remedy) == (
        "LLAMA_ARG_N_CPU_MOE=4 llama-server -m m.gguf -c 65536")
