"""A CLI a new user finds their way in (issue 37): the Commands section of ``--help``, ``rules
list`` with a header and JSON, ``rules show`` printing the TOML its header names, ``fit -f``,
``--show-completion SHELL``, and counts in words ("1 request", "2 failures")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomdoctor.cache import toml_module
from oomdoctor.cli import main
from oomdoctor.cli.tools import rule_block
from oomdoctor.render.common import result_text
from oomdoctor.rulepack import default_pack

ROOT = Path(__file__).resolve().parent.parent


def _out(args: list[str], capsys: pytest.CaptureFixture[str], code: int = 0) -> str:
    assert main(["--lang", "en", *args]) == code
    return capsys.readouterr().out


def test_help_lists_the_subcommands_in_a_commands_section(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out = _out(["--help"], capsys)
    section = out.split("\nCommands:\n", 1)[1]
    assert section == (
        "  run -- COMMAND        Run COMMAND, pass its output through and diagnose it\n"
        "                        live.\n"
        "  fit                   Pre-flight: will a model fit on these GPUs, and with\n"
        "                        which flags?\n"
        "  serve                 HTTP service; Slack and Mattermost answers.\n"
        "  rules list|show|test  List, show and test the rules.\n"
        "\n"
        "  See oomdoctor COMMAND --help.\n"
    )
    assert out.index("\nOptions:\n") < out.index("\nCommands:\n")


def test_rules_help_is_not_cut(capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(["rules", "--help"], capsys)
    assert "..." not in out.split("Commands:", 1)[1]
    assert "  test  Run the rules' examples (built-in, or DIR's).\n" in out


def test_rules_list_has_a_header_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _out(["rules", "list"], capsys).splitlines()
    pack = default_pack()
    assert lines[0].split() == ["ID", "KIND", "ENGINE", "TITLE"]
    assert len(lines) == len(pack.rules) + 2  # header, a row per rule, the count
    kind_at = lines[0].index("KIND")
    assert all(line[kind_at - 2 : kind_at] == "  " for line in lines[1:-1])  # aligned columns
    rows = json.loads(_out(["rules", "list", "--format", "json"], capsys))
    assert [r["id"] for r in rows] == [r.id for r in pack.rules]
    assert set(rows[0]) == {"id", "kind", "engine", "severity", "title", "source"}
    assert json.loads(_out(["rules", "list", "-f", "json"], capsys)) == rows
    assert json.loads(_out(["rules", "list", "--json"], capsys)) == rows  # the old spelling still works


def test_rules_list_unknown_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lang", "en", "rules", "list", "-f", "yaml"]) == 2
    assert capsys.readouterr().err == "oomdoctor: error: unknown --format 'yaml' (choose text, json)\n"


def test_rules_show_prints_the_toml_its_header_names(capsys: pytest.CaptureFixture[str]) -> None:
    out = _out(["rules", "show", "vllm.v1.kv-cache.max-len-exceeds"], capsys)
    header, _nl, text = out.partition("\n")
    source, _sep, line = header.removeprefix("# ").rpartition(", line ")
    assert source == "rules/vllm.toml" or source.endswith("/rules/vllm.toml")
    file_lines = (ROOT / "rules" / "vllm.toml").read_text(encoding="utf-8").splitlines()
    first = int(line)
    assert text.splitlines() == file_lines[first - 1 : first - 1 + len(text.splitlines())]  # as written
    rule = toml_module().loads(text)["rule"]
    assert len(rule) == 1 and rule[0]["id"] == "vllm.v1.kv-cache.max-len-exceeds"
    assert len(rule[0]["match"]) >= 1  # with its examples
    data = json.loads(_out(["rules", "show", "vllm.v1.kv-cache.max-len-exceeds", "-f", "json"], capsys))
    assert data["id"] == "vllm.v1.kv-cache.max-len-exceeds"


def test_every_rule_reads_back_from_its_file() -> None:
    pack = default_pack()
    for r in pack.rules:
        block = rule_block(r.source, r.id)
        assert block is not None, r.id
        assert toml_module().loads(block[1])["rule"][0]["id"] == r.id


def test_rule_block_keeps_bracketed_lines_inside_strings(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text(
        '[[rule]]\nid = "a"\n\n[[rule.match]]\nlog = \'\'\'first\n[rank0]: CUDA out of memory\'\'\'\n\n'
        '# the next one\n[[rule]]\nid = "b"\n', encoding="utf-8",
    )
    first, text = rule_block(str(path), "a") or (0, "")
    assert first == 1
    assert text == "[[rule]]\nid = \"a\"\n\n[[rule.match]]\nlog = '''first\n[rank0]: CUDA out of memory'''"
    assert rule_block(str(path), "b") == (9, '[[rule]]\nid = "b"')
    assert rule_block(str(path), "c") is None


def test_fit_takes_f(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_out(["fit", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A10G", "-f", "json"], capsys))
    # vLLM's "Maximum concurrency": KV tokens / max model len, two decimals
    assert data["fits"] is True and data["concurrency"] == round(data["kv_cache_tokens"] / 32768, 2) == 3.76


def test_fit_says_one_request_in_the_singular(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = _out(["fit", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A10G", "--max-model-len", "65536"], capsys)
    assert "FITS: 1 full-length request at a time (65536 tokens, 3.50 GiB of KV cache; the pool holds 6.58 GiB).\n" in out


@pytest.mark.parametrize(("errors", "warnings", "text"), [
    (1, 0, "1 out-of-memory failure, 0 warnings"),
    (2, 1, "2 out-of-memory failures, 1 warning"),
    (0, 1, "no out-of-memory failure; 1 memory warning"),
    (0, 3, "no out-of-memory failure; 3 memory warnings"),
    (0, 0, "no out-of-memory failure found"),
])
def test_counts_in_words(errors: int, warnings: int, text: str) -> None:
    assert result_text(errors, warnings) == text


@pytest.mark.parametrize(("args", "first"), [
    (["--show-completion", "zsh"], "#compdef oomdoctor"),
    (["--show-completion=zsh"], "#compdef oomdoctor"),
    (["--show-completion", "fish"], "complete --command oomdoctor --no-files"),
    (["--show-completion", "bash"], "_oomdoctor_completion() {"),
])
def test_show_completion_for_the_shell_named(args: list[str], first: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _out(args, capsys).startswith(first)


def test_show_completion_for_an_unknown_shell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lang", "en", "--show-completion=tcsh"]) == 2
    assert capsys.readouterr().err == (
        "oomdoctor: error: --show-completion: unknown shell 'tcsh' (choose bash, zsh, fish, powershell, pwsh)\n"
    )


def test_the_gpu_count_says_where_it_came_from(capsys: pytest.CaptureFixture[str]) -> None:
    """"2 GPUs are available (hint)" named an option the user of fit never typed: fit says
    --gpus, a diagnosis says --hint gpus=N, in either language."""
    fit = ["fit", "--model", "meta-llama/Llama-3.1-70B", "--gpu", "A10G", "--gpus", "2"]
    assert "2 GPUs are available (--gpus 2)" in " ".join(_out(fit, capsys, 1).split())
    assert main(["--lang", "ja", *fit]) == 1
    assert "利用できるGPUは2台です（--gpus2で指定）" in "".join(capsys.readouterr().out.split())
    log = str(ROOT / "fixtures" / "vllm" / "seed-001.log")
    out = " ".join(_out(["--plain", "--hint", "gpus=2", log], capsys, 1).split())
    assert "2 GPUs are available (--hint gpus=2)" in out and "(hint)" not in out
