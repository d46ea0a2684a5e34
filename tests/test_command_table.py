"""The corrected command's pieces, value by value (issue 38 §4).

Written against a whole-module mutation run of ``oomdoctor/advisor/command.py``: each row pins one
boundary (the last token, the 40-argument dump guard, the first four tokens that name the program)
or one spelling (negative numbers as values, ``--no-`` forms, lists and dicts).
"""

from __future__ import annotations

import pytest

from oomdoctor.advisor.command import (
    _engine_flags,
    _same_value,
    _value_tokens,
    apply_flags,
    argv_from_launch_args,
    engine_of,
)


@pytest.mark.parametrize(("nxt", "out"), [
    # a flag unknown to every parser takes the next token as its value unless it is an option;
    # a negative number (one decimal point at most) is a value
    ("-1", ["train.py", "--foo", "2", "--bar"]),
    ("-1.5", ["train.py", "--foo", "2", "--bar"]),
    ("7", ["train.py", "--foo", "2", "--bar"]),
    ("-x", ["train.py", "--foo", "2", "-x", "--bar"]),
    ("-1.2.3", ["train.py", "--foo", "2", "-1.2.3", "--bar"]),
])
def test_unknown_flag_values(nxt: str, out: list[str]) -> None:
    assert apply_flags(["train.py", "--foo", nxt, "--bar"], {"--foo": "2"}) == out


def test_unknown_flag_last_on_the_line() -> None:
    assert apply_flags(["train.py", "--foo"], {"--foo": "2"}) == ["train.py", "--foo", "2"]


@pytest.mark.parametrize(("extra", "rebuilt"), [(39, True), (40, False)])
def test_dump_guard_at_40_arguments(extra: int, rebuilt: bool) -> None:
    """40 arguments (the model and 39 flags) are a command line; 41 are a full configuration dump."""
    args = {"model": "m", **{f"k{i}": "1" for i in range(extra)}}
    argv = argv_from_launch_args(args)
    assert (argv is not None) is rebuilt
    if argv is not None:
        assert argv[:5] == ["vllm", "serve", "m", "--k0", "1"] and len(argv) == 3 + 2 * extra


@pytest.mark.parametrize(("flag", "value", "tokens"), [
    ("--enforce-eager", "True", ["--enforce-eager"]),
    ("--enforce-eager", "False", ["--no-enforce-eager"]),
    ("--enable-prefix-caching", "False", ["--no-enable-prefix-caching"]),
    ("--foo", "[1, 2]", ["--foo", "1", "2"]),
    ("--foo", "(1, 2)", ["--foo", "1", "2"]),
    ("--foo", "{'a': 1}", ["--foo", '{"a":1}']),
    ("--foo", "[]", None),
    ("--foo", "None", None),
    ("--foo", "", None),
    ("--foo", "bfloat16", ["--foo", "bfloat16"]),
])
def test_value_tokens(flag: str, value: str, tokens: list[str] | None) -> None:
    assert _value_tokens("vllm", flag, value, "0.11.0") == tokens


