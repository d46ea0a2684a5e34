"""The HTTP service, tested over real HTTP: uvicorn on 127.0.0.1 with a free port, httpx as client."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import queue
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import uvicorn  # noqa: E402

from oomdoctor.redaction import redact  # noqa: E402
from oomdoctor.report import Finding, Location, Remedy, Report, Tool  # noqa: E402
from oomdoctor.server.app import create_app  # noqa: E402
from oomdoctor.server.config import ConfigError, ServerConfig  # noqa: E402
from oomdoctor.server.limits import Analyser, AnalysisTimeout, LimitError, analyse  # noqa: E402
from oomdoctor.server.protocol import uvicorn_options  # noqa: E402
from oomdoctor.server.slack import ReplayCache, SignatureError, sign, slack_text_to_log, verify  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VLLM_054 = (ROOT / "fixtures/vllm/vllm-054.log").read_bytes()
TOKEN = "test-api-token-123"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
MM_TOKEN = "mm-token-xyz"
MAX_BODY = 256 << 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(cfg: ServerConfig) -> Iterator[str]:
    """Run the app on a real uvicorn in a thread; yield its base URL."""
    with running_server(cfg) as (url, _server):
        yield url


@contextlib.contextmanager
def running_server(cfg: ServerConfig) -> Iterator[tuple[str, uvicorn.Server]]:
    """Run the app on a real uvicorn in a thread; yield its base URL and the server (whose
    ``server_state`` a test may watch)."""
    port = free_port()
    config = uvicorn.Config(
        create_app(cfg), host="127.0.0.1", port=port, log_level="warning", access_log=False, **uvicorn_options(cfg)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # against a hang only: a loaded machine may take its time
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(10)


class Receiver:
    """A local stand-in for Slack's response_url / Web API and Mattermost: records JSON POSTs."""

    def __init__(self) -> None:
        self.posts: queue.Queue[tuple[str, dict[str, str], dict[str, Any]]] = queue.Queue()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(n))
                outer.posts.put((self.path, dict(self.headers), body))
                out = b'{"ok": true}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def get(self, timeout: float = 10) -> tuple[str, dict[str, str], dict[str, Any]]:
        return self.posts.get(timeout=timeout)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def base_config(receiver: Receiver, **kw: Any) -> ServerConfig:
    return ServerConfig(
        api_token=TOKEN,
        slack_signing_secret=SLACK_SECRET,
        mattermost_token=MM_TOKEN,
        max_body=MAX_BODY,
        max_log=1 << 20,
        slack_response_prefixes=(receiver.url + "/",),
        mattermost_response_prefixes=(receiver.url + "/",),
        **kw,
    )


@pytest.fixture(scope="session")
def server(receiver: Receiver) -> Iterator[str]:
    with running(base_config(receiver)) as url:
        yield url


@pytest.fixture(scope="session")
def deferring_server(receiver: Receiver) -> Iterator[str]:
    """Every chat answer is deferred (inline budget 0 s) and events are answered with a bot token."""
    cfg = base_config(
        receiver, chat_inline_seconds=0.0, slack_bot_token="xoxb-test", slack_api_url=receiver.url + "/api"
    )
    with running(cfg) as url:
        yield url


