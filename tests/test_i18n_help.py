"""``--help`` in the user's language (issue 18): the language is known before typer builds the
help, every help text of every command and option has its Japanese, and English stays as it was.

``--update-goldens`` rewrites tests/snapshots/ja/help-*.txt.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from oomdoctor.cli import main
from oomdoctor.cli.diagnose import HINT_KEYS
from oomdoctor.cli.help_text import CLICK_WORDS, walk
from oomdoctor.i18n import translations
from oomdoctor.render import FORMATS
from oomdoctor.render.text import cell_len

GOLDENS = Path(__file__).resolve().parent / "snapshots" / "ja"
#: every command with a help page of its own
COMMANDS = [[], ["rules"], ["rules", "list"], ["rules", "show"], ["rules", "test"], ["run"], ["fit"], ["serve"]]
LOCALE_VARS = ("OOMDOCTOR_LANG", "LC_ALL", "LC_MESSAGES", "LANG")


def _help(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
          **env: str) -> str:
    for name in LOCALE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert main(args) == 0
    return capsys.readouterr().out


def _apps() -> list[Any]:
    from oomdoctor.cli import diagnose, tools

    return [get_command(diagnose.app), get_command(tools.app)]


def _help_texts() -> set[str]:
    """Every help text the commands and their options declare, and the words click adds."""
    texts = set(CLICK_WORDS)
    for app in _apps():
        for cmd in walk(app):
            texts.update(t for t in [cmd.help, *(getattr(p, "help", None) for p in cmd.params)] if t)
    return texts


def test_every_help_text_has_its_japanese() -> None:
    ja = translations("ja")
    texts = _help_texts()
    assert len(texts) > 50  # all commands and options were found
    missing = sorted(t for t in texts if ja.gettext(t) == t)
    assert missing == [], missing


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "diagnose")
def test_both_ways_of_choosing_japanese_print_the_same_japanese_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    by_flag = _help(monkeypatch, capsys, ["--lang", "ja", *command, "--help"])
    assert _help(monkeypatch, capsys, ["--lang=ja", *command, "--help"]) == by_flag
    assert _help(monkeypatch, capsys, [*command, "--help"], LANG="ja_JP.UTF-8") == by_flag
    assert _help(monkeypatch, capsys, [*command, "--help"], OOMDOCTOR_LANG="ja", LANG="C") == by_flag
    assert by_flag.startswith(f"使い方：oomdoctor {' '.join(command)}".rstrip())
    assert "オプション：" in by_flag and "このヘルプを表示して終了する。" in by_flag
    # every line fits 80 terminal cells, a wide character counting two (click itself counts one)
    assert max(cell_len(line) for line in by_flag.splitlines()) <= 80, by_flag
    # no English sentence is left: once the option names, metavars and file names are taken
    # out, what remains in a line is Japanese or a value (a flag, a path, a number)
    english = _help(monkeypatch, capsys, [*command, "--help"])
    assert english.startswith("Usage: ") and "Show this message and exit." in english
    assert cell_len(english) == len(english)  # English help has no wide character
    for text in _help_texts():
        for sentence in re.findall(r"[A-Z][a-z]+(?: [a-z]+){2,}", text):
            assert sentence not in by_flag, (sentence, by_flag)


def test_english_help_is_unchanged_by_the_language_machinery(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _help(monkeypatch, capsys, ["--help"], LANG="en_US.UTF-8")
    assert out == _help(monkeypatch, capsys, ["--lang", "en", "--help"], LANG="ja_JP.UTF-8")
    assert out.startswith("Usage: oomdoctor [OPTIONS] [FILE]...\n\n  Diagnose GPU out-of-memory failures")
    assert "\nOptions:\n" in out
    assert re.search(r"--fail-on LEVEL +Exit 1 on: error or warning\. +\[default: error\]", out)


def test_the_help_names_every_format_and_hint_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The --format and --hint help texts are literals (so the catalog can hold them): they must
    keep naming what the code accepts."""
    out = " ".join(_help(monkeypatch, capsys, ["--help"]).split())
    assert f"One of: {', '.join(FORMATS)}." in out
    assert "KEY one of: " + ", ".join(HINT_KEYS) + "." in out


@pytest.mark.parametrize("command", [[], ["fit"]], ids=["diagnose", "fit"])
def test_japanese_help_goldens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str], update_goldens: bool
) -> None:
    out = _help(monkeypatch, capsys, ["--lang", "ja", *command, "--help"])
    golden = GOLDENS / f"help-{'-'.join(command) or 'diagnose'}.txt"
    if update_goldens:
        golden.write_text(out, encoding="utf-8")
    assert out == golden.read_text(encoding="utf-8")