@pytest.mark.parametrize(("argv", "engine"), [
    (["/usr/bin/vllm", "serve", "m"], "vllm"),
    (["env", "A", "B", "vllm", "serve"], "vllm"),  # the program within the first four tokens
    (["a", "b", "c", "d", "vllm", "serve"], None),
    (["a", "b", "c", "vllm", "x", "serve"], None),  # "serve" within the first five tokens only
    (["a", "serve", "c", "d", "vllm"], None),  # the program's name within the first four
    (["a", "serve", "c", "d", "sglang"], None),
    (["sglang", "b", "c", "d", "e", "serve"], None),
    (["python", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
    (["a", "b", "c", "d", "vllm.entrypoints.x"], None),
    (["python", "-m", "sglang.launch_server"], "sglang"),
    (["sglang", "serve"], "sglang"),
    (["a", "b", "c", "d", "sglang.launch_server"], None),
    (["/opt/llama-server", "-c", "1"], "llama.cpp"),
    (["text-generation-launcher", "--max-input-tokens", "1"], "tgi"),
    ([], None),
])
def test_engine_of(argv: list[str], engine: str | None) -> None:
    assert engine_of(argv) == engine


@pytest.mark.parametrize(("argv", "flags"), [
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--a", "1"], ["--a", "1"]),
    (["vllm", "serve", "m", "--a"], ["--a"]),
    (["vllm", "serve", "--a"], ["--a"]),  # the model given by --model, not positionally
    (["llama-server", "-m", "f.gguf", "-c", "1"], ["-m", "f.gguf", "-c", "1"]),  # -m is the model file
    (["x.py", "--a"], ["--a"]),
    (["python", "-m"], ["-m"]),
    (["python", "-m", "mod"], []),
])
def test_engine_flags(argv: list[str], flags: list[str]) -> None:
    assert _engine_flags(argv) == flags


@pytest.mark.parametrize(("a", "b", "same"), [
    ("4", "4.0", True),
    ("<ConfigFormat.AUTO: 'auto'>", "auto", True),
    ("<ConfigFormat.AUTO: auto>", "auto", True),  # an enum value that is not a literal: its text
    ("'a'", "a", False),  # a quoted string is not the bare word
    ("'a'", '"a"', False),  # two spellings of one string are two texts, not one value
    ("a", "b", False),
])
def test_same_value(a: str, b: str, same: bool) -> None:
    assert _same_value(a, b) is same


@pytest.mark.parametrize(("command", "out"), [
    # -c supersedes LLAMA_ARG_CTX_SIZE: the assignment goes, or the old size would still be read
    (["LLAMA_ARG_CTX_SIZE=4096", "llama-server", "-m", "f.gguf"], "llama-server -m f.gguf -c 2048"),
    (["LLAMA_ARG_NOPE=1", "llama-server", "-m", "f.gguf"], None),  # no such variable in that build
    (["CUDA_VISIBLE_DEVICES=0", "llama-server", "-m", "f.gguf"], "CUDA_VISIBLE_DEVICES=0 llama-server -m f.gguf -c 2048"),
])
def test_llamacpp_env_prefix(command: list[str], out: str | None) -> None:
    from oomdoctor.advisor.command import corrected_command
    from oomdoctor.report import Context, Remedy

    rem = Remedy(id="ggml.ctx-size", title="t", flags={"-c": "2048"})
    assert corrected_command(Context(engine="llama.cpp", command=command), rem) == out


@pytest.mark.parametrize(("command", "flags", "out"), [
    (["text-generation-launcher", "--model-id", "m", "--max-input-tokens", "4000"], {"--max-input-tokens": "1000"},
     "text-generation-launcher --model-id m --max-input-tokens 1000"),
    (["text-generation-launcher", "--model-id", "m"], {"--nope": "1"}, None),  # not in TGI's hand table
])
def test_tgi_flags_from_the_hand_table(command: list[str], flags: dict[str, str], out: str | None) -> None:
    from oomdoctor.advisor.command import corrected_command
    from oomdoctor.report import Context, Remedy

    assert corrected_command(Context(command=command), Remedy(id="x", title="t", flags=flags)) == out


def test_env_assignment_replaced_not_repeated() -> None:
    from oomdoctor.advisor.command import corrected_command
    from oomdoctor.report import Context, Remedy

    rem = Remedy(id="x", title="t", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    cmd = corrected_command(Context(command=["PYTORCH_CUDA_ALLOC_CONF=old", "vllm", "serve", "m"]), rem)
    assert cmd == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True vllm serve m"


def test_env_prefix_kept_before_the_new_assignments() -> None:
    from oomdoctor.advisor.command import corrected_command
    from oomdoctor.report import Context, Remedy

    rem = Remedy(id="x", title="t", flags={"--foo": "2"}, env={"B": "2"})
    assert corrected_command(Context(command=["A=1", "--foo=1"]), rem) == "A=1 B=2 --foo 2"
