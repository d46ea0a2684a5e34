"""Hostile clients against a real uvicorn: half-sent requests, connection floods, aborted uploads,
deep JSON, gzip bombs. Each test is the regression test of one defect of issue 16."""

from __future__ import annotations

import gzip
import json
import logging
import socket
import time
import tracemalloc
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from oomdoctor.server.limits import LimitError, gunzip  # noqa: E402
from oomdoctor.server.slack import sign  # noqa: E402
from tests.test_server import (  # noqa: E402
    AUTH,
    MM_TOKEN,
    SLACK_SECRET,
    Receiver,
    base_config,
    running,
    running_server,
)

CAP = 8
#: against a hang only: no test here asserts how long anything took (a loaded CI machine may
#: stall any step for seconds); each asserts what the server did
PATIENCE = 60.0


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    receiver = Receiver()
    cfg = base_config(receiver, header_timeout=0.6, body_timeout=0.8, max_connections=CAP)
    try:
        with running(cfg) as url:
            yield url
    finally:
        receiver.close()


@pytest.fixture()
def server_log() -> Iterator[list[logging.LogRecord]]:
    """Every record the server and uvicorn log at WARNING or above during the test."""
    records: list[logging.LogRecord] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if not any(r is record for r in records):  # seen by a logger and by its parent
                records.append(record)

    grab = Grab(level=logging.WARNING)
    names = ["oomdoctor.server", "uvicorn.error", "uvicorn", "asyncio", ""]
    for n in names:
        logging.getLogger(n).addHandler(grab)
    try:
        yield records
    finally:
        for n in names:
            logging.getLogger(n).removeHandler(grab)


@pytest.fixture()
def fresh(receiver_for_fresh: Receiver) -> Iterator[tuple[str, Any]]:
    """A server of this test's own, with the limits of ``guarded``: no connection of an earlier
    test is still open on it. (url, uvicorn server)"""
    cfg = base_config(receiver_for_fresh, header_timeout=0.6, body_timeout=0.8, max_connections=CAP)
    with running_server(cfg) as pair:
        yield pair


@pytest.fixture(scope="module")
def receiver_for_fresh() -> Iterator[Receiver]:
    receiver = Receiver()
    try:
        yield receiver
    finally:
        receiver.close()


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=PATIENCE)
    return s


def until(what: Callable[[], bool]) -> bool:
    """Poll ``what`` until it holds (True) or PATIENCE has passed (False)."""
    deadline = time.monotonic() + PATIENCE
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


# -- 3. connections that never finish their headers ------------------------------------------------


def test_half_sent_headers_are_closed_at_the_header_deadline(guarded: str) -> None:
    """A header line every 0.15 s, never the blank line: were the deadline (0.6 s) extended by
    data, the connection would stay open for as long as the client trickles."""
    s = connect(guarded)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never the blank line
    deadline = time.monotonic() + PATIENCE
    closed = False
    while not closed and time.monotonic() < deadline:
        try:
            s.sendall(b"X-A: b\r\n")
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        closed = closed_by_server(s, 0.15)
    s.close()
    assert closed, "a client trickling header lines kept its connection open"


@pytest.fixture(scope="module")
def patient() -> Iterator[str]:
    """The connection cap of ``guarded`` with a header deadline longer than any test's wait: a
    connection it closes was displaced, not timed out."""
    receiver = Receiver()
    cfg = base_config(receiver, header_timeout=2 * PATIENCE, body_timeout=2 * PATIENCE, max_connections=CAP)
    try:
        with running(cfg) as url:
            yield url
    finally:
        receiver.close()


def test_idle_connections_are_displaced_so_healthz_still_answers(patient: str) -> None:
    idle = [connect(patient) for _ in range(CAP * 3)]  # far more than the cap, none sends a byte
    try:
        r = httpx.get(patient + "/healthz", timeout=PATIENCE)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        # the oldest idle connections were closed to make room (their header deadline is far off),
        # the newest are still open
        assert closed_by_server(idle[0], PATIENCE / 2)
        assert not closed_by_server(idle[-1], 0.2)
    finally:
        for s in idle:
            s.close()


