"""Issue 36 item 1: nobody unauthenticated can lock the server out.

An endpoint that is not configured answers 404 before reading a byte of the body; a request
without the credentials its endpoint needs is refused before its body is buffered; unverified
bodies hold at most a share of the body budget, and connections sending them are displaced before
an authorized or ``/healthz`` request is refused. Every attack here is a handful of loopback
connections; the asserts are status codes and byte counts, never durations."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from oomdoctor.server.limits import BodyBudget, LimitError  # noqa: E402
from tests.test_server import AUTH, MM_TOKEN, Receiver, base_config, running_server  # noqa: E402
from tests.test_server_hardening import PATIENCE, connect, until  # noqa: E402

CAP = 8
BUDGET = 64 << 10  # unverified share: 16 KiB


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def _answer(s: Any) -> bytes:
    """The whole answer, up to the server's close (it comes at once; the body, never sent, would
    take the body deadline)."""
    s.settimeout(PATIENCE)
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def _forged_slack_headers(length: int) -> bytes:
    """Fresh timestamp, bogus signature: passes every check that can be made before the body."""
    return (
        b"POST /slack/commands HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        + f"Content-Length: {length}\r\nX-Slack-Request-Timestamp: {int(time.time())}\r\n".encode()
        + b"X-Slack-Signature: v0=" + b"0" * 64 + b"\r\n\r\n"
    )


def test_unconfigured_chat_endpoints_answer_404_before_reading_a_byte(receiver: Receiver) -> None:
    cfg = base_config(receiver, body_timeout=30.0).with_(slack_signing_secret=None, mattermost_token=None)
    with running_server(cfg) as (url, server):
        for path in (b"/slack/commands", b"/slack/events", b"/mattermost/commands"):
            for extra in (b"", b"X-Slack-Request-Timestamp: 1\r\nX-Slack-Signature: v0=1\r\n"):
                s = connect(url)
                s.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n" + extra + b"\r\n")
                answer = _answer(s)
                assert answer.startswith(b"HTTP/1.1 404"), (path, answer)
                assert b"not configured" in answer
                s.close()
        assert server.config.app.state.body_budget.used == 0  # type: ignore[attr-defined]


def test_unsigned_slack_bodies_are_refused_unread(receiver: Receiver) -> None:
    with running_server(base_config(receiver, body_timeout=30.0)) as (url, _server):
        for head in (
            b"Content-Length: 100000\r\n",  # too large for the certificate probe
            b"Transfer-Encoding: chunked\r\n",  # no length: cannot be the probe
        ):
            s = connect(url)
            s.sendall(b"POST /slack/commands HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
            answer = _answer(s)
            assert answer.startswith(b"HTTP/1.1 401"), answer
            s.close()
        # the probe itself is still acknowledged, and a small unsigned command still refused
        assert httpx.post(url + "/slack/commands", content=b"ssl_check=1&token=x").json() == {"ok": True}
        assert httpx.post(url + "/slack/commands", content=b"text=CUDA+out+of+memory").status_code == 401


def test_unverified_bodies_hold_only_their_share_of_the_budget() -> None:
    budget = BodyBudget(100, unverified_share=0.25)
    budget.take(20, verified=False)
    with pytest.raises(LimitError) as exc:
        budget.take(6, verified=False)
    assert exc.value.status == 503
    budget.take(80)  # authorized requests keep the rest
    assert budget.used == 100 and budget.used_unverified == 20
    budget.give(20, verified=False)
    assert budget.used == 80 and budget.used_unverified == 0
    budget.take(20, verified=False)


def test_forged_slack_uploads_cannot_starve_an_authorized_request(receiver: Receiver) -> None:
    cfg = base_config(receiver, body_timeout=30.0, body_budget=BUDGET, max_connections=64)
    with running_server(cfg) as (url, server):
        budget: BodyBudget = server.config.app.state.body_budget  # type: ignore[attr-defined]
        held = []
        try:
            for _ in range(6):  # 6 x 4 KiB forged Slack bodies, held open mid-upload
                s = connect(url)
                s.sendall(_forged_slack_headers(100_000) + b"text=" + b"a" * 4091)
                held.append(s)
            # the unverified share (16 KiB) is full: the rest were refused 503 without being kept
            assert until(lambda: budget.used_unverified == 16 << 10)
            log = b"x" * (40 << 10) + b"\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            r = httpx.post(url + "/v1/diagnose", content=log, headers={**AUTH, "content-type": "text/plain"},
                           timeout=PATIENCE)
            assert r.status_code == 200, r.text
            assert r.json()["findings"]
            refused = 0
            for s in held:
                s.settimeout(0.05)
                with contextlib.suppress(TimeoutError):
                    refused += s.recv(65536).startswith(b"HTTP/1.1 503")
            assert refused == 2
        finally:
            for s in held:
                s.close()


def test_trickling_unverified_connections_are_displaced_for_healthz_and_authorized_requests(
    receiver: Receiver,
) -> None:
    cfg = base_config(receiver, body_timeout=30.0, header_timeout=30.0, max_connections=CAP)
    with running_server(cfg) as (url, server):
        state = server.server_state
        held = []
        try:
            for i in range(CAP):  # every slot: a request whose headers are in and whose body trickles
                s = connect(url)
                if i % 2:
                    s.sendall(_forged_slack_headers(1000) + b"text=a")
                else:  # Mattermost with the token only in the (unsent) form
                    s.sendall(b"POST /mattermost/commands HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\ntext=a")
                held.append(s)
            assert until(lambda: len(getattr(state, "oomdoctor_unverified", ())) == CAP)
            for _ in range(3):
                assert httpx.get(url + "/healthz", timeout=PATIENCE).status_code == 200
                r = httpx.post(url + "/v1/diagnose", content=b"CUDA out of memory", timeout=PATIENCE,
                               headers={**AUTH, "content-type": "text/plain"})
                assert r.status_code == 200, r.text
            # a Mattermost request with its token in the header is verified: not displaced
            ok = httpx.post(url + "/mattermost/commands", data={"text": "help"}, timeout=PATIENCE,
                            headers={"Authorization": f"Token {MM_TOKEN}"})
            assert ok.status_code == 200
            # the oldest unverified connection was closed to make room; each request above closed its
            # own connection when done, so the slot it took was free again for the next one
            closed = []
            for s in held:
                s.settimeout(0.05)
                try:
                    closed.append(s.recv(65536) == b"")
                except TimeoutError:
                    closed.append(False)
                except ConnectionResetError:
                    closed.append(True)
            assert closed == [True] + [False] * (CAP - 1)
        finally:
            for s in held:
                s.close()


def test_content_length_and_chunked_together_are_refused(receiver: Receiver) -> None:
    """Issue 36 item 6: two framings (request smuggling behind a proxy) are a 400, and the
    connection is closed (the bytes after the headers are never read as a next request)."""
    with running_server(base_config(receiver)) as (url, _server):
        s = connect(url)
        s.sendall(
            b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
            + f"Authorization: {AUTH['Authorization']}\r\n".encode()
            + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        answer = _answer(s)
        s.close()
        assert answer.startswith(b"HTTP/1.1 400"), answer
        assert b"both Content-Length and Transfer-Encoding" in answer
        assert answer.count(b"HTTP/1.1") == 1  # the smuggled request got no answer


def test_follow_help_shows_help_not_a_wait() -> None:
    import subprocess
    import sys

    for args in (["--follow", "--help"], ["-F", "-h"], ["-o", "--help"]):
        p = subprocess.run([sys.executable, "-m", "oomdoctor", *args], capture_output=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, (args, p.stderr)
        assert p.stdout.startswith(b"Usage: oomdoctor [OPTIONS] [FILE]..."), args


def test_a_connection_just_made_is_not_displaced_before_an_unverified_one(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A /healthz probe whose headers are on their way when an attacker's next connection
    arrives at the cap: the oldest unverified upload goes, not the probe (it used to be the
    oldest connection waiting for its headers, displaced first)."""
    from oomdoctor.server import protocol

    monkeypatch.setattr(protocol, "WAIT_GRACE", PATIENCE)  # "a moment ago", however slow the machine
    cfg = base_config(receiver, body_timeout=30.0, header_timeout=30.0, max_connections=CAP)
    with running_server(cfg) as (url, server):
        state = server.server_state
        held = []
        try:
            for _ in range(CAP - 1):
                s = connect(url)
                s.sendall(_forged_slack_headers(1000) + b"text=a")
                held.append(s)
            assert until(lambda: len(getattr(state, "oomdoctor_unverified", ())) == CAP - 1)
            probe = connect(url)  # connected, its request not sent yet
            held.append(probe)
            assert until(lambda: len(getattr(state, "oomdoctor_waiting", ())) == 1)
            attacker = connect(url)  # over the cap
            held.append(attacker)
            assert until(lambda: len(getattr(state, "oomdoctor_waiting", ())) == 2)
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _answer(probe).startswith(b"HTTP/1.1 200")
            held[0].settimeout(PATIENCE)
            with contextlib.suppress(ConnectionResetError):
                assert held[0].recv(65536) == b""  # the oldest unverified upload was closed
        finally:
            for s in held:
                s.close()


