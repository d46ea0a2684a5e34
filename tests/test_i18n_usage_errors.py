"""Usage errors in the user's language (issue 18): what click and typer print for a bad command
line, and the CLI's own errors before the report, are Japanese under ``--lang ja`` and under
``LANG=ja_JP.UTF-8`` alike, still one line and exit 2; English stays as it was.

The vendored click writes its messages as f-strings; the last test reads its source and fails
when it can print a form :data:`oomdoctor.cli.usage_errors.TEMPLATES` does not know.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from oomdoctor.cli import main
from oomdoctor.cli.usage_errors import TEMPLATES, pattern_of, translate
from oomdoctor.i18n import translations, use_lang

LOCALE_VARS = ("OOMDOCTOR_LANG", "LC_ALL", "LC_MESSAGES", "LANG")

#: (arguments, the English line, the Japanese line)
CASES: list[tuple[list[str], str, str]] = [
    (["--bogus"], "No such option: --bogus", "--bogusというオプションはありません"),
    (["fit", "--bogus"], "No such option: --bogus (Possible options: --gpu, --gpus)",
     "--bogusというオプションはありません（使えるオプション：--gpu, --gpus）"),
    (["rules", "bogus"], "No such command 'bogus'.", "'bogus'というコマンドはありません。"),
    (["rules", "show"], "Missing argument 'RULE_ID'.", "引数'RULE_ID'が指定されていません。"),
    (["rules", "list", "extra"], "Got unexpected extra argument(s) (extra)", "余分な引数があります（extra）"),
    (["x.log", "--format"], "Option '--format' requires an argument.", "オプション'--format'には値が必要です。"),
    (["serve", "--insecure=maybe"], "Option '--insecure' does not take a value.",
     "オプション'--insecure'は値を取りません。"),
    (["serve", "--port", "abc"],
     "Invalid value for '--port': Input should be a valid integer, unable to parse string as an integer",
     "'--port'の値が不正です：整数を指定してください（文字列を整数として読めません）"),
    (["fit", "--gpu-memory-utilization", "abc"],
     "Invalid value for '--gpu-memory-utilization': Input should be a valid number, unable to parse string as a number",
     "'--gpu-memory-utilization'の値が不正です：数値を指定してください（文字列を数値として読めません）"),
    (["--format", "nope", "x.log"], "unknown --format 'nope' (choose text, json, jsonl, markdown, slack)",
     "--format 'nope'は使えません（text, json, jsonl, markdown, slackから選んでください）"),
    (["--hint", "nope", "x.log"], "--hint expects KEY=VALUE, got 'nope'",
     "--hintはKEY=VALUEの形で指定してください（指定値：'nope'）"),
    (["/nonexistent/x.log"], "/nonexistent/x.log: no such file", "/nonexistent/x.log：ファイルがありません"),
    (["serve", "--port", "99999"], "port must be 1..65535, got 99999", "ポートは1..65535で指定してください（指定値：99999）"),
    (["serve", "--log-level", "nope"], "unknown --log-level 'nope' (choose critical, error, warning, info, debug, trace)",
     "--log-level 'nope'は使えません（critical, error, warning, info, debug, traceから選んでください）"),
    (["fit"], "give --model-config config.json (or --model NAME from the catalog)",
     "--model-config config.json（またはカタログの--model NAME）を指定してください"),
    (["rules", "show", "nosuch"], "no rule with id 'nosuch' (see 'oomdoctor rules list')",
     "ID 'nosuch'のルールはありません（'oomdoctor rules list'を参照）"),
]


def _error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
           **env: str) -> str:
    for name in LOCALE_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize(("args", "english", "japanese"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_usage_error_in_japanese_and_english(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path, args: list[str], english: str, japanese: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert _error(monkeypatch, capsys, args) == f"oomdoctor: error: {english}\n"
    by_flag = _error(monkeypatch, capsys, ["--lang", "ja", *args])
    assert by_flag == f"oomdoctor: error: {japanese}\n"
    assert _error(monkeypatch, capsys, args, LANG="ja_JP.UTF-8") == by_flag


def test_a_directory_is_refused_in_japanese(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    assert _error(monkeypatch, capsys, [str(tmp_path)]) == f"oomdoctor: error: {tmp_path}: is a directory\n"
    assert _error(monkeypatch, capsys, [str(tmp_path)], LANG="ja_JP.UTF-8") == f"oomdoctor: error: {tmp_path}：ディレクトリです\n"


def test_an_unknown_lang_is_refused_in_the_environments_language(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(monkeypatch, capsys, ["--lang", "xx", "x.log"]) == (
        "oomdoctor: error: --lang: unknown language 'xx' (choose en, ja)\n")
    assert _error(monkeypatch, capsys, ["--lang", "xx", "x.log"], LANG="ja_JP.UTF-8") == (
        "oomdoctor: error: --lang: 言語'xx'には対応していません（en, jaから選んでください）\n")


def test_nested_reason_and_unknown_text() -> None:
    with use_lang("ja"):
        assert translate("Invalid value: Value must be an iterable.") == "値が不正です：値は反復可能でなければなりません。"
        assert translate("Missing argument 'X'. Choose from a, b.") == "引数'X'が指定されていません。Choose from a, b."
        assert translate("something click never says") == "something click never says"
    assert translate("No such option: --x") == "No such option: --x"


def test_every_template_has_japanese_with_the_same_placeholders() -> None:
    ja = translations("ja")
    for template in TEMPLATES:
        japanese = ja.gettext(template)
        assert japanese != template, template
        assert sorted(re.findall(r"\{(\w+)\}", japanese)) == sorted(re.findall(r"\{(\w+)\}", template)), template


def _vendored_click_sources() -> list[Path]:
    import typer

    root = Path(typer.__file__).parent
    return [*sorted((root / "_click").glob("*.py")), root / "core.py", root / "_coercion.py", root / "_param_types.py"]


#: exception classes whose message is a usage error the CLI prints
_ERRORS = {"UsageError", "BadParameter", "BadOptionUsage", "BadArgumentUsage", "NoSuchOption", "MissingParameter"}
#: click texts the CLI cannot print: oomdoctor declares no path-typed parameter (typer checks
#: existence of none) and opens its files itself (oomdoctor.inputs)
_UNREACHABLE = re.compile(r"^(?:\{\} \{\} (?:does not exist|is a file|is a directory|is not readable|is not writable)\."
                          r"|'\{\}': \{\})$")


def _shape(node: ast.expr) -> str | None:
    """The text of a message literal with ``{}`` for what is filled in; None when not a literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)  # type: ignore[misc]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        inner = _shape(node.func.value)
        return re.sub(r"\{[^{}]*\}", "{}", inner) if inner else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_" and node.args:
        return _shape(node.args[0])
    return None