def test_connections_busy_with_requests_shed_new_ones_with_503(fresh: tuple[str, Any]) -> None:
    url, server = fresh  # a server of its own: no connection of another test holds a slot
    state = server.server_state
    busy = []
    try:
        for _ in range(CAP):  # each has sent its headers and is waiting to send its body
            s = connect(url)
            s.sendall(
                b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n"
                + f"Authorization: Bearer {AUTH['Authorization'].split()[1]}\r\n\r\n".encode()
            )
            busy.append(s)
        # the server has read every one's headers: all CAP slots are busy with a request
        assert until(lambda: len(state.connections) == CAP and not getattr(state, "oomdoctor_waiting", None))
        # /healthz still answers, on the reserve kept over the cap for it (issue 36); any other
        # request there is shed
        assert httpx.get(url + "/healthz", timeout=PATIENCE).status_code == 200
        r = httpx.get(url + "/v1/rules", headers=AUTH, timeout=PATIENCE)
        assert r.status_code == 503
        assert r.json() == {"error": "server busy: too many open connections; retry shortly"}
        assert r.headers["retry-after"] == "2"
        # the trickled bodies hit the body deadline: 408, and the slots free again
        answer = busy[0].recv(65536)
        assert answer.startswith(b"HTTP/1.1 408"), answer
    finally:
        for s in busy:
            s.close()
    assert until(lambda: httpx.get(url + "/healthz", timeout=PATIENCE).status_code == 200)


# -- 4. aborted uploads ------------------------------------------------------------------------------


