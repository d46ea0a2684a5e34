"""Output for scripts (issue 37): the report on stdout under ``-q``, JSON Lines streamed as each
finding is final, one validation of hints for the CLI and HTTP, ``run --pty`` without CRLF, and the
server's body handling (curl's form type, an empty body) and start-up warnings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oomdoctor.cli import main
from oomdoctor.hints import HintError, validate_hints

ROOT = Path(__file__).resolve().parent.parent
KV = ROOT / "fixtures" / "vllm" / "vllm-054.log"  # vllm.v1.kv-cache.max-len-exceeds
KV_LOG = KV.read_bytes()
ENV = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def oomdoctor(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "oomdoctor", *args], input=stdin, capture_output=True, env=ENV, timeout=60
    )


# -- -q: nothing passed through, the report is the output ---------------------------------------------


def test_quiet_pipe_writes_the_json_report_on_stdout() -> None:
    proc = oomdoctor("-q", "-f", "json", stdin=KV_LOG)
    assert proc.returncode == 1
    assert proc.stderr == b""
    report = json.loads(proc.stdout)
    assert report["summary"] == {"errors": 1, "warnings": 0, "cut_lines": 0}
    assert report["findings"][0]["kind"] == "vllm.kv-cache.max-len-exceeds"


def test_quiet_pipe_writes_the_text_report_on_stdout() -> None:
    proc = oomdoctor("-q", stdin=KV_LOG)
    assert proc.returncode == 1
    assert proc.stderr == b""
    assert proc.stdout.endswith(b"oomdoctor: 1 out-of-memory failure, 0 warnings.\n")
    assert b"KV cache cannot hold one request" in proc.stdout


def test_pipe_without_quiet_keeps_stdout_for_the_input() -> None:
    proc = oomdoctor("-f", "json", stdin=KV_LOG)
    assert proc.stdout == KV_LOG
    assert json.loads(proc.stderr)["summary"] == {"errors": 1, "warnings": 0, "cut_lines": 0}


def test_quiet_with_output_writes_the_file_only(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = oomdoctor("-q", "-f", "json", "-o", str(out), stdin=KV_LOG)
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, b"", b"")
    assert json.loads(out.read_text())["summary"]["errors"] == 1


# -- -f jsonl: each record when it is final ------------------------------------------------------------


def test_jsonl_streams_the_finding_before_the_input_ends() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "oomdoctor", "-q", "-f", "jsonl"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(KV_LOG)
    proc.stdin.flush()  # no EOF: the record must come from the quiet timer
    line = proc.stdout.readline()  # blocks until the record is written (the test's timeout guards a hang)
    record = json.loads(line)
    assert record["type"] == "finding"
    assert record["kind"] == "vllm.kv-cache.max-len-exceeds"
    assert proc.poll() is None  # still reading its input
    proc.stdin.close()
    rest = proc.stdout.read()
    assert proc.wait(60) == 1
    tail = [json.loads(x) for x in rest.splitlines()]
    assert [r["type"] for r in tail] == ["summary"]  # the finding is not written twice
    assert tail[0]["summary"] == {"errors": 1, "warnings": 0, "cut_lines": 0}


def test_jsonl_in_a_pipe_streams_on_stderr_and_passes_the_input_through() -> None:
    proc = oomdoctor("-f", "jsonl", stdin=KV_LOG)
    assert proc.stdout == KV_LOG
    assert [json.loads(x)["type"] for x in proc.stderr.splitlines()] == ["finding", "summary"]


def test_jsonl_of_a_file_is_unchanged() -> None:
    proc = oomdoctor("-f", "jsonl", str(KV))
    assert [json.loads(x)["type"] for x in proc.stdout.splitlines()] == ["finding", "summary"]


def test_run_streams_jsonl() -> None:
    script = f"import sys,time; sys.stdout.write(open({str(KV)!r}).read()); sys.stdout.flush(); time.sleep(0.1)"
    proc = oomdoctor("run", "-f", "jsonl", "--", sys.executable, "-c", script)
    assert proc.stdout == KV_LOG
    assert [json.loads(x)["type"] for x in proc.stderr.splitlines()] == ["finding", "summary"]


# -- hints: one validation, the same messages -----------------------------------------------------------

BAD_HINTS = [
    ("gpus=two", "hint gpus=two: expected a whole number of GPUs from 1 to 4096, e.g. gpus=2"),
    ("gpus=0", "hint gpus=0: expected a whole number of GPUs from 1 to 4096, e.g. gpus=2"),
    ("gpu=Z999", "hint gpu=Z999: unknown GPU; give its memory instead, e.g. gpu-memory=24GiB"),
    ("gpu=H10", "hint gpu=H10: unknown GPU (did you mean H100, H20, A10?); or give its memory: gpu-memory=24GiB"),
    ("model-config=/nonexist.json", "hint model-config=/nonexist.json: No such file or directory"),
    ("gpu-memory=lots", "hint gpu-memory=lots: not a memory size, e.g. gpu-memory=24GiB or gpu-memory=80GB"),
    ("gpu-memory=-3GiB", "hint gpu-memory=-3GiB: not a memory size, e.g. gpu-memory=24GiB or gpu-memory=80GB"),
    ("gpu=", "hint gpu=: empty value"),
    ("colour=blue", "unknown hint key 'colour' (known: gpus, gpu, gpu-memory, model, model-config, "
                    "vllm-version, version)"),
]


@pytest.mark.parametrize(("hint", "message"), BAD_HINTS)
def test_a_bad_hint_exits_2_with_one_line(hint: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lang", "en", "--hint", hint, str(KV)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"oomdoctor: error: {message}\n"
    assert captured.out == ""


def test_run_checks_hints_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--lang", "en", "--hint", "gpus=two", "--", "true"]) == 2
    assert capsys.readouterr().err == f"oomdoctor: error: {BAD_HINTS[0][1]}\n"


def test_good_hints_are_normalised() -> None:
    assert validate_hints({"gpus": 2, "gpu": "h100", "gpu_memory": " 24GiB ", "version": 0.6}) == {
        "gpus": "2", "gpu": "h100", "gpu-memory": "24GiB", "version": "0.6",
    }
    with pytest.raises(HintError, match=r"^hint gpus: expected a string or a number, got True$"):
        validate_hints({"gpus": True})


def test_the_hint_reaches_the_advice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lang", "en", "-f", "json", "--hint", "gpus=2", "--hint", "gpu=A10G", str(KV)]) == 1
    assert json.loads(capsys.readouterr().out)["summary"]["errors"] == 1


# -- run --pty: the command's bytes as written -----------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="no pty")
def test_run_pty_passes_newlines_through_without_cr() -> None:
    proc = oomdoctor("run", "--pty", "--", sys.executable, "-c", "print('a'); print('b')")
    assert proc.returncode == 0
    assert proc.stdout == b"a\nb\n"


# -- server --------------------------------------------------------------------------------------------


def _client(**cfg: Any) -> Any:
    from fastapi.testclient import TestClient

    from oomdoctor.server import ServerConfig
    from oomdoctor.server.app import create_app

    return TestClient(create_app(ServerConfig(**cfg)))


@pytest.fixture(scope="module")
def http() -> Any:
    pytest.importorskip("fastapi")
    return _client()


def test_http_accepts_numbers_and_rejects_what_the_cli_rejects(http: Any) -> None:
    log = KV_LOG.decode()
    r = http.post("/v1/diagnose", json={"log": log, "hints": {"gpus": 2}})
    assert r.status_code == 200 and r.json()["summary"]["errors"] == 1
    for hint, message in BAD_HINTS:
        key, _eq, value = hint.partition("=")
        if key == "model-config":
            continue  # a file on the server: refused before any check (below)
        r = http.post("/v1/diagnose", json={"log": log, "hints": {key: value}})
        assert (r.status_code, r.json()) == (422, {"error": message}), hint
    r = http.post("/v1/diagnose", json={"log": log, "hints": {"model-config": "/nonexist.json"}})
    assert r.status_code == 422
    assert r.json() == {"error": "hint 'model-config' refers to a file on the server and is not accepted over HTTP"}
    r = http.post("/v1/diagnose?hint=gpus=two", content=KV_LOG, headers={"content-type": "text/plain"})
    assert (r.status_code, r.json()) == (422, {"error": BAD_HINTS[0][1]})


def test_http_accepts_curls_form_type_as_text(http: Any) -> None:
    # curl -d @file sends application/x-www-form-urlencoded; the body is the log's text
    r = http.post("/v1/diagnose", content=KV_LOG, headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200
    assert r.json()["findings"][0]["kind"] == "vllm.kv-cache.max-len-exceeds"


@pytest.mark.parametrize(("body", "ctype"), [(b"", "text/plain"), (b"\n  \n", "application/x-www-form-urlencoded"),
                                             (b'{"log": ""}', "application/json")])
def test_http_empty_log_is_400(http: Any, body: bytes, ctype: str) -> None:
    r = http.post("/v1/diagnose", content=body, headers={"content-type": ctype})
    assert r.status_code == 400
    assert r.json() == {"error": "empty log: send the log text as the body (curl --data-binary @server.log)"}


def test_docs_are_fastapis_own_and_redoc_stays_off(http: Any) -> None:
    """Issue 37 lists "/docs (FastAPI's own) is off" among what got in the way: it is on (Swagger UI
    over /openapi.json, no token, as /openapi.json); ReDoc, a second copy, stays off."""
    assert http.get("/docs").status_code == 200
    assert http.get("/redoc").status_code == 404


def test_slack_events_without_a_bot_token_warn_at_start_up() -> None:
    from oomdoctor.server import ServerConfig

    assert ServerConfig(slack_signing_secret="s").warnings() == [
        "OOMDOCTOR_SLACK_SIGNING_SECRET is set but OOMDOCTOR_SLACK_BOT_TOKEN is not: slash commands are "
        "answered, but app_mention and message events are acknowledged without an answer"
    ]
    assert ServerConfig(slack_signing_secret="s", slack_bot_token="xoxb-1").warnings() == []
    assert ServerConfig().warnings() == []


def test_serve_prints_the_warning() -> None:
    import socket

    pytest.importorskip("uvicorn")
    env = {**ENV, "OOMDOCTOR_SLACK_SIGNING_SECRET": "s", "OOMDOCTOR_LANG": "en"}
    env.pop("OOMDOCTOR_SLACK_BOT_TOKEN", None)
    with socket.socket() as busy:  # the port is taken: serve stops after its start-up checks
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "oomdoctor", "serve", "--port", str(port)], capture_output=True, env=env, timeout=60
        )
    assert proc.returncode == 2
    lines = proc.stderr.decode().splitlines()
    assert lines[0] == (
        "oomdoctor: warning: OOMDOCTOR_SLACK_SIGNING_SECRET is set but OOMDOCTOR_SLACK_BOT_TOKEN is not: slash "
        "commands are answered, but app_mention and message events are acknowledged without an answer"
    )
    assert lines[1].startswith(f"oomdoctor: error: cannot listen on 127.0.0.1:{port}")


# -- pasteable commands: a redacted secret is an environment variable's reference ------------------------


@pytest.mark.parametrize(("command", "expected"), [
    ("vllm serve m --api-key Zx9secretQ --max-model-len 8192", 'vllm serve m --api-key "$VLLM_API_KEY" --max-model-len 8192'),
    ("vllm serve m --api-key=Zx9secretQ", 'vllm serve m --api-key="$VLLM_API_KEY"'),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx python -m sglang.launch_server --model-path m --api-key Zx9secretQ",
     'HF_TOKEN="$HF_TOKEN" python -m sglang.launch_server --model-path m --api-key "$API_KEY"'),
    ("llama-server -m x.gguf --hf-token hf_abcdefghijklmnopqrstuvwx", 'llama-server -m x.gguf --hf-token "$HF_TOKEN"'),
    ("vllm serve m --max-model-len 8192", "vllm serve m --max-model-len 8192"),
    ("vllm serve m --api-key --port 8000", "vllm serve m --api-key --port 8000"),
])
def test_redacted_commands_still_run(command: str, expected: str) -> None:
    from oomdoctor.redaction import redact_command

    assert redact_command(command) == expected


def test_a_corrected_command_keeps_running_after_redaction() -> None:
    import shlex

    from oomdoctor.api import diagnose

    launch = "INFO 01-01 12:00:00 api_server.py:1] vllm serve Qwen/Qwen2.5-7B-Instruct --api-key Zx9secretQ --max-model-len 202752\n"
    report = diagnose(launch + KV_LOG.decode())
    command = report.findings[0].remedies[0].command
    assert command == 'vllm serve Qwen/Qwen2.5-7B-Instruct --api-key "$VLLM_API_KEY" --max-model-len 81392'
    assert shlex.split(command)[4] == "$VLLM_API_KEY"  # the shell expands it
    assert report.context.command is not None and "Zx9secretQ" not in report.context.command
