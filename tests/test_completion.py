"""Option values complete on Tab (issue 37): formats, languages, the catalog's GPUs and models, rule
ids, hint keys and fixed choices, through typer's own completion protocol, the one the scripts of
``--show-completion bash|zsh|fish`` call (``_OOMDOCTOR_COMPLETE`` and the shell's words)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.advisor.catalog import gpus, models
from oomdoctor.cli import complete

ROOT = Path(__file__).resolve().parent.parent


def _complete(shell: str, line: str) -> list[str]:
    """What the shell's completion script gets back for ``line`` (the cursor at its end)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("_OOMDOCTOR", "COMP_", "_TYPER"))}
    if shell == "bash":
        words = line.split() + ([""] if line.endswith(" ") else [])
        env.update(_OOMDOCTOR_COMPLETE="complete_bash", COMP_WORDS=line, COMP_CWORD=str(len(words) - 1))
    else:
        env.update(_OOMDOCTOR_COMPLETE=f"complete_{shell}", _TYPER_COMPLETE_ARGS=line,
                   _TYPER_COMPLETE_FISH_ACTION="get-args")
    done = subprocess.run([sys.executable, "-m", "oomdoctor"], capture_output=True, cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    if shell == "zsh":  # _arguments '*: :(("a" "b"))' (with descriptions: "a":"help")
        import re

        return re.findall(r'"([^"]+)"', out.split("((", 1)[1]) if "((" in out else []
    return [w.split("\t")[0] for w in out.splitlines() if w]


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("oomdoctor -f ", ["text", "json", "jsonl", "markdown", "slack"]),
        ("oomdoctor --format j", ["json", "jsonl"]),
        ("oomdoctor --lang ", ["en", "ja"]),
        ("oomdoctor --fail-on w", ["warning"]),
        ("oomdoctor --hint gpu", ["gpus=", "gpu=", "gpu-memory="]),
        ("oomdoctor --hint gpu=H10", ["gpu=H100"]),
        ("oomdoctor run --exit-status f", ["findings"]),
        ("oomdoctor fit -f ", ["text", "json"]),
        ("oomdoctor fit --kv-cache-dtype ", ["auto", "fp8"]),
        ("oomdoctor rules list -f j", ["json"]),
        ("oomdoctor serve --log-level de", ["debug"]),
    ],
)
def test_option_values_complete_in_bash(line: str, want: list[str]) -> None:
    assert _complete("bash", line) == want


def test_catalog_names_and_rule_ids_complete() -> None:
    names = sorted({g.name for g in gpus()})
    assert _complete("bash", "oomdoctor fit --gpu ") == names
    assert _complete("bash", "oomdoctor fit --gpu A10") == [n for n in names if n.startswith("A10")]
    assert "meta-llama/Llama-3.1-8B" in _complete("bash", "oomdoctor fit --model meta-llama/")
    ids = _complete("bash", "oomdoctor rules show torch.cuda-o")
    assert "torch.cuda-oom" in ids and all(i.startswith("torch.cuda-o") for i in ids)


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_get_the_same_values(shell: str) -> None:
    assert _complete(shell, "oomdoctor -f m") == ["markdown"]
    assert _complete(shell, "oomdoctor fit --gpu H10") == _complete("bash", "oomdoctor fit --gpu H10")


def test_completers_offer_what_starts_with_the_typed_text() -> None:
    assert complete.choices("auto", "fp8")("f") == ["fp8"]
    assert complete.models("") == sorted({m.name for m in models()})
    assert complete.hints("model") == ["model=", "model-config="]
    assert complete.hints("gpu=zzz") == []
