"""``--brief`` (one line per finding) and the config file of default hints and output options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomdoctor.cli import main
from oomdoctor.cli.config_file import ConfigFileError, config_path, load_config

ROOT = Path(__file__).resolve().parent.parent
KV = ROOT / "fixtures" / "vllm" / "vllm-054.log"  # vllm.v1.kv-cache.max-len-exceeds, line 4
XPU = ROOT / "fixtures" / "pytorch" / "new-009.log"  # torch.xpu-oom: a command, no flags

KV_BRIEF = (
    f"{KV}:4: vllm.kv-cache.max-len-exceeds: The KV cache holds 28.57 GiB but one 202752-token sequence "
    "needs 71.16 GiB. Fix: Limit the context to 81392 tokens: --max-model-len 81392"
)


def test_brief_is_one_line_per_finding_then_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lang", "en", "--brief", str(KV), str(XPU)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[0] == KV_BRIEF
    assert lines[1].startswith(f"{XPU}:2: torch.xpu-oom: The driver reports 5.65 GiB of 5.65 GiB free")
    assert lines[1].endswith(
        "Fix: Check the driver and the device before tuning: the memory was free: sycl-ls; "
        "python -c 'import torch; print(torch.__version__, torch.xpu.get_device_properties(0))'"
    )
    assert lines[2] == "oomdoctor: 2 out-of-memory failures, 0 warnings."


def test_brief_in_a_pipe_under_q_on_stdout() -> None:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), "OOMDOCTOR_LANG": "en"}
    proc = subprocess.run([sys.executable, "-m", "oomdoctor", "-q", "--brief"], input=KV.read_bytes(),
                          capture_output=True, env=env, timeout=60)
    assert proc.returncode == 1 and proc.stderr == b""
    assert proc.stdout.decode().splitlines() == [
        KV_BRIEF.replace(str(KV), "<stdin>"), "oomdoctor: 1 out-of-memory failure, 0 warnings.",
    ]


def test_brief_with_another_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lang", "en", "--brief", "-f", "json", str(KV)]) == 2
    assert capsys.readouterr().err == "oomdoctor: error: --brief writes text; it does not combine with --format json\n"


def test_brief_in_japanese(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lang", "ja", "--brief", str(KV)]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{KV}:4: vllm.kv-cache.max-len-exceeds: ")
    assert "対処：" in first and first.endswith("--max-model-len 81392")


# -- the config file -------------------------------------------------------------------------------


def _config(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "oomdoctor.toml"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv("OOMDOCTOR_CONFIG", str(path))
    monkeypatch.delenv("OOMDOCTOR_LANG", raising=False)
    return path


def test_config_gives_output_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _config(tmp_path, '[output]\nbrief = true\nlang = "en"\n', monkeypatch)
    assert main([str(KV)]) == 1
    assert capsys.readouterr().out.splitlines()[0] == KV_BRIEF
    assert main(["-f", "json", str(KV)]) == 1  # the command line's format wins over the file's brief
    assert json.loads(capsys.readouterr().out)["summary"]["errors"] == 1


def test_config_format_and_fail_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    _config(tmp_path, '[output]\nformat = "jsonl"\nfail-on = "warning"\n', monkeypatch)
    assert main([str(KV)]) == 1
    assert [json.loads(x)["type"] for x in capsys.readouterr().out.splitlines()] == ["finding", "summary"]
    assert main(["--format", "text", "--fail-on", "error", str(KV)]) == 1
    assert capsys.readouterr().out.endswith("oomdoctor: 1 out-of-memory failure, 0 warnings.\n")


def test_config_hints_are_defaults_and_a_hint_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config(tmp_path, '[hints]\ngpu = "A10G"\ngpus = 2\n', monkeypatch)
    cfg = load_config()
    assert cfg.hints == {"gpu": "A10G", "gpus": "2"}
    seen: list[dict[str, str]] = []
    import oomdoctor.cli.diagnose as diagnose

    real = diagnose._file_mode

    def spy(paths, pack, hints, *rest):  # type: ignore[no-untyped-def]
        seen.append(dict(hints))
        return real(paths, pack, hints, *rest)

    monkeypatch.setattr(diagnose, "_file_mode", spy)
    assert main(["-f", "json", "--hint", "gpus=4", str(KV)]) == 1
    assert seen == [{"gpu": "A10G", "gpus": "4"}]


@pytest.mark.parametrize(("text", "message"), [
    ('[hints]\ngpus = "two"\n', "hint gpus=two: expected a whole number of GPUs from 1 to 4096, e.g. gpus=2"),
    ('[hints]\ncolour = "blue"\n', "unknown hint key 'colour' (known: gpus, gpu, gpu-memory, model, model-config, "
                                   "vllm-version, version)"),
    ('[display]\nx = 1\n', "unknown section 'display' (known: [hints], [output])"),
    ('[output]\nbrief = "yes"\n', "[output] brief takes true or false, got 'yes'"),
    ('[output]\nformat = "html"\n', "[output] format takes one of text, json, jsonl, markdown, slack, got 'html'"),
    ('[output]\ncolour = true\n', "unknown [output] key 'colour' (known: format, brief, plain, fail-on, lang)"),
])
def test_a_bad_config_is_a_usage_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = _config(tmp_path, text, monkeypatch)
    assert main(["--lang", "en", str(KV)]) == 2
    assert capsys.readouterr().err == f"oomdoctor: error: config {path}: {message}\n"


def test_not_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _config(tmp_path, "[output\n", monkeypatch)
    with pytest.raises(ConfigFileError, match=rf"^config {path}: not TOML: "):
        load_config()


def test_where_the_config_file_is_found(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    sub = project / "src" / "deep"
    sub.mkdir(parents=True)
    home = tmp_path / "xdg"
    (home / "oomdoctor").mkdir(parents=True)
    user = home / "oomdoctor" / "config.toml"
    user.write_text("")
    env = {"XDG_CONFIG_HOME": str(home)}
    assert config_path(env, sub) == user  # none in the project: the user's
    (project / "oomdoctor.toml").write_text("")
    assert config_path(env, sub) == project / "oomdoctor.toml"  # the project's, found from below
    (tmp_path / "oomdoctor.toml").write_text("")  # above the project's root: not looked at
    (project / "oomdoctor.toml").unlink()
    assert config_path(env, sub) == user
    assert config_path({**env, "OOMDOCTOR_CONFIG": "/x/c.toml"}, sub) == Path("/x/c.toml")
    user.unlink()
    assert config_path(env, sub) is None
