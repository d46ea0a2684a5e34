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
