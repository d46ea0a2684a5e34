"""oomdoctor.server.limits in-process: the exact edges of each limit (issue 38 §3).

tests/test_server_hardening.py drives a real server in another process, where a mutation run
cannot reach; these call the middleware, the budget and the decoders directly with hand-made ASGI
messages, so each boundary (a body exactly at the limit, one byte over, the budget given back on
every error path) is pinned by a value, never by a time.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("starlette")

from starlette.requests import ClientDisconnect

from oomdoctor.server import limits
from oomdoctor.server.limits import (
    CHUNK,
    AccessLogMiddleware,
    Analyser,
    AnalysisTimeout,
    BodyBudget,
    BodyLimitMiddleware,
    ClientGone,
    Deadline,
    ErrorShieldMiddleware,
    LimitError,
    content_codings,
    decode_codings,
    gunzip,
    read_body,
)

Message = dict[str, Any]


def _http(headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/v1/diagnose", "headers": headers or []}


class _Recorder:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    async def __call__(self, msg: Message) -> None:
        self.sent.append(msg)

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return int(starts[0]["status"]) if starts else None

    @property
    def headers(self) -> dict[bytes, bytes]:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return dict(starts[0]["headers"]) if starts else {}

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def _receiver(*bodies: bytes) -> Any:
    queue = [{"type": "http.request", "body": b, "more_body": i < len(bodies) - 1} for i, b in enumerate(bodies)]

    async def receive() -> Message:
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    return receive


class _ReadingApp:
    """Reads the whole body, then answers 200 with its length."""

    def __init__(self) -> None:
        self.called = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.called = True
        n = 0
        while True:
            msg = await receive()
            n += len(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(n).encode()})


def _call(mw: Any, scope: dict[str, Any], receive: Any) -> _Recorder:
    rec = _Recorder()
    asyncio.run(mw(scope, receive, rec))
    return rec


# -- BodyLimitMiddleware -------------------------------------------------------------------------


@pytest.mark.parametrize(("declared", "status"), [(1000, 200), (999, 200), (1001, 413), (0, 200)])
def test_content_length_at_the_limit_is_read_one_over_is_refused(declared: int, status: int) -> None:
    app = _ReadingApp()
    rec = _call(BodyLimitMiddleware(app, 1000), _http([(b"content-length", str(declared).encode())]),
                _receiver(b"x" * min(declared, 1000)))
    assert rec.status == status
    assert app.called is (status == 200)
    if status == 413:
        assert rec.headers[b"connection"] == b"close"
        assert b"the limit is 1000 bytes (1000 bytes)" in rec.body


@pytest.mark.parametrize(("chunks", "status"), [((500, 500), 200), ((500, 501), 413), ((1000,), 200), ((1001,), 413)])
def test_a_chunked_body_is_counted_as_it_arrives(chunks: tuple[int, ...], status: int) -> None:
    app = _ReadingApp()
    rec = _call(BodyLimitMiddleware(app, 1000), _http(), _receiver(*(b"x" * n for n in chunks)))
    assert rec.status == status
    if status == 200:
        assert rec.body == str(sum(chunks)).encode()
    else:
        assert rec.headers[b"connection"] == b"close"


def test_over_the_limit_after_the_answer_started_sends_nothing_more() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await receive()

    rec = _call(BodyLimitMiddleware(app, 10), _http(), _receiver(b"x" * 11))
    assert [m["type"] for m in rec.sent] == ["http.response.start"]
    assert rec.status == 200


def test_two_framings_and_a_bad_length_are_400() -> None:
    both = _http([(b"content-length", b"5"), (b"transfer-encoding", b"chunked")])
    rec = _call(BodyLimitMiddleware(_ReadingApp(), 1000), both, _receiver(b"x"))
    assert (rec.status, rec.headers[b"connection"]) == (400, b"close")
    rec = _call(BodyLimitMiddleware(_ReadingApp(), 1000), _http([(b"content-length", b"five")]), _receiver(b"x"))
    assert rec.status == 400 and rec.body == b'{"error": "invalid Content-Length header"}'
    assert rec.headers[b"content-length"] == str(len(rec.body)).encode()


def test_other_scopes_pass_through_untouched() -> None:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    for mw in (BodyLimitMiddleware(app, 0), AccessLogMiddleware(app), ErrorShieldMiddleware(app)):
        _call(mw, {"type": "lifespan"}, _receiver())
    assert seen == ["lifespan"] * 3


@pytest.mark.parametrize(
    ("limit", "text"),
    [(2**20, "1.0 MiB (1048576 bytes)"), (2**20 - 1, "1048575 bytes (1048575 bytes)"), (3 * 2**19, "1.5 MiB (1572864 bytes)")],
)
def test_the_limit_is_named_in_mib_from_one_mib(limit: int, text: str) -> None:
    assert f"the limit is {text};" in BodyLimitMiddleware(_ReadingApp(), limit).message()


# -- BodyBudget ----------------------------------------------------------------------------------


def test_body_budget_edges_and_the_unverified_share() -> None:
    b = BodyBudget(100)
    assert b.unverified_limit == 25
    b.take(100)
    with pytest.raises(LimitError) as exc:
        b.take(1)
    assert (exc.value.status, exc.value.headers) == (503, {"retry-after": "2"})
    b.give(100)
    assert b.used == 0
    b.take(25, verified=False)
    assert (b.used, b.used_unverified) == (25, 25)
    with pytest.raises(LimitError):
        b.take(1, verified=False)
    b.take(75)  # authorized requests keep the rest
    assert b.used == 100
    b.give(75)
    b.give(25, verified=False)
    assert (b.used, b.used_unverified) == (0, 0)
    b.give(10, verified=False)  # never below zero
    assert (b.used, b.used_unverified) == (0, 0)
    assert BodyBudget(10, unverified_share=0.5).unverified_limit == 5


# -- read_body -----------------------------------------------------------------------------------


async def _stream(*chunks: bytes, then: BaseException | None = None, hang: bool = False) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c
    if then is not None:
        raise then
    if hang:
        await asyncio.Event().wait()


def test_read_body_takes_its_bytes_and_skips_empty_chunks() -> None:
    b = BodyBudget(1000)
    chunks, taken = asyncio.run(read_body(_stream(b"ab", b"", b"cde"), b, 60))
    assert (chunks, taken, b.used) == ([b"ab", b"cde"], 5, 5)


@pytest.mark.parametrize(("limit", "ok"), [(5, True), (4, False), (None, True)])
def test_read_body_endpoint_limit_is_inclusive(limit: int | None, ok: bool) -> None:
    b = BodyBudget(1000)
    if ok:
        assert asyncio.run(read_body(_stream(b"ab", b"cde"), b, 60, limit=limit))[1] == 5
        return
    with pytest.raises(LimitError) as exc:
        asyncio.run(read_body(_stream(b"ab", b"cde"), b, 60, limit=limit))
    assert exc.value.status == 413 and "the limit is 4 bytes" in exc.value.message
    assert b.used == 0  # what was taken is given back


@pytest.mark.parametrize("verified", [True, False])
def test_read_body_gives_the_budget_back_on_timeout_and_disconnect(verified: bool) -> None:
    b = BodyBudget(1000)
    with pytest.raises(LimitError) as exc:
        asyncio.run(read_body(_stream(b"abc", hang=True), b, 0.01, verified=verified))
    assert (exc.value.status, exc.value.headers) == (408, {"connection": "close"})
    assert exc.value.message == "request body not received within 0.01 s"
    assert (b.used, b.used_unverified) == (0, 0)
    with pytest.raises(ClientGone):
        asyncio.run(read_body(_stream(b"abc", then=ClientDisconnect()), b, 60, verified=verified))
    assert (b.used, b.used_unverified) == (0, 0)
    with pytest.raises(ValueError):
        asyncio.run(read_body(_stream(b"abc", then=ValueError()), b, 60, verified=verified))
    assert (b.used, b.used_unverified) == (0, 0)


# -- gunzip and the codings ----------------------------------------------------------------------


TEXT = b"line\n" * 200


@pytest.mark.parametrize(
    ("body", "coding"),
    [
        (gzip.compress(TEXT, mtime=0), "gzip"),
        (zlib.compress(TEXT), "gzip"),  # a zlib body under gzip: detected by the header (wbits 47)
        (zlib.compress(TEXT), "deflate"),  # HTTP's deflate is zlib
        (zlib.compress(TEXT)[2:-4], "deflate"),  # raw deflate, no zlib header
    ],
    ids=["gzip", "zlib-as-gzip", "zlib", "raw-deflate"],  # fixed ids: pytest-xdist workers must agree
)
def test_gunzip_reads_each_format(body: bytes, coding: str) -> None:
    assert gunzip(body, len(TEXT), coding=coding) == TEXT
    with pytest.raises(LimitError) as exc:
        gunzip(body, len(TEXT) - 1, coding=coding)
    assert exc.value.status == 413
    assert exc.value.message == f"decompressed log too large: the limit is {len(TEXT) - 1} bytes ({len(TEXT) - 1} bytes)"


def test_gunzip_reads_every_member_and_ignores_padding() -> None:
    two = gzip.compress(b"a\n") + gzip.compress(b"b\n")
    assert gunzip(two, 4) == b"a\nb\n"
    assert gunzip([two[:5], two[5:] + b"\0" * 8], 4) == b"a\nb\n"
    with pytest.raises(LimitError):
        gunzip(two, 3)


@pytest.mark.parametrize(("coding", "label"), [("gzip", "gzip"), ("deflate", "deflate")])
def test_gunzip_errors_say_the_coding(coding: str, label: str) -> None:
    body = gzip.compress(TEXT) if coding == "gzip" else zlib.compress(TEXT)
    with pytest.raises(LimitError) as exc:
        gunzip(body[: len(body) // 2], 10**6, coding=coding)
    assert (exc.value.status, exc.value.message) == (
        400, f"body is not valid {label}: the stream ends early (truncated upload?)")
    with pytest.raises(LimitError) as exc:
        gunzip(b"\x78\x9c\xff\xff\xff\xff", 10**6, coding=coding)  # a zlib header, then block type 3
    assert (exc.value.status, exc.value.message) == (
        400, f"body is not valid {label}: Error -3 while decompressing data: invalid block type")


def test_content_codings_edges() -> None:
    assert content_codings("") == []
    assert content_codings("identity") == []
    assert content_codings(" GZIP , identity, x-gzip") == ["gzip", "gzip"]
    assert content_codings("deflate,gzip") == ["deflate", "gzip"]
    with pytest.raises(LimitError) as exc:
        content_codings("gzip, gzip, gzip")
    assert (exc.value.status, exc.value.message) == (415, "too many Content-Encodings (3; at most 2)")
    with pytest.raises(LimitError) as exc:
        content_codings("br" + "x" * 60)
    assert exc.value.status == 415
    assert exc.value.message == f"unsupported Content-Encoding {('br' + 'x' * 38)!r}: send gzip, deflate or identity"


def test_decode_codings_undoes_the_last_coding_first() -> None:
    chunks = [b"ab", b"c"]
    assert decode_codings(chunks, [], 10) == b"abc"
    assert chunks == []
    both = gzip.compress(zlib.compress(TEXT))  # deflate applied first, then gzip
    assert decode_codings([both], ["deflate", "gzip"], len(TEXT)) == TEXT


# -- deadline, analysis, concurrency -------------------------------------------------------------


def test_deadline_is_passed_only_after_its_instant() -> None:
    now = [100.0]
    d = Deadline(5, clock=lambda: now[0])
    assert (d.seconds, d.at) == (5, 105.0)
    now[0] = 105.0
    d.check()  # exactly at the instant: not yet passed
    now[0] = 105.5
    with pytest.raises(AnalysisTimeout):
        d.check()


def test_analyse_feeds_the_scanner_in_chunks_and_checks_after_each(monkeypatch: pytest.MonkeyPatch) -> None:
    fed: list[int] = []
    checks: list[int] = []

    class FakeScanner:
        def __init__(self, pack: Any, source: str, hints: dict[str, str]) -> None:
            assert (source, hints) == ("src", {"a": "b"})

        def feed(self, data: bytes) -> None:
            fed.append(len(data))

        def close(self) -> str:
            return "report"

    class CountingDeadline(Deadline):
        def check(self) -> None:
            checks.append(len(fed))

    monkeypatch.setattr(limits, "Scanner", FakeScanner)
    assert CHUNK == 262144
    out = limits.analyse(b"x" * (2 * CHUNK + 1), None, {"a": "b"}, CountingDeadline(60), source="src")  # type: ignore[arg-type]
    assert out == "report"
    assert fed == [CHUNK, CHUNK, 1]
    assert checks == [1, 2, 3, 3]  # after each chunk, and once more after close
    fed.clear()
    checks.clear()
    limits.analyse(b"x" * CHUNK, None, {"a": "b"}, CountingDeadline(60), source="src")  # type: ignore[arg-type]
    assert fed == [CHUNK]


def test_analyser_limits_and_messages() -> None:
    from oomdoctor.scanner import RuleTimeout

    an = Analyser(None, max_concurrency=1, timeout=2.5, queue_timeout=0.01)  # type: ignore[arg-type]

    def boom(exc: BaseException) -> Any:
        def work(deadline: Deadline) -> None:
            assert deadline.seconds == 2.5
            raise exc
        return work

    with pytest.raises(LimitError) as err:
        asyncio.run(an.call(boom(AnalysisTimeout())))
    assert err.value.status == 503
    assert err.value.message.startswith("analysis stopped at the time limit of 2.5 s;")
    with pytest.raises(LimitError) as err:
        asyncio.run(an.call(boom(RuleTimeout("rule x"))))
    assert (err.value.status, err.value.message) == (503, "analysis stopped: rule x")
    assert an.running == 0
    assert asyncio.run(an.call(lambda d: 7)) == 7

    async def busy() -> LimitError:
        an2 = Analyser(None, max_concurrency=1, timeout=60, queue_timeout=0.01)  # type: ignore[arg-type]
        gate = asyncio.Event()
        holder = asyncio.ensure_future(an2.call(lambda d: asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()))
        loop = asyncio.get_running_loop()
        while an2.running == 0:
            await asyncio.sleep(0)
        try:
            await an2.call(lambda d: None)
        except LimitError as exc:
            gate.set()
            await holder
            assert an2.running == 0
            return exc
        raise AssertionError("a second analysis ran beside the first")

    exc = asyncio.run(busy())
    assert (exc.status, exc.headers) == (503, {"retry-after": "2"})
    assert exc.message == "server busy: 1 analyses running; retry shortly"


# -- access log and error shield -----------------------------------------------------------------


def test_access_log_names_the_status_or_499(caplog: pytest.LogCaptureFixture) -> None:
    async def ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})

    async def gone(scope: dict[str, Any], receive: Any, send: Any) -> None:
        return None

    with caplog.at_level(logging.INFO, logger="oomdoctor.server.access"):
        _call(AccessLogMiddleware(ok), _http(), _receiver())
        _call(AccessLogMiddleware(gone), _http(), _receiver())
    lines = [r.getMessage() for r in caplog.records if r.name == "oomdoctor.server.access"]
    assert [line.rsplit(" ", 1)[0] for line in lines] == ["POST /v1/diagnose 204", "POST /v1/diagnose 499"]


def test_error_shield_answers_500_once_and_ignores_departed_clients() -> None:
    async def fails(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise RuntimeError("secret log text")

    async def fails_late(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("x")

    async def departs(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise ClientDisconnect()

    rec = _call(ErrorShieldMiddleware(fails), _http(), _receiver())
    assert (rec.status, rec.body) == (500, b'{"error": "internal error"}')
    rec = _call(ErrorShieldMiddleware(fails_late), _http(), _receiver())
    assert [m["type"] for m in rec.sent] == ["http.response.start"]
    assert _call(ErrorShieldMiddleware(departs), _http(), _receiver()).sent == []


def test_a_stream_cut_before_its_trailer_is_truncated_even_at_the_limit() -> None:
    body = gzip.compress(TEXT)[:-8]  # every byte of the text, no CRC and size: the stream never ends
    for limit in (len(TEXT), len(TEXT) + 1):
        with pytest.raises(LimitError) as exc:
            gunzip(body, limit)
        assert (exc.value.status, exc.value.message) == (400, "body is not valid gzip: the stream ends early (truncated upload?)")


def test_access_log_milliseconds(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clock = iter([1.0, 1.25])
    monkeypatch.setattr(limits.time, "perf_counter", lambda: next(clock))

    async def ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    with caplog.at_level(logging.INFO, logger="oomdoctor.server.access"):
        _call(AccessLogMiddleware(ok), _http(), _receiver())
    assert [r.getMessage() for r in caplog.records if r.name == "oomdoctor.server.access"] == [
        "POST /v1/diagnose 200 250.0ms"]


# -- what the server hardening added since the first mutation run (issue 38 §4) ------------------


@pytest.mark.parametrize(
    ("headers", "has"),
    [
        ([], False),
        ([(b"content-length", b"0")], False),
        ([(b"content-length", b" ")], False),  # blank after stripping: no body
        ([(b"content-length", b"5")], True),
        ([(b"transfer-encoding", b"chunked")], True),
        ([(b"x-length", b"5")], False),  # another header with a number
    ],
)
def test_has_body_reads_the_framing_headers(headers: list[tuple[bytes, bytes]], has: bool) -> None:
    assert limits._has_body(headers) is has


def test_closing_replaces_any_connection_header() -> None:
    msg = {"type": "http.response.start", "status": 401, "headers": [(b"Connection", b"keep-alive"), (b"x-a", b"1")]}
    assert limits._closing(msg)["headers"] == [(b"x-a", b"1"), (b"connection", b"close")]


@pytest.mark.parametrize(("path", "status"), [("/healthz", 200), ("/v1/diagnose", 503)])
def test_a_health_reserve_connection_answers_only_healthz(path: str, status: int) -> None:
    app = _ReadingApp()
    scope = {**_http(), "path": path, limits.HEALTH_RESERVE_KEY: True}
    rec = _call(BodyLimitMiddleware(app, 100), scope, _receiver(b""))
    assert rec.status == status and app.called is (status == 200)
    if status == 503:
        assert rec.headers[b"retry-after"] == b"2" and rec.headers[b"connection"] == b"close"
        assert limits.BUSY.encode() in rec.body


class _Loop:
    """Records what give() schedules instead of running it later."""

    def __init__(self) -> None:
        self.later: list[tuple[float, Any]] = []

    def call_later(self, delay: float, fn: Any) -> None:
        self.later.append((delay, fn))


def test_memory_is_released_after_16_mib_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """No event loop: released at once when 16 MiB have been given back since the last release,
    and the count starts again from 0."""
    calls: list[int] = []
    monkeypatch.setattr(limits, "release_memory", lambda: calls.append(1))
    mib = 1 << 20
    b = BodyBudget(64 * mib)
    assert (b.releases, b._given) == (0, 0)
    b.take(32 * mib)
    b.give(16 * mib - 1)
    assert (b.releases, calls) == (0, [])
    b.give(1)  # exactly 16 MiB
    assert (b.releases, len(calls), b._given) == (1, 1, 0)
    b.give(16 * mib - 1)
    assert b.releases == 1


def test_with_a_loop_the_release_waits_5_seconds_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = _Loop()
    monkeypatch.setattr(limits.asyncio, "get_running_loop", lambda: loop)
    monkeypatch.setattr(limits, "release_memory", lambda: None)
    b = BodyBudget(64 << 20)
    b.take(40 << 20)
    b.give(16 << 20)
    b.give(16 << 20)  # a release is already due: not scheduled twice
    assert [delay for delay, _fn in loop.later] == [5.0] and b.releases == 0
    loop.later[0][1]()
    assert b.releases == 1 and b._release_due is False


def test_trim_heap_looks_malloc_trim_up_once_and_asks_it_to_keep_no_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[int] = []
    monkeypatch.setattr(limits, "_malloc_trim", called.append)
    limits._trim_heap()
    assert called == [0]
    monkeypatch.setattr(limits, "_malloc_trim", None)
    limits._trim_heap()
    assert limits._malloc_trim is not None  # found (glibc) or False: looked up once