class _Finishing:
    """Stands for the task of a connection displaced a moment ago and still finishing: uvicorn
    counts it until it ends."""


def test_healthz_and_authorized_requests_pass_while_displaced_tasks_finish(receiver: Receiver) -> None:
    """The one /healthz 503 under the combined attack: a burst of attackers at the cap displaces
    as many connections, whose tasks are still finishing when the newcomers' requests arrive, so
    uvicorn's backstop (a plain 503 once ``max_connections + 1`` connections or tasks exist; now
    past the health reserve too) saw
    more tasks than connections. Here the cap is full of unverified uploads and the backstop's
    count of tasks is held over it: /healthz and an authorized request still get 200, and an
    unverified request is still held to it."""
    from oomdoctor.server.protocol import HEALTH_RESERVE

    cfg = base_config(receiver, body_timeout=30.0, header_timeout=30.0, max_connections=CAP)
    with running_server(cfg) as (url, server):
        state = server.server_state
        held = []
        finishing = [_Finishing() for _ in range(CAP + HEALTH_RESERVE + 1)]  # the backstop's count alone
        try:
            for _ in range(CAP):
                s = connect(url)
                s.sendall(_forged_slack_headers(1000) + b"text=a")
                held.append(s)
            assert until(lambda: len(getattr(state, "oomdoctor_unverified", ())) == CAP)
            state.tasks.update(finishing)  # type: ignore[arg-type]
            for _ in range(3):
                h = httpx.get(url + "/healthz", timeout=PATIENCE)
                assert h.status_code == 200, h.text
                r = httpx.post(url + "/v1/diagnose", content=b"CUDA out of memory", timeout=PATIENCE,
                               headers={**AUTH, "content-type": "text/plain"})
                assert r.status_code == 200, r.text
            s = connect(url)  # an unverified request: uvicorn's plain 503
            s.sendall(_forged_slack_headers(6) + b"text=a")
            held.append(s)
            assert _answer(s).startswith(b"HTTP/1.1 503")
        finally:
            state.tasks.difference_update(finishing)  # type: ignore[arg-type]
            for s in held:
                s.close()