def click_messages() -> set[str]:
    """The message literals the vendored click and typer raise as usage errors or pass to
    ``ctx.fail`` (``{}`` where a value is filled in)."""
    out: set[str] = set()
    for path in _vendored_click_sources():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in _ERRORS or name == "fail":
                    args = [*node.args, *(k.value for k in node.keywords if k.arg == "message")]
                    out.update(s for s in map(_shape, args) if s and " " in s)
    return out


def test_every_usage_error_of_the_vendored_click_has_a_template() -> None:
    """Fails when typer's click can print a usage error with no Japanese: each message literal
    of its source, with a sample value for each placeholder, must match a template."""
    shapes = click_messages()
    assert {"Option {} requires {}", "No such command {}."} <= shapes  # the scan sees the source
    patterns = [pattern_of(t) for t in TEMPLATES]
    missing = []
    for shape in sorted(shapes):
        if _UNREACHABLE.match(shape):
            continue
        sample = "Option 'X' requires an argument." if shape == "Option {} requires {}" else shape.replace("{}", "'X'")
        if not any(p.fullmatch(sample) for p in patterns):
            missing.append(shape)
    assert missing == []


def _composed() -> list[object]:
    from typer._click import exceptions as E

    return [
        E.NoSuchOption("--x"), E.NoSuchOption("--x", possibilities=["--a", "--b"]),
        E.MissingParameter(param_hint="'FILE'", param_type="argument"),
        E.MissingParameter(param_hint="'--model'", param_type="option"),
        E.MissingParameter(param_hint="'x'", param_type="parameter"),
        E.MissingParameter("Choose from a, b", param_hint="'FILE'", param_type="argument"),
        E.BadParameter("Value must be an iterable.", param_hint="'--port'"), E.BadParameter("Value must be an iterable."),
        E.BadOptionUsage("--gpu", "Option '--gpu' requires 2 arguments."),
    ]


