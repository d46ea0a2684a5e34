"""What the README promises a new user, checked against the code: the first command exits 1 on
purpose, the Python it needs, the --hint keys, shell completion and run's exit status."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from oomdoctor.cli.diagnose import HINT_KEYS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _oomdoctor(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, cwd=ROOT, timeout=120)


def test_the_first_command_exits_1_on_purpose() -> None:
    first = README.split("```bash\n", 1)[1].split("\n", 1)[0]
    m = re.fullmatch(r"python3 -m pip install \. && oomdoctor (\S+)", first)
    assert m is not None, first
    assert (ROOT / m.group(1)).is_file()
    assert "exits 1 on purpose" in README
    done = _oomdoctor("--plain", m.group(1))
    assert done.returncode == 1 and b"out-of-memory failure" in done.stdout


def test_the_python_it_needs_is_the_packages() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'requires-python = ">=3.10"' in pyproject
    assert "needs Python ≥ 3.10" in README and "python3 -m venv .venv" in README


def test_every_hint_key_is_in_the_readme() -> None:
    bullet = README.split("**`--hint KEY=VALUE`**", 1)[1].split("\n- ", 1)[0]
    for key in HINT_KEYS:
        assert f"`{key}`" in bullet, key


def test_completion_and_run_exit_status_are_documented_as_they_work() -> None:
    assert "oomdoctor --install-completion" in README and "oomdoctor --show-completion bash" in README
    help_text = " ".join(_oomdoctor("--help").stdout.decode().split())
    assert "--install-completion" in help_text and "--show-completion" in help_text
    row = next(line for line in README.splitlines() if line.startswith("| `oomdoctor run -- COMMAND`"))
    assert "the command's own exit status" in row and "--exit-status findings" in row
    assert "--exit-status" in " ".join(_oomdoctor("run", "--help").stdout.decode().split())


def test_brief_reads_as_the_readme_shows() -> None:
    block = README.split("- **`--brief`**", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    example = [line.strip() for line in block.splitlines() if line.strip()]
    done = _oomdoctor("--brief", "--lang", "en", "fixtures/vllm/vllm-054.log")
    assert done.returncode == 1
    assert done.stdout.decode().replace("fixtures/vllm/vllm-054.log", "server.log").splitlines() == example


def test_the_config_file_example_is_one_oomdoctor_reads(tmp_path: Path) -> None:
    import os

    block = README.split("- **A config file**", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "oomdoctor.toml"
    path.write_text(block.replace("\n  ", "\n"), encoding="utf-8")
    env = {**os.environ, "OOMDOCTOR_CONFIG": str(path), "OOMDOCTOR_LANG": "en"}
    done = subprocess.run([sys.executable, "-m", "oomdoctor", "fixtures/vllm/vllm-054.log"], capture_output=True,
                          cwd=ROOT, timeout=120, env=env)
    assert done.returncode == 1 and done.stderr == b""
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 2 and lines[0].startswith("fixtures/vllm/vllm-054.log:4: ")  # brief = true


def test_quiet_puts_the_report_on_stdout_as_the_readme_says() -> None:
    assert "oomdoctor -q -f json | jq .summary" in README
    done = subprocess.run([sys.executable, "-m", "oomdoctor", "-q", "-f", "json"], capture_output=True, cwd=ROOT,
                          timeout=120, input=(ROOT / "fixtures/vllm/vllm-054.log").read_bytes())
    import json

    assert json.loads(done.stdout)["summary"] == {"errors": 1, "warnings": 0, "cut_lines": 0}


def test_streamed_jsonl_is_documented() -> None:
    bullet = " ".join(README.split("- **`-f jsonl`**", 1)[1].split("\n- ", 1)[0].split())
    assert "each as soon as the finding is final" in bullet
    assert "`-f json` writes the whole report so far" in bullet


def _parses_as(language: str, text: str) -> object:
    """``text`` parsed as ``language`` says: shell words (shlex), Python (ast), JSON, YAML (PyYAML,
    a test dependency) or TOML (tomllib); raises when it does not parse."""
    import ast
    import json
    import shlex

    import yaml

    from oomdoctor.cache import toml_module

    if language == "shell":
        words = shlex.split(text)
        assert words, text
        return words
    if language == "python":
        return ast.parse(text)
    if language == "json":
        return json.loads(text)
    if language == "yaml":
        return yaml.safe_load(text)
    if language == "toml":
        return toml_module().loads(text)
    raise AssertionError(f"unknown language {language!r}")


def test_every_code_line_of_the_fixtures_remedies_parses_as_what_it_says() -> None:
    """Each code line of every fixture's remedies (``remedy.code``) says its language and where it
    runs, and parses as that language: shell words (shlex), Python (ast), JSON, YAML, TOML. Every
    key it sets is one of the remedy's, and each env, flags and code-like setting key is on a line;
    a setting said in words ("half of the current value", "an AWQ or GPTQ 4-bit checkpoint of ...")
    is on none. A command (``remedy.command``, ``run``) is shell words with no [REDACTED] inside (a
    redacted secret is an environment variable's reference), and the Python of a ``python -c``
    parses (ast)."""
    import ast
    import json
    import shlex

    from oomdoctor.advisor.code_lines import is_code_setting, is_words
    from oomdoctor.render.common import prose_settings
    from oomdoctor.report import Remedy

    seen: dict[str, int] = {}
    prose = commands = python = 0
    for golden in sorted((ROOT / "fixtures").glob("*/*.expected.json")):
        for finding in json.loads(golden.read_text(encoding="utf-8")).get("findings", []):
            for r in finding.get("remedies", []):
                remedy = Remedy.model_validate(r)
                keys: set[str] = set()
                for line in remedy.code:
                    assert line.where, (golden.name, line)
                    parsed = _parses_as(line.language, line.text)
                    seen[line.language] = seen.get(line.language, 0) + 1
                    keys.update(line.keys)
                    if line.language == "shell":
                        # an env line is an export; a flags line has flags only (no config setting)
                        assert (parsed[0] == "export") == (line.where == "environment"), (golden.name, line)
                    if line.language in ("json", "yaml"):
                        assert isinstance(parsed, dict), (golden.name, line)
                    if line.language == "python":
                        assert isinstance(parsed.body[0], ast.Expr), (golden.name, line)  # one call
                coded = {k for k, v in [*remedy.env.items(), *remedy.flags.items()] if not is_words(v)}
                assert coded <= keys, (golden.name, remedy.id)
                for key, value in [*remedy.env.items(), *remedy.flags.items()]:
                    if is_words(value):  # a flag or variable whose value is words: prose, on no line
                        prose += 1
                        assert key not in keys and (key, value) in prose_settings(remedy), (golden.name, key)
                assert keys <= set(remedy.env) | set(remedy.flags) | set(remedy.settings), (golden.name, remedy.id)
                for key, value in remedy.settings.items():
                    if not is_code_setting(key, value) and key != "from_pretrained":
                        prose += 1
                        assert key not in keys and (key, value) in prose_settings(remedy), (golden.name, key)
                for line in [remedy.command or "", *(s.command for s in remedy.run)]:
                    if line:
                        commands += 1
                        words = shlex.split(line)
                        assert words, (golden.name, line)
                        assert "[REDACTED]" not in line, (golden.name, line)
                        for i, word in enumerate(words[:-2]):
                            if word.rsplit("/", 1)[-1].startswith("python") and words[i + 1] == "-c":
                                python += 1
                                ast.parse(words[i + 2])
    assert seen.get("shell", 0) > 100 and seen.get("python", 0) > 20, seen
    assert seen.get("json", 0) > 5 and seen.get("yaml", 0) > 2, seen
    assert prose > 20 and commands > 20 and python > 0


def test_the_code_lines_say_where_they_run() -> None:
    """A setting goes where its product reads it: a keyword of vLLM's LLM(...), a DeepSpeed JSON key
    (nested), a Kubernetes limit (YAML); an env variable is an export; flags are their program's."""
    import json

    import yaml

    from oomdoctor.advisor.code_lines import code_lines
    from oomdoctor.report import Remedy

    llm = code_lines(Remedy(id="vllm.x", title="t", settings={"max_model_len": "8192", "enforce_eager": "True"}),
                     "vllm-python", "vllm")
    assert [(c.language, c.where, c.text) for c in llm] == [
        ("python", "LLM", "LLM(..., max_model_len=8192, enforce_eager=True)")]
    ds = code_lines(Remedy(id="training.x", title="t", settings={"zero_optimization.stage": "3", "bf16.enabled": "true"}),
                    "deepspeed", "pytorch")
    assert json.loads(ds[0].text) == {"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}
    host = code_lines(Remedy(id="host.container-memory-limit", title="t", flags={"--memory": "20g"},
                             env={"X_Y": "a:b"}, settings={"resources.limits.memory": "20Gi"}), "vllm-serve", "vllm")
    assert [(c.language, c.where) for c in host] == [
        ("shell", "environment"), ("shell", "docker run"), ("yaml", "Kubernetes container spec")]
    assert host[0].text == "export X_Y=a:b" and host[1].text == "--memory 20g"
    assert yaml.safe_load(host[2].text) == {"resources": {"limits": {"memory": "20Gi"}}}
    flags = code_lines(Remedy(id="vllm.x", title="t", flags={"--max-model-len": "8192"}), "vllm-serve", "vllm")
    assert [(c.where, c.text) for c in flags] == [("vllm serve", "--max-model-len 8192")]


def test_a_setting_in_words_is_prose_not_code() -> None:
    from oomdoctor.render.common import remedy_snippet, setting_lines
    from oomdoctor.render.text import render_findings_text
    from oomdoctor.report import Finding, Location, Remedy

    r = Remedy(id="r", title="Halve the batch", settings={"num_workers": "2", "batch_size": "half of it",
                                                           "model": "an AWQ or GPTQ 4-bit checkpoint of x/y"})
    assert remedy_snippet(r) == "DataLoader(..., num_workers=2)"
    assert setting_lines(r) == ["batch_size: half of it", "model: an AWQ or GPTQ 4-bit checkpoint of x/y"]
    # TrainingArguments only where the program is a Trainer's: with no product known, prose
    hf = Remedy(id="r", title="Recompute activations", settings={"gradient_checkpointing": "true"})
    assert remedy_snippet(hf) == "" and setting_lines(hf) == ["gradient_checkpointing: true"]
    f = Finding(rule="x", kind="torch.cuda-oom", engine="pytorch", severity="error", title="t", message="m",
                location=Location(source="a.log", line=1, end_line=1), remedies=[r])
    lines = render_findings_text([f], width=100).splitlines()
    assert "     Python:" in lines and "       DataLoader(..., num_workers=2)" in lines
    assert "     batch_size: half of it" in lines


def test_a_flag_and_a_config_setting_never_share_a_code_line() -> None:
    from oomdoctor.render.common import snippet_lines
    from oomdoctor.render.markdown import remedy_code_markdown
    from oomdoctor.report import Remedy

    r = Remedy(id="host.container-memory-limit", title="Raise the limit", flags={"--memory": "20g"},
               settings={"resources.limits.memory": "20Gi"})
    assert snippet_lines(r) == ["--memory 20g", 'resources: {limits: {memory: "20Gi"}}']
    md = "\n".join(remedy_code_markdown(r))
    assert "   - flags of docker run:\n     ```shell\n     --memory 20g\n     ```" in md
    assert "   - YAML, Kubernetes container spec:\n     ```yaml\n" in md


def test_training_arguments_only_for_a_trainer_program() -> None:
    """The generic training keys are TrainingArguments code in a transformers Trainer's program and
    prose in a plain PyTorch one (review C: a bare PyTorch traceback was told TrainingArguments)."""
    from oomdoctor.advisor.code_lines import code_lines
    from oomdoctor.report import Remedy

    r = Remedy(id="training.gradient-checkpointing", title="t", settings={"gradient_checkpointing": "true"})
    assert [c.text for c in code_lines(r, product="transformers")] == ["TrainingArguments(..., gradient_checkpointing=True)"]
    assert code_lines(r, product="pytorch") == [] and code_lines(r, product=None) == []