def test_aborted_upload_is_not_an_error(
    guarded: str, server_log: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    access: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            access.append(record.getMessage())

    grab = Grab(level=logging.INFO)
    logger = logging.getLogger("oomdoctor.server.access")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(grab)
    try:
        _abort_an_upload(guarded, monkeypatch)
        # the access line is written once the server has seen the client go
        assert until(lambda: any(m.startswith("POST /v1/diagnose 499 ") for m in access)), access
    finally:
        logger.removeHandler(grab)
        logger.setLevel(old_level)
    assert not server_log, [r.getMessage() for r in server_log]


def _abort_an_upload(guarded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from oomdoctor.server import app as app_module

    reading = threading.Event()
    real_read_body = app_module.read_body

    async def read_body(*args: Any, **kwargs: Any) -> Any:
        reading.set()
        return await real_read_body(*args, **kwargs)

    monkeypatch.setattr(app_module, "read_body", read_body)
    s = connect(guarded)
    s.sendall(
        b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n"
        + f"Authorization: {AUTH['Authorization']}\r\n\r\n".encode()
        + b"CUDA out of memory " * 10
    )
    assert reading.wait(PATIENCE)  # the request is in and its body being read
    s.close()  # the client gives up mid-body
    assert httpx.get(guarded + "/healthz", timeout=PATIENCE).status_code == 200


def test_bad_token_is_refused_before_the_body_is_read(guarded: str) -> None:
    """401 arrives although the 100 kB body is never sent."""
    s = connect(guarded)
    s.sendall(
        b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n"
        b"Authorization: Bearer wrong\r\n\r\n"
    )
    s.settimeout(PATIENCE)  # a 401 at once; the body would take the body deadline (408)
    assert s.recv(65536).startswith(b"HTTP/1.1 401")
    s.close()
    s = connect(guarded)
    s.sendall(
        b"POST /mattermost/commands HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: 100000\r\nAuthorization: Token wrong\r\n\r\n"
    )
    s.settimeout(PATIENCE)  # a 401 at once; the body would take the body deadline (408)
    assert s.recv(65536).startswith(b"HTTP/1.1 401")
    s.close()
    s = connect(guarded)  # a stale Slack timestamp: refused before the (signed) body arrives
    s.sendall(
        b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n"
        b"X-Slack-Request-Timestamp: 1000\r\nX-Slack-Signature: v0=00\r\n\r\n"
    )
    s.settimeout(PATIENCE)  # a 401 at once; the body would take the body deadline (408)
    assert s.recv(65536).startswith(b"HTTP/1.1 401")
    s.close()


# -- 5. deeply nested JSON -----------------------------------------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000


def test_deep_json_is_a_400_with_one_line(guarded: str, server_log: list[logging.LogRecord]) -> None:
    r = httpx.post(guarded + "/v1/diagnose", content=DEEP, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {"error": "malformed JSON body: nested too deeply"}
    body = b'{"log": "x", "hints": {"a": ' + b'{"b": ' * 20_000 + b"1" + b"}" * 20_001
    r = httpx.post(guarded + "/v1/diagnose", content=body, headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400
    event = b'{"type": "event_callback", "event": ' + DEEP + b"}"
    ts = str(int(time.time()))
    r = httpx.post(
        guarded + "/slack/events",
        content=event,
        headers={"content-type": "application/json", "x-slack-request-timestamp": ts,
                 "x-slack-signature": sign(SLACK_SECRET, ts, event)},
    )
    assert r.status_code == 400
    assert r.json() == {"error": "malformed JSON body: nested too deeply"}
    assert not server_log, [r.getMessage() for r in server_log]


def test_internal_errors_are_one_line_without_traceback(
    guarded: str, server_log: list[logging.LogRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    from oomdoctor.server import app as app_module

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("secret log text")

    monkeypatch.setattr(app_module, "render", boom)
    r = httpx.post(guarded + "/v1/diagnose", json={"log": "x"}, headers=AUTH)
    assert r.status_code == 500 and r.json() == {"error": "internal error"}
    assert [rec.getMessage() for rec in server_log] == ["internal error on POST /v1/diagnose: ZeroDivisionError"]
    assert all(rec.exc_info is None for rec in server_log)


# -- 2. decompression: streamed, capped, inside the limits ---------------------------------------------


def test_gunzip_streams_with_a_running_cap() -> None:
    limit = 4 << 20
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in ~64 KiB
    chunks = [bomb[i : i + 4096] for i in range(0, len(bomb), 4096)]
    tracemalloc.start()
    try:
        with pytest.raises(LimitError) as exc:
            gunzip(chunks, limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert exc.value.status == 413
    assert peak < 3 * limit  # never the whole 64 MiB
    ok = gzip.compress(b"line\n" * 1000)
    assert gunzip([ok[:10], ok[10:]], limit) == b"line\n" * 1000
    with pytest.raises(LimitError) as exc:
        gunzip([b"\x1f\x8b\x08\x00garbage"], limit)
    assert exc.value.status == 400


def test_gzip_json_bodies_are_decoded_inside_the_limits(guarded: str) -> None:
    body = gzip.compress(json.dumps({"log": "CUDA out of memory. Tried to allocate 2.00 GiB\n" * 100}).encode())
    r = httpx.post(
        guarded + "/v1/diagnose",
        content=body,
        headers={**AUTH, "content-type": "application/json", "content-encoding": "gzip"},
    )
    assert r.status_code == 200, r.text
    bomb = gzip.compress(json.dumps({"log": "x" * (4 << 20)}).encode())
    r = httpx.post(
        guarded + "/v1/diagnose",
        content=bomb,
        headers={**AUTH, "content-type": "application/json", "content-encoding": "gzip"},
    )
    assert r.status_code == 413 and "decompressed" in r.json()["error"]


def test_huge_headers_are_a_400(guarded: str) -> None:
    """Headers are bounded by h11's incomplete-event limit (one socket read at most past it)."""
    s = connect(guarded)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    try:
        for _ in range(64):
            s.sendall(b"X-Big: " + b"a" * 16384 + b"\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        answer = s.recv(65536)
    except ConnectionResetError:
        answer = b""
    s.close()
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:100]
    assert httpx.get(guarded + "/healthz", timeout=PATIENCE).status_code == 200


def test_chat_form_bodies_use_the_same_limits(guarded: str) -> None:
    fields = {"text": "CUDA out of memory", "token": MM_TOKEN}
    r = httpx.post(
        guarded + "/mattermost/commands",
        content=urllib.parse.urlencode(fields).encode(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200


@pytest.mark.parametrize("encoding", ["gzip", ""])
def test_decoding_a_body_peaks_at_a_small_multiple_of_the_log_limit(encoding: str) -> None:
    """Raw body, parsed JSON and the log's bytes: never more than a few copies (the chunks are freed as used)."""
    from oomdoctor.server.app import decode_diagnose

    limit = 4 << 20
    log = ("INFO handled request id=12345 in 12 ms \u00e9\n" * 120_000)[: int(limit * 0.8)]
    body = json.dumps({"log": log}, ensure_ascii=False).encode()
    if encoding:
        body = gzip.compress(body)
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    del body
    tracemalloc.start()
    try:
        data, _, fmt, _ = decode_diagnose(chunks, "application/json", encoding, limit, None, {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == log.encode() and fmt == "json" and chunks == []
    assert peak < 4 * limit, f"{peak / limit:.1f} x the log limit"


def test_analysis_redaction_and_rendering_run_off_the_event_loop(
    guarded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from oomdoctor.server import app as app_module
    from oomdoctor.server import limits

    threads: dict[str, str] = {}
    real_redact, real_render = limits.redact_report, app_module.render

    def redact(report: Any) -> Any:
        threads["redact"] = threading.current_thread().name
        return real_redact(report)

    def render(report: Any, fmt: str, **kw: Any) -> Any:
        threads["render"] = threading.current_thread().name
        return real_render(report, fmt, **kw)

    monkeypatch.setattr(limits, "redact_report", redact)
    monkeypatch.setattr(app_module, "render", render)
    r = httpx.post(guarded + "/v1/diagnose", json={"log": "--api-key abcdefgh1234\n", "format": "text"}, headers=AUTH)
    assert r.status_code == 200 and "abcdefgh1234" not in r.text
    assert set(threads) == {"redact", "render"}
    assert all(name.startswith("asyncio_") for name in threads.values()), threads  # asyncio.to_thread's pool


def test_healthz_answers_while_a_long_argument_is_analysed(guarded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 16: a 60 000-character launch argument took 132 s to redact, with /healthz blocked throughout.

    The analysis of such a log is held, once redacted, until /healthz has answered: on the event
    loop it would block /healthz for good (no answer within PATIENCE), off it /healthz answers."""
    import threading

    from oomdoctor.server import limits

    held, answered = threading.Event(), threading.Event()
    real_redact = limits.redact_report

    def redact(report: Any) -> Any:
        out = real_redact(report)
        held.set()
        answered.wait(PATIENCE)
        return out

    monkeypatch.setattr(limits, "redact_report", redact)
    log = (
        "INFO non-default args: {'model': 'm', 'served_model_name': '" + "a-" * 30_000 + "'}\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. --hf-token Zx9secretQ --api-key "
        + "-a" * 30_000 + " " + "token." * 10_000 + "\n"
    ).encode()
    result: dict[str, Any] = {}

    def post() -> None:
        result["r"] = httpx.post(
            guarded + "/v1/diagnose", content=log, headers={**AUTH, "content-type": "text/plain"}, timeout=2 * PATIENCE
        )

    t = threading.Thread(target=post)
    t.start()
    try:
        assert held.wait(PATIENCE), "the analysis never reached redaction"
        assert httpx.get(guarded + "/healthz", timeout=PATIENCE / 2).status_code == 200
    finally:
        answered.set()
        t.join(2 * PATIENCE)
    r = result["r"]
    assert r.status_code == 200, r.text
    assert "Zx9secretQ" not in r.text