@pytest.mark.parametrize("exc", _composed(), ids=lambda e: type(e).__name__)
def test_the_forms_click_composes_are_translated(exc: object) -> None:
    """What ``format_message`` of the vendored click's exceptions builds around a message."""
    message = exc.format_message()  # type: ignore[attr-defined]
    with use_lang("ja"):
        japanese = translate(message)
    assert japanese != message
    assert not re.search(r"\b(No such|Missing|Invalid|requires|Value must|Possible)\b", japanese), japanese


#: (environment, the English line, the Japanese line): the server's settings read from OOMDOCTOR_*
SERVER_ENV_CASES: list[tuple[dict[str, str], str, str]] = [
    ({"OOMDOCTOR_MAX_BODY": "abc"}, "OOMDOCTOR_MAX_BODY: not a size: 'abc'",
     "OOMDOCTOR_MAX_BODY：サイズとして読めません（指定値：'abc'）"),
    ({"OOMDOCTOR_MAX_BODY": "0"}, "OOMDOCTOR_MAX_BODY: must be a positive size, got '0'",
     "OOMDOCTOR_MAX_BODY：正のサイズを指定してください（指定値：'0'）"),
    ({"OOMDOCTOR_PORT": "x"}, "OOMDOCTOR_PORT: not a number: 'x'", "OOMDOCTOR_PORT：数値として読めません（指定値：'x'）"),
    ({"OOMDOCTOR_PORT": "-1"}, "OOMDOCTOR_PORT: must not be negative, got '-1'",
     "OOMDOCTOR_PORT：負の値は指定できません（指定値：'-1'）"),
    ({"OOMDOCTOR_CHAT_LANG": "xx"}, "chat language must be one of en, ja, got 'xx'",
     "チャットの言語はen, jaのいずれかを指定してください（指定値：'xx'）"),
    ({"OOMDOCTOR_HOST": "0.0.0.0"},
     "refusing to listen on 0.0.0.0 without an API token: set OOMDOCTOR_API_TOKEN (clients then send "
     "'Authorization: Bearer <token>'), listen on 127.0.0.1, or pass --insecure",
     "APIトークンなしで0.0.0.0では待ち受けません：OOMDOCTOR_API_TOKENを設定する（クライアントは"
     "'Authorization: Bearer <token>'を送ります）、127.0.0.1で待ち受ける、または--insecureを指定してください"),
]


@pytest.mark.parametrize(("env", "english", "japanese"), SERVER_ENV_CASES, ids=[next(iter(c[0])) + "=" + next(iter(c[0].values())) for c in SERVER_ENV_CASES])
def test_server_setting_errors_in_japanese_and_english(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str],
                                                       env: dict[str, str], english: str, japanese: str) -> None:
    assert _error(monkeypatch, capsys, ["serve"], **env) == f"oomdoctor: error: {english}\n"
    by_flag = _error(monkeypatch, capsys, ["--lang", "ja", "serve"], **env)
    assert by_flag == f"oomdoctor: error: {japanese}\n"
    assert _error(monkeypatch, capsys, ["serve"], LANG="ja_JP.UTF-8", **env) == by_flag