@pytest.fixture(scope="session")
def client(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as c:
        yield c


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def first_finding(report: dict[str, Any]) -> dict[str, Any]:
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert errors, report
    return errors[0]


# -- /v1/diagnose ------------------------------------------------------------------------------------


def test_diagnose_json_on_real_vllm_log(client: httpx.Client) -> None:
    r = client.post("/v1/diagnose", json={"log": VLLM_054.decode()}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    f = first_finding(r.json())
    assert f["kind"] == "vllm.kv-cache.max-len-exceeds"
    assert f["figures"]["max_seq_len"] == 202752
    assert f["figures"]["estimated_max_model_len"] == 81392
    assert f["remedies"][0]["flags"] == {"--max-model-len": "81392"}
    assert r.headers["x-oomdoctor-errors"] == "1"


@pytest.mark.parametrize("case", ["vllm/vllm-054", "vllm/vllm-041", "pytorch/other-013"])
def test_diagnose_matches_the_python_api(client: httpx.Client, case: str) -> None:
    """The service gives the same report as oomdoctor.diagnose() on the same bytes."""
    import oomdoctor

    data = (ROOT / "fixtures" / f"{case}.log").read_bytes()
    r = client.post("/v1/diagnose", content=data, headers={**AUTH, "content-type": "text/plain"})
    assert r.status_code == 200, r.text
    local = oomdoctor.diagnose(data, source="<request>")
    got = r.json()
    assert [f["kind"] for f in got["findings"]] == [f.kind for f in local.findings]
    assert [f["figures"] for f in got["findings"]] == [f.figures for f in local.findings]
    assert [[x["flags"] for x in f["remedies"]] for f in got["findings"]] == [
        [x.flags for x in f.remedies] for f in local.findings
    ]


def test_each_request_is_its_own_run(client: httpx.Client) -> None:
    """Requests share no context, one after another or at once: each report equals the one its
    log gets alone, with one context, the request's."""
    import concurrent.futures

    import oomdoctor

    logs = [(ROOT / "fixtures" / f"{case}.log").read_bytes() for case in ("llamacpp/other-001", "vllm/vllm-054", "pytorch/new-009")]

    def post(data: bytes) -> dict[str, Any]:
        r = client.post("/v1/diagnose", content=data, headers={**AUTH, "content-type": "text/plain"})
        assert r.status_code == 200, r.text
        return r.json()

    alone = [json.loads(oomdoctor.diagnose(data, source="<request>").model_dump_json()) for data in logs]
    in_turn = [post(data) for data in logs]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        at_once = list(pool.map(post, logs * 2))
    for got, want in zip([*in_turn, *at_once], alone * 3, strict=True):
        assert [c["source"] for c in got["contexts"]] == ["<request>"]
        assert (got["findings"], got["contexts"], got["context"]) == (want["findings"], want["contexts"], want["context"])
    assert [r["contexts"][0]["engine"] for r in in_turn] == ["llama.cpp", "vllm", None]


def test_diagnose_text_plain_markdown(client: httpx.Client) -> None:
    r = client.post(
        "/v1/diagnose", params={"format": "markdown"}, content=VLLM_054, headers={**AUTH, "content-type": "text/plain"}
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/markdown")
    assert "   - flags of vllm serve:\n     ```shell\n     --max-model-len 81392\n" in r.text
    assert "`vllm.kv-cache.max-len-exceeds`" in r.text


def test_diagnose_gzip_body_and_text_format(client: httpx.Client) -> None:
    r = client.post(
        "/v1/diagnose?format=text",
        content=gzip.compress(VLLM_054),
        headers={**AUTH, "content-type": "application/gzip"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    assert "--max-model-len 81392" in r.text
    # gzip as Content-Encoding of a JSON body
    body = gzip.compress(json.dumps({"log": VLLM_054.decode(), "format": "json"}).encode())
    r = client.post(
        "/v1/diagnose", content=body, headers={**AUTH, "content-type": "application/json", "content-encoding": "gzip"}
    )
    assert first_finding(r.json())["remedies"][0]["flags"] == {"--max-model-len": "81392"}


def test_diagnose_slack_format_is_block_kit(client: httpx.Client) -> None:
    r = client.post("/v1/diagnose", json={"log": VLLM_054.decode(), "format": "slack"}, headers=AUTH)
    msg = r.json()
    assert "vllm.kv-cache.max-len-exceeds" in msg["text"]
    assert len(msg["blocks"]) <= 50
    texts = [b["text"]["text"] for b in msg["blocks"] if b["type"] == "section" and "text" in b]
    assert all(len(t) <= 3000 for t in texts)
    assert any("`--max-model-len 81392`" in t for t in texts)


def test_hints_reach_the_advisor_and_file_hints_are_refused(client: httpx.Client) -> None:
    r = client.post("/v1/diagnose", json={"log": "x", "hints": {"model-config": "/etc/passwd"}}, headers=AUTH)
    assert r.status_code == 422
    assert "model-config" in r.json()["error"]
    r = client.post("/v1/diagnose", json={"log": "x", "hints": {"gpus": "2"}}, headers=AUTH)
    assert r.status_code == 200


def test_healthy_log_has_no_error(client: httpx.Client) -> None:
    r = client.post("/v1/diagnose", json={"log": "INFO: all good\nINFO: serving on :8000\n"}, headers=AUTH)
    assert r.status_code == 200
    assert r.json()["summary"]["errors"] == 0
    assert r.headers["x-oomdoctor-errors"] == "0"


# -- auth, limits, errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/rules", "/v1/diagnose"])
def test_bearer_missing_and_wrong(client: httpx.Client, path: str) -> None:
    method = client.get if path == "/v1/rules" else client.post
    kw: dict[str, Any] = {} if path == "/v1/rules" else {"json": {"log": "x"}}
    r = method(path, **kw)
    assert r.status_code == 401
    assert r.json() == {"error": "missing bearer token"}
    assert r.headers["www-authenticate"] == "Bearer"
    r = method(path, headers={"Authorization": "Bearer wrong"}, **kw)
    assert r.status_code == 401
    assert r.json() == {"error": "invalid bearer token"}
    r = method(path, headers={"Authorization": f"Basic {TOKEN}"}, **kw)
    assert r.status_code == 401


def test_rules_lists_ids_titles_kinds(client: httpx.Client) -> None:
    r = client.get("/v1/rules", headers=AUTH)
    rules = r.json()["rules"]
    by_id = {x["id"]: x for x in rules}
    assert by_id["vllm.v1.kv-cache.max-len-exceeds"]["kind"] == "vllm.kv-cache.max-len-exceeds"
    assert all(x["title"] and x["kind"] and x["engine"] for x in rules)


def test_healthz_and_openapi_need_no_token(client: httpx.Client) -> None:
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["rules"] > 0
    spec = client.get("/openapi.json").json()
    assert {"/v1/diagnose", "/v1/rules", "/slack/commands", "/slack/events", "/mattermost/commands", "/healthz"} <= set(
        spec["paths"]
    )
    assert "DiagnoseRequest" in spec["components"]["schemas"]
    assert "Report" in spec["components"]["schemas"]
    docs = client.get("/docs")
    assert docs.status_code == 200 and "text/html" in docs.headers["content-type"]
    assert "/openapi.json" in docs.text  # FastAPI's Swagger UI reads the service's own spec


def test_oversized_body_is_413_json(client: httpx.Client) -> None:
    big = b"x" * (MAX_BODY + 1)
    r = client.post("/v1/diagnose", content=big, headers={**AUTH, "content-type": "text/plain"})
    assert r.status_code == 413
    assert "too large" in r.json()["error"] and str(MAX_BODY) in r.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        for _ in range(MAX_BODY // 65536 + 2):
            yield b"y" * 65536

    r = client.post("/v1/diagnose", content=chunks(), headers={**AUTH, "content-type": "text/plain"})
    assert r.status_code == 413
    assert "too large" in r.json()["error"]
    # the limit applies before authentication, to any path
    r = client.post("/nowhere", content=big)
    assert r.status_code == 413


def test_gzip_bomb_is_refused(client: httpx.Client) -> None:
    bomb = gzip.compress(b"\0" * (4 << 20))  # 4 MiB of zeros, ~4 KiB compressed; the log limit is 1 MiB
    r = client.post("/v1/diagnose", content=bomb, headers={**AUTH, "content-type": "application/gzip"})
    assert r.status_code == 413
    assert "decompressed" in r.json()["error"]
    r = client.post("/v1/diagnose", content=b"not gzip", headers={**AUTH, "content-type": "application/gzip"})
    assert r.status_code == 400


def test_malformed_json_and_schema_errors(client: httpx.Client) -> None:
    secret = "hf_" + "S" * 30
    r = client.post(
        "/v1/diagnose", content=b'{"log": "' + secret.encode(), headers={**AUTH, "content-type": "application/json"}
    )
    assert r.status_code == 400
    assert r.json()["error"].startswith("malformed JSON body")
    r = client.post("/v1/diagnose", json={"log": 5, "extra": secret}, headers=AUTH)
    assert r.status_code == 422
    assert set(r.json()) == {"error"} and "log" in r.json()["error"]
    assert secret not in r.text  # errors never echo the input
    r = client.post("/v1/diagnose", json={"log": "x", "format": "pdf"}, headers=AUTH)
    assert r.status_code == 422
    r = client.post("/v1/diagnose?format=pdf", content=b"x", headers={**AUTH, "content-type": "text/plain"})
    assert r.status_code == 422 and "format" in r.json()["error"]


def test_framework_errors_are_json(client: httpx.Client) -> None:
    r = client.get("/no/such/path")
    assert r.status_code == 404 and "error" in r.json()
    r = client.delete("/healthz")
    assert r.status_code == 405 and r.json() == {"error": "method not allowed"}
    r = client.post("/v1/diagnose", content=b"<x/>", headers={**AUTH, "content-type": "application/xml"})
    assert r.status_code == 415 and "content type" in r.json()["error"]


def test_secrets_in_echoed_text_are_redacted(client: httpx.Client) -> None:
    import oomdoctor

    hf, sk, aws = "hf_" + "a1B2" * 8, "sk-proj-" + "Z9y8" * 6, "AKIA" + "ABCDEFGHIJKLMNOP"
    log = (
        f"INFO 01-01 00:00:00 [api_server.py:1] non-default args: {{'model': 'm', 'api_key': '{sk}'}}\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
        "of 79.19 GiB of which 1.00 MiB is free. Including non-PyTorch memory, this process has 79.18 GiB memory "
        "in use. Of the allocated memory 78.00 GiB is allocated by PyTorch, and 500.00 MiB is reserved by PyTorch "
        f"but unallocated. token={hf} Authorization: Bearer abcdefghijklmnop {aws}\n"
    )
    secrets = (hf, sk, aws, "abcdefghijklmnop")
    unredacted = oomdoctor.diagnose(log, redact=False).model_dump_json()
    assert all(s in unredacted for s in secrets)  # the report itself would echo them
    for fmt in ("json", "markdown", "text", "slack"):
        r = client.post("/v1/diagnose", json={"log": log, "format": fmt}, headers=AUTH)
        assert r.status_code == 200
        for s in secrets:
            assert s not in r.text, (fmt, s)
        assert "[REDACTED]" in r.text
    r = client.post("/v1/diagnose", json={"log": log}, headers=AUTH)
    rep = r.json()
    assert rep["context"]["launch_args"]["api_key"] == "sk-[REDACTED]"
    assert rep["findings"][0]["figures"]["requested_bytes"] == 20 * 2**20  # figures untouched


def test_redact_patterns() -> None:
    assert redact("HUGGING_FACE_HUB_TOKEN=hf_abcdefghijklmnopqrstu x") == "HUGGING_FACE_HUB_TOKEN=[REDACTED] x"
    assert redact("--api-key sk-abcdefghijklmnopqrstuv --max-num-batched-tokens 8192") == (
        "--api-key [REDACTED] --max-num-batched-tokens 8192"
    )
    assert redact("token hf_abcdefghijklmnopqrstu") == "token hf_[REDACTED]"
    assert redact("Authorization: Bearer eyJhbGciOi.abc.def") == "Authorization: Bearer [REDACTED]"
    assert redact("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY") == (
        "aws_secret_access_key = [REDACTED]"
    )
    assert redact("AKIAIOSFODNN7EXAMPLE") == "AKIA[REDACTED]"
    # figures and flags are not secrets
    keep = "'max_num_batched_tokens': 8192, 'tokenizer': 'meta/llama', --max-model-len 81392, kv_cache_tokens=5"
    assert redact(keep) == keep


def test_access_log_has_no_log_text(client: httpx.Client) -> None:
    marker = "UNIQUE-LOG-MARKER-7731"
    records: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    grab = Grab(level=logging.DEBUG)
    logger = logging.getLogger("oomdoctor.server")
    old = logger.level
    logging.getLogger().addHandler(grab)
    logger.setLevel(logging.INFO)
    try:
        client.post("/v1/diagnose", params={"hint": f"gpus={marker}"}, content=marker.encode(), headers={**AUTH, "content-type": "text/plain"})
        client.post("/v1/diagnose", content=b'{"log": "' + marker.encode(), headers={**AUTH, "content-type": "application/json"})
        deadline = time.monotonic() + 60  # the line is written just after the response is sent
        # wait for our malformed-JSON request's line (an earlier test's line may arrive first)
        while not any(m.startswith("POST /v1/diagnose") and " 400 " in m for m in records) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        logging.getLogger().removeHandler(grab)
        logger.setLevel(old)
    access = [m for m in records if m.startswith("POST /v1/diagnose")]
    # ours, and perhaps the line of an earlier test's request, written just after its response
    assert len(access) >= 2 and any(" 400 " in m for m in access), records
    assert not any(marker in m for m in records)


def test_analysis_time_limit(receiver: Receiver) -> None:
    with pytest.raises(AnalysisTimeout):
        analyse(VLLM_054, create_app(ServerConfig()).state.analyser.pack, {}, timeout=0.0)
    with running(base_config(receiver, analysis_timeout=0.0)) as url:
        r = httpx.post(url + "/v1/diagnose", json={"log": VLLM_054.decode()}, headers=AUTH)
    assert r.status_code == 503
    assert "time limit" in r.json()["error"]


def test_bounded_concurrency_refuses_when_the_queue_wait_ends() -> None:
    analyser = Analyser(create_app(ServerConfig()).state.analyser.pack, max_concurrency=1, timeout=5, queue_timeout=0.05)

    async def scenario() -> tuple[int, int]:
        sem = analyser._semaphore()
        await sem.acquire()  # the one slot is busy
        with pytest.raises(LimitError) as busy:
            await analyser.run(b"x\n", {})
        sem.release()
        report = await analyser.run(VLLM_054, {})
        return busy.value.status, report.summary.errors

    assert asyncio.run(scenario()) == (503, 1)


def test_fifty_concurrent_clients(server: str) -> None:
    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=server, timeout=60, limits=limits) as c:
            return await asyncio.gather(
                *[c.post("/v1/diagnose", json={"log": VLLM_054.decode()}, headers=AUTH) for _ in range(50)]
            )

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 50
    assert {first_finding(r.json())["remedies"][0]["flags"]["--max-model-len"] for r in responses} == {"81392"}


# -- Slack --------------------------------------------------------------------------------------------


def test_slack_signature_doc_vector() -> None:
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
        b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
        b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
        b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )
    sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    assert sign(SLACK_SECRET, "1531420618", body) == sig
    headers = {"x-slack-request-timestamp": "1531420618", "x-slack-signature": sig}
    verify(SLACK_SECRET, headers, body, ReplayCache(300), now=1531420618 + 299)
    with pytest.raises(SignatureError, match="window"):
        verify(SLACK_SECRET, headers, body, ReplayCache(300), now=1531420618 + 301)
    with pytest.raises(SignatureError, match="invalid"):
        verify(SLACK_SECRET, headers, body + b"x", ReplayCache(300), now=1531420618)


def slack_post(url: str, path: str, body: bytes, *, ts: int | None = None, secret: str = SLACK_SECRET,
               ctype: str = "application/x-www-form-urlencoded", sig: str | None = None) -> httpx.Response:
    ts_s = str(int(time.time()) if ts is None else ts)
    headers = {
        "content-type": ctype,
        "x-slack-request-timestamp": ts_s,
        "x-slack-signature": sig or sign(secret, ts_s, body),
    }
    return httpx.post(url + path, content=body, headers=headers, timeout=30)


def command_body(text: str, response_url: str = "https://hooks.slack.com/commands/T1/1/abc") -> bytes:
    return urllib.parse.urlencode(
        {"token": "legacy", "command": "/oomdoctor", "text": text, "response_url": response_url, "user_id": "U1"}
    ).encode()


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_slack_command_valid_signature_answers_inline(server: str) -> None:
    # inline, since this response_url is not allowed (tests/ time nothing: Slack's 3 s are the
    # server's chat_inline_seconds, tested by the deferring server below)
    r = slack_post(server, "/slack/commands", command_body(slack_escape(VLLM_054.decode())))
    assert r.status_code == 200, r.text
    msg = r.json()
    assert msg["response_type"] == "ephemeral"
    assert msg["blocks"][0]["type"] == "header"
    assert any("`--max-model-len 81392`" in b.get("text", {}).get("text", "") for b in msg["blocks"])


def test_slack_command_wrong_expired_replayed(server: str) -> None:
    body = command_body("CUDA out of memory. Tried to allocate 2.00 MiB")
    r = slack_post(server, "/slack/commands", body, secret="not-the-secret")
    assert r.status_code == 401 and r.json() == {"error": "invalid Slack signature"}
    r = slack_post(server, "/slack/commands", body, ts=int(time.time()) - 301)
    assert r.status_code == 401 and "window" in r.json()["error"]
    r = slack_post(server, "/slack/commands", body, ts=int(time.time()) + 302)
    assert r.status_code == 401
    ts = int(time.time())
    assert slack_post(server, "/slack/commands", body, ts=ts).status_code == 200
    r = slack_post(server, "/slack/commands", body, ts=ts)
    assert r.status_code == 401 and "replayed" in r.json()["error"]
    r = httpx.post(server + "/slack/commands", content=body)
    assert r.status_code == 401 and "missing" in r.json()["error"]
    # the signature covers the raw bytes: a re-encoded body with the same meaning fails
    ts = int(time.time())
    good = sign(SLACK_SECRET, str(ts), body)
    r = slack_post(server, "/slack/commands", body.replace(b"+", b"%20"), ts=ts, sig=good)
    assert r.status_code == 401


def test_slack_ssl_check_is_acknowledged_without_analysis(server: str) -> None:
    r = httpx.post(server + "/slack/commands", content=b"ssl_check=1&token=x")
    assert r.status_code == 200 and r.json() == {"ok": True}
    # anything else unsigned is refused, even when it mentions ssl_check
    r = httpx.post(server + "/slack/commands", content=b"ssl_check=0&text=CUDA+out+of+memory")
    assert r.status_code == 401


def test_slack_command_help(server: str) -> None:
    r = slack_post(server, "/slack/commands", command_body(""))
    assert r.json()["response_type"] == "ephemeral" and "/oomdoctor" in r.json()["text"]


def test_slack_command_deferred_to_response_url(deferring_server: str, receiver: Receiver) -> None:
    # answered before the analysis (inline budget 0 s): an acknowledgement, the analysis follows
    r = slack_post(deferring_server, "/slack/commands", command_body(VLLM_054.decode(), receiver.url + "/hook/1"))
    assert r.status_code == 200
    assert r.json()["response_type"] == "ephemeral" and "analysing" in r.json()["text"]
    path, _, payload = receiver.get()
    assert path == "/hook/1"
    assert payload["response_type"] == "ephemeral"
    assert "vllm.kv-cache.max-len-exceeds" in payload["text"]
    assert any("`--max-model-len 81392`" in b.get("text", {}).get("text", "") for b in payload["blocks"])


def test_slack_response_url_outside_the_allow_list_is_not_called(deferring_server: str, receiver: Receiver) -> None:
    # not an allowed prefix: the answer comes inline (no request to an arbitrary URL)
    r = slack_post(deferring_server, "/slack/commands", command_body(VLLM_054.decode(), "http://127.0.0.2:9/x"))
    assert r.status_code == 200
    assert "blocks" in r.json()
    assert receiver.posts.empty()


def test_slack_events_url_verification_and_message(deferring_server: str, receiver: Receiver) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}).encode()
    r = slack_post(deferring_server, "/slack/events", body, ctype="application/json")
    assert r.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}
    assert slack_post(deferring_server, "/slack/events", body, ctype="application/json", secret="x").status_code == 401
    event = {
        "type": "event_callback",
        "event_id": "Ev1",
        "event": {"type": "app_mention", "channel": "C1", "ts": "1700000000.000100",
                  "text": "<@U0BOT> ```" + slack_escape(VLLM_054.decode()) + "```"},
    }
    body = json.dumps(event).encode()
    r = slack_post(deferring_server, "/slack/events", body, ctype="application/json")
    assert r.status_code == 200 and r.json() == {"ok": True}
    path, headers, payload = receiver.get()
    assert path == "/api/chat.postMessage"
    assert headers["Authorization"] == "Bearer xoxb-test"
    assert payload["channel"] == "C1" and payload["thread_ts"] == "1700000000.000100"
    assert "vllm.kv-cache.max-len-exceeds" in payload["text"]
    # Slack retries the same event_id (signed anew): handled once
    r = slack_post(deferring_server, "/slack/events", body, ctype="application/json", ts=int(time.time()) - 5)
    assert r.json()["duplicate"] is True
    # a bot's own message is ignored (no loops)
    event = {"type": "event_callback", "event_id": "Ev2", "event": {"type": "message", "bot_id": "B1", "text": "CUDA out of memory."}}
    slack_post(deferring_server, "/slack/events", json.dumps(event).encode(), ctype="application/json")
    time.sleep(0.3)
    assert receiver.posts.empty()


def test_event_log_text_takes_snippet_preview() -> None:
    from oomdoctor.server.slack import event_log_text

    event = {"text": "<@U1> why did this die?", "files": [{"mode": "snippet", "preview": "CUDA out of memory &lt;x&gt;"}]}
    assert event_log_text(event) == "why did this die?\nCUDA out of memory <x>"


def test_slack_text_to_log() -> None:
    text = "<@U123> ```File \"x.py\", line 1, in &lt;module&gt;\nsee <https://docs.vllm.ai/x|docs.vllm.ai/x> a &amp;&amp; b```"
    assert slack_text_to_log(text) == 'File "x.py", line 1, in <module>\nsee docs.vllm.ai/x a && b'


# -- Mattermost ---------------------------------------------------------------------------------------


def mm_body(text: str, token: str | None = None, response_url: str = "") -> bytes:
    fields = {"channel_id": "c1", "command": "/oomdoctor", "text": text, "user_id": "u1", "response_url": response_url}
    if token is not None:
        fields["token"] = token
    return urllib.parse.urlencode(fields).encode()


def test_mattermost_token_header_and_field(server: str) -> None:
    ctype = {"content-type": "application/x-www-form-urlencoded"}
    r = httpx.post(server + "/mattermost/commands", content=mm_body(VLLM_054.decode()),
                   headers={**ctype, "Authorization": f"Token {MM_TOKEN}"}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["response_type"] == "ephemeral"
    assert "\n     --max-model-len 81392\n" in r.json()["text"]
    assert len(r.json()["text"]) <= 16383
    r = httpx.post(server + "/mattermost/commands", content=mm_body(VLLM_054.decode(), MM_TOKEN), headers=ctype)
    assert r.status_code == 200 and "81392" in r.json()["text"]
    for headers, body in (
        ({**ctype, "Authorization": "Token wrong"}, mm_body("x")),
        (ctype, mm_body("x", "wrong")),
        (ctype, mm_body("x")),
        ({**ctype, "Authorization": f"Bearer {MM_TOKEN}"}, mm_body("x")),
    ):
        r = httpx.post(server + "/mattermost/commands", content=body, headers=headers)
        assert r.status_code == 401 and "Mattermost token" in r.json()["error"]


def test_mattermost_deferred(deferring_server: str, receiver: Receiver) -> None:
    r = httpx.post(
        deferring_server + "/mattermost/commands",
        content=mm_body(VLLM_054.decode(), MM_TOKEN, receiver.url + "/mm/1"),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert "analysing" in r.json()["text"]
    path, _, payload = receiver.get()
    assert path == "/mm/1" and "\n     --max-model-len 81392\n" in payload["text"]


def test_chat_endpoints_off_when_not_configured(receiver: Receiver) -> None:
    with running(ServerConfig(max_body=MAX_BODY)) as url:
        assert httpx.post(url + "/slack/commands", content=b"text=x").status_code == 404
        assert httpx.post(url + "/mattermost/commands", content=b"text=x").status_code == 404
        # no API token configured (loopback only): /v1 is open
        assert httpx.get(url + "/v1/rules").status_code == 200


# -- configuration and CLI ----------------------------------------------------------------------------


def test_refuses_public_address_without_token() -> None:
    with pytest.raises(ConfigError, match="OOMDOCTOR_API_TOKEN"):
        ServerConfig(host="0.0.0.0").check_exposure()
    ServerConfig(host="0.0.0.0", api_token="t").check_exposure()
    ServerConfig(host="0.0.0.0", insecure=True).check_exposure()
    ServerConfig(host="::1").check_exposure()
    ServerConfig(host="localhost").check_exposure()
    with pytest.raises(ConfigError):
        ServerConfig(host="10.0.0.1").check_exposure()


def test_config_from_env() -> None:
    cfg = ServerConfig.from_env(
        {"OOMDOCTOR_API_TOKEN": "a", "OOMDOCTOR_MAX_BODY": "1MiB", "OOMDOCTOR_SLACK_SIGNING_SECRET": "s",
         "OOMDOCTOR_MATTERMOST_TOKEN": "m", "OOMDOCTOR_ANALYSIS_TIMEOUT": "3.5"},
        port=9000,
    )
    assert (cfg.api_token, cfg.max_body, cfg.slack_signing_secret, cfg.mattermost_token) == ("a", 1 << 20, "s", "m")
    assert (cfg.analysis_timeout, cfg.port, cfg.host) == (3.5, 9000, "127.0.0.1")
    assert ServerConfig.from_env({"OOMDOCTOR_MAX_BODY": "2048"}).max_body == 2048
    with pytest.raises(ConfigError, match="OOMDOCTOR_MAX_BODY"):
        ServerConfig.from_env({"OOMDOCTOR_MAX_BODY": "lots"})


def test_cli_serve_refuses_public_address(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from oomdoctor.cli import main

    monkeypatch.delenv("OOMDOCTOR_API_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "8089"]) == 2
    assert "refusing to listen on 0.0.0.0" in capsys.readouterr().err


# -- renderers within chat limits ---------------------------------------------------------------------


def _big_report(n_findings: int, n_remedies: int, msg_len: int = 2000) -> Report:
    findings = [
        Finding(
            rule=f"r{i}", kind="torch.cuda-oom", engine="pytorch", severity="error", title=f"OOM <{i}> & co",
            message="CUDA out of memory. `x` " + "y" * msg_len, location=Location(line=i + 1, end_line=i + 1),
            figures={"requested_bytes": 2**30, "total_bytes": 80 * 2**30},
            remedies=[
                Remedy(id=f"m{j}", rank=j + 1, title="Lower the batch", flags={"--max-num-seqs": str(64 >> (j % 6))},
                       why="w" * 500, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
                for j in range(n_remedies)
            ],
        )
        for i in range(n_findings)
    ]
    return Report(tool=Tool(version="0"), findings=findings)


def test_slack_blocks_stay_inside_limits() -> None:
    from oomdoctor.render.slack import render_slack_blocks

    msg = render_slack_blocks(_big_report(60, 30))
    blocks = msg["blocks"]
    assert len(blocks) <= 50
    assert len(json.dumps(blocks)) <= 13000
    for b in blocks:
        if b["type"] == "section" and "text" in b:
            assert len(b["text"]["text"]) <= 3000
        if b["type"] == "section" and "fields" in b:
            assert len(b["fields"]) <= 10 and all(len(f["text"]) <= 2000 for f in b["fields"])
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= 150
    assert "more finding(s) not shown" in blocks[-1]["elements"][0]["text"]
    body = json.dumps(blocks)
    assert "OOM &lt;0&gt; &amp; co" in body  # escaped for Slack
    # each code line under its label: the env as a command of its own, the flags under their program's name
    assert "`$ export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`" in body
    assert "flags of the launch command: `--max-num-seqs 64`" in body


def test_markdown_max_chars() -> None:
    from oomdoctor.render.markdown import render_markdown

    text = render_markdown(_big_report(40, 5), max_chars=16383)
    assert len(text) <= 16383
    assert "more finding(s) not shown" in text
    assert "     ```shell\n     export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n     ```" in text
    assert "   - flags of the launch command:\n     ```shell\n     --max-num-seqs 64\n     ```" in text
    assert "```\nCUDA out of memory. `x` y" in text


def test_cli_markdown_and_slack_render_like_the_service(
    client: httpx.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    from oomdoctor.cli import main

    path = str(ROOT / "fixtures/vllm/vllm-054.log")
    for fmt in ("markdown", "slack"):
        main(["--format", fmt, path])
        cli = capsys.readouterr().out
        r = client.post("/v1/diagnose", json={"log": VLLM_054.decode(), "format": fmt}, headers=AUTH)
        served = r.text if fmt == "markdown" else json.dumps(r.json(), indent=2, ensure_ascii=False) + "\n"
        assert cli.replace(f"{path}:", "line ") == served