def test_a_refusal_before_the_body_is_read_closes_the_connection(receiver: Receiver) -> None:
    """A refused client's body is never read: the answer says ``connection: close`` and the server
    closes the connection after it (on keep-alive it read and dropped every byte still sent)."""
    cfg = base_config(receiver, body_timeout=30.0, body_budget=BUDGET)
    with running_server(cfg) as (url, server):
        budget: BodyBudget = server.config.app.state.body_budget  # type: ignore[attr-defined]
        refusals = [
            # wrong API token, part of the body sent
            b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Type: text/plain\r\n"
            b"Content-Length: 100000\r\n\r\n" + b"a" * 1000,
            # forged Slack upload over the unverified share of the budget (16 KiB): 503 busy
            _forged_slack_headers(100_000) + b"text=" + b"a" * (20 << 10),
            # an unknown path
            b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"a" * 1000,
            # /healthz answers 200 without reading the body it was sent: closed too
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        ]
        statuses = []
        for request in refusals:
            s = connect(url)
            s.sendall(request)
            answer = _answer(s)  # to the server's close: returns only because it closed
            s.close()
            head = answer.split(b"\r\n\r\n", 1)[0].lower()
            assert b"\r\nconnection: close" in head, head
            statuses.append(int(head.split()[1]))
        assert statuses == [401, 503, 404, 200]
        assert until(lambda: budget.used == 0)
        # an answer after the whole body keeps the connection open for the next request
        with httpx.Client(timeout=PATIENCE) as client:
            for _ in range(2):
                r = client.post(url + "/v1/diagnose", content=b"CUDA out of memory", headers={**AUTH, "content-type": "text/plain"})
                assert r.status_code == 200 and r.headers.get("connection") != "close"
            assert client.get(url + "/healthz").headers.get("connection") != "close"


