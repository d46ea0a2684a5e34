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


def test_every_code_line_of_the_fixtures_remedies_is_shell_words() -> None:
    """Each command and flag snippet of every fixture's remedies parses as shell words (shlex), with
    no [REDACTED] inside a command: a redacted secret is an environment variable's reference. A
    setting on a code line is ``name=value`` with a one-word value; a setting said in words
    ("half of the current value", "an AWQ or GPTQ 4-bit checkpoint of ...") is never on one. The
    Python of a ``python -c`` parses (ast)."""
    import ast
    import json
    import shlex

    from oomdoctor.render.common import is_code_setting, snippet_lines
    from oomdoctor.report import Remedy

    seen = prose = python = 0
    for golden in sorted((ROOT / "fixtures").glob("*/*.expected.json")):
        for finding in json.loads(golden.read_text(encoding="utf-8")).get("findings", []):
            for r in finding.get("remedies", []):
                remedy = Remedy.model_validate(r)
                codes = snippet_lines(remedy)
                snippet = "\n".join(codes)
                # a command line's flags and a config file's settings never share a line
                for code in codes:
                    words = shlex.split(code)
                    flags = any(w.startswith("-") for w in words)
                    settings = any("=" in w and not w.startswith("-") and not w.split("=")[0].isupper() for w in words)
                    assert not (flags and settings), (golden.name, code)
                for key, value in remedy.settings.items():
                    if is_code_setting(key, value):
                        assert f"{key}={value}" in shlex.split(snippet), (golden.name, key, value)
                    else:
                        prose += 1
                        assert f"{key}={value}" not in snippet, (golden.name, key, value)
                for line in [*codes, remedy.command or "", *(s.command for s in remedy.run)]:
                    if line:
                        seen += 1
                        words = shlex.split(line)
                        assert words, (golden.name, line)
                        assert "[REDACTED]" not in line, (golden.name, line)
                        for i, word in enumerate(words[:-2]):
                            if word.rsplit("/", 1)[-1].startswith("python") and words[i + 1] == "-c":
                                python += 1
                                ast.parse(words[i + 2])
    assert seen > 100 and prose > 20 and python > 0


def test_a_setting_in_words_is_prose_not_code() -> None:
    from oomdoctor.render.common import remedy_snippet, setting_lines
    from oomdoctor.render.text import render_findings_text
    from oomdoctor.report import Finding, Location, Remedy

    r = Remedy(id="r", title="Halve the batch", settings={"gradient_checkpointing": "true", "batch_size": "half of it",
                                                           "model": "an AWQ or GPTQ 4-bit checkpoint of x/y"})
    assert remedy_snippet(r) == "gradient_checkpointing=true"
    assert setting_lines(r) == ["batch_size: half of it", "model: an AWQ or GPTQ 4-bit checkpoint of x/y"]
    f = Finding(rule="x", kind="torch.cuda-oom", engine="pytorch", severity="error", title="t", message="m",
                location=Location(source="a.log", line=1, end_line=1), remedies=[r])
    lines = render_findings_text([f], width=100).splitlines()
    assert "       gradient_checkpointing=true" in lines and "     batch_size: half of it" in lines


def test_a_flag_and_a_config_setting_never_share_a_code_line() -> None:
    from oomdoctor.render.common import remedy_headline, snippet_lines
    from oomdoctor.report import Remedy

    r = Remedy(id="host.container-memory-limit", title="Raise the limit", flags={"--memory": "20g"},
               settings={"resources.limits.memory": "20Gi"})
    assert snippet_lines(r) == ["--memory 20g", "resources.limits.memory=20Gi"]
    assert "`--memory 20g` · `resources.limits.memory=20Gi`" in remedy_headline(r, lambda c: f"`{c}`")