def test_a_refused_body_is_not_held_by_its_error() -> None:
    """Issue 36's RSS after the attack: the error of an upload cut short keeps read_body's frames
    alive through its traceback (reference cycles, until the garbage collector runs), and they held
    the body's chunks: 36 refused 4 MiB uploads left the server at 239 MiB (58 before), ~100 MiB of
    it freed only by a collection. The chunks are dropped before the error leaves read_body."""
    import asyncio
    import gc
    import sys
    from collections.abc import AsyncIterator

    from starlette.requests import ClientDisconnect

    from oomdoctor.server.limits import ClientGone, read_body

    chunk = bytes(bytearray(100_000))  # an object of its own
    base = sys.getrefcount(chunk)

    async def upload_then_gone() -> AsyncIterator[bytes]:
        yield chunk
        raise ClientDisconnect()

    async def attempt() -> BaseException:
        try:
            await read_body(upload_then_gone(), BodyBudget(1 << 20), 60.0)
        except ClientGone as exc:
            return exc
        raise AssertionError("read_body returned")

    gc.disable()  # the traceback's cycles stay as an idle server leaves them
    try:
        error = asyncio.run(attempt())
        assert error.__context__ is not None and error.__context__.__traceback__ is not None
        assert sys.getrefcount(chunk) == base
    finally:
        gc.enable()


def test_memory_is_released_once_a_burst_of_bodies_is_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every TRIM_AFTER bytes of bodies given back schedule one release (collect the cycles, trim
    the heap), RELEASE_DELAY seconds later, whatever is still held: a trickling attack keeps a few
    bytes held for good, and the release used to wait for the budget to be empty."""
    import asyncio

    from oomdoctor.server import limits

    monkeypatch.setattr(limits, "RELEASE_DELAY", 0.0)
    budget = BodyBudget(1 << 30)

    async def burst() -> list[int]:
        seen = []
        budget.take(1, verified=False)  # a trickling connection's byte, held throughout
        for _ in range(3):
            budget.take(limits.TRIM_AFTER // 2)
            budget.give(limits.TRIM_AFTER // 2)
            seen.append(budget.releases)
        for _ in range(3):
            await asyncio.sleep(0)
        seen.append(budget.releases)
        return seen

    # one release scheduled at the second give, none more before it ran; then it ran once
    assert asyncio.run(burst()) == [0, 0, 0, 1]
    assert budget.used == 1 and budget._given == 0  # the release counted what was given before it ran
    budget.give(limits.TRIM_AFTER)  # no event loop: at once
    assert budget.releases == 2 and budget._given == 0


def test_healthz_answers_while_every_connection_holds_a_verified_upload(receiver: Receiver) -> None:
    """Nothing to displace (every connection a slow authorized upload): a new connection used to
    get 503 at once, /healthz included. Up to HEALTH_RESERVE connections over the cap are kept for
    /healthz: it answers 200 (and the connection is closed after it); anything else on them is a
    503 busy, authorized or not. A connection waiting for its headers is still displaced first."""
    from oomdoctor.server.protocol import HEALTH_RESERVE

    cfg = base_config(receiver, body_timeout=30.0, header_timeout=30.0, max_connections=CAP)
    with running_server(cfg) as (url, server):
        state = server.server_state
        held = []
        try:
            for _ in range(CAP):
                s = connect(url)
                s.sendall(
                    b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n"
                    + f"Authorization: {AUTH['Authorization']}\r\n\r\n".encode() + b"CUDA"
                )
                held.append(s)
            assert until(lambda: len(state.tasks) == CAP and not getattr(state, "oomdoctor_waiting", {1: 0}))
            assert not getattr(state, "oomdoctor_unverified", ())
            answers = []
            for request in (
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",  # keep-alive asked: closed all the same
                b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n"
                + f"Authorization: {AUTH['Authorization']}\r\n\r\nCUDA".encode(),
                b"GET /v1/rules HTTP/1.1\r\nHost: x\r\n\r\n",  # no token
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
            ):
                s = connect(url)
                s.sendall(request)
                answers.append(_answer(s))
                s.close()
            assert [a.split(b" ", 2)[1] for a in answers] == [b"200", b"503", b"503", b"200"], answers
            assert b'"status":"ok"' in answers[0] and b"connection: close" in answers[0].lower()
            assert b"server busy: too many open connections" in answers[1]
            # connections that send nothing cannot fill the reserve: each new one displaces the
            # one waiting before it (as under the cap), and /healthz still answers after them
            idle = [connect(url) for _ in range(HEALTH_RESERVE + 2)]
            held += idle
            for s in idle[:-1]:
                s.settimeout(PATIENCE)
                with contextlib.suppress(ConnectionResetError):
                    assert s.recv(65536) == b""
            assert until(lambda: len(state.oomdoctor_reserve) == 1)
            s = connect(url)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _answer(s).startswith(b"HTTP/1.1 200")
            s.close()
        finally:
            for s in held:
                s.close()
