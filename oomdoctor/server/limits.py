"""Request limits: body size (ASGI middleware), bounded concurrency and an analysis time limit."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from oomdoctor.redaction import redact_report
from oomdoctor.report import Report
from oomdoctor.rulepack import RulePack
from oomdoctor.scanner import RuleTimeout, Scanner

#: the analysis deadline is checked between chunks of this size (and before each candidate line)
CHUNK = 256 << 10

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class LimitError(Exception):
    """A request broke a limit; ``status`` and ``message`` become the JSON error response."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


async def send_json_error(send: Send, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's headers announce a body (a ``Content-Length`` over 0, or a ``Transfer-Encoding``)."""
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"0", b"")):
            return True
    return False


def _closing(msg: Message) -> Message:
    """``msg`` (a response start) with ``connection: close`` in place of any ``connection`` header."""
    headers = [(k, v) for k, v in msg.get("headers", []) if k.lower() != b"connection"]
    return {**msg, "headers": [*headers, (b"connection", b"close")]}


#: scope key set on a request that came on a connection of the health reserve (over the cap,
#: see ``protocol.HEALTH_RESERVE``): only ``/healthz`` is answered on it, and it is closed after
HEALTH_RESERVE_KEY = "oomdoctor.health_reserve"
BUSY = "server busy: too many open connections; retry shortly"


class BodyLimitMiddleware:
    """413 with a JSON message when a body is larger than ``max_body`` bytes.

    A declared ``Content-Length`` over the limit is refused before anything is read; a chunked
    body is counted as it arrives and refused as soon as it passes the limit.

    Any answer started before the request's body was read to its end (a refusal: 401, 404, 413,
    503 busy, ...) says ``connection: close``, and the server closes the connection after it: the
    rest of the body is never read (on keep-alive the server would read and drop every byte a
    refused client still sends).
    """

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    def message(self) -> str:
        return (
            f"request body too large: the limit is {_mib(self.max_body)} ({self.max_body} bytes); "
            "send the end of the log (the failure is near the end), or gzip it"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reserve = bool(scope.get(HEALTH_RESERVE_KEY))
        if reserve and scope.get("path") != "/healthz":
            await send_json_error(send, 503, BUSY, {"retry-after": "2", "connection": "close"})
            return
        names = {name for name, _value in scope.get("headers", [])}
        if b"content-length" in names and b"transfer-encoding" in names:
            # two framings: a proxy in front may read another body than ours (request smuggling);
            # RFC 9112 section 6.3 lets a server refuse it, and closing the connection is required
            await send_json_error(
                send, 400, "both Content-Length and Transfer-Encoding: send one framing", {"connection": "close"}
            )
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_json_error(send, 400, "invalid Content-Length header", {"connection": "close"})
                    return
                if declared > self.max_body:
                    await send_json_error(send, 413, self.message(), {"connection": "close"})
                    return
        seen = 0
        started = False
        body_read = not _has_body(scope.get("headers", []))

        async def limited_receive() -> Message:
            nonlocal seen, body_read
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_body:
                    raise LimitError(413, self.message())
                body_read = body_read or not msg.get("more_body", False)
            return msg

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                if not body_read or reserve:
                    msg = _closing(msg)
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except LimitError as exc:
            if not started:
                await send_json_error(send, exc.status, exc.message, {"connection": "close"})


class AccessLogMiddleware:
    """One line per request: method, path (never the query string), status, milliseconds. No bodies.

    A request the client abandoned before any answer is logged with status 499, not as an error."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log = logging.getLogger("oomdoctor.server.access")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 499  # no response: the client closed the connection first (nginx's code for it)

        async def tracking_send(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = int(msg["status"])
            await send(msg)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            self.log.info(
                "%s %s %d %.1fms", scope.get("method", "?"), scope.get("path", "?"), status,
                (time.perf_counter() - t0) * 1000,
            )


class ClientGone(Exception):
    """The client closed the connection before its request was read: nothing to answer, no error."""


class BodyBudget:
    """Bytes of request bodies buffered at once across all requests (per process).

    Reading a body happens before an analysis slot is free, so without a budget ``connections x
    max_body`` bytes could wait in memory; over budget a request is refused with 503 busy.

    Bodies of *unverified* requests (whose credentials, if any, are in the body: Slack's signature,
    Mattermost's form token) may hold at most ``unverified_share`` of the budget, so unauthenticated
    clients cannot starve authorized ones: those always keep the rest."""

    def __init__(self, limit: int, unverified_share: float = 0.25) -> None:
        self.limit = limit
        self.unverified_limit = int(limit * unverified_share)
        self.used = 0
        self.used_unverified = 0
        self._given = 0  # bytes given back since memory was last released
        self._release_due = False  # a release is scheduled
        self.releases = 0  # how many times memory was released

    def take(self, n: int, *, verified: bool = True) -> None:
        if self.used + n > self.limit or (not verified and self.used_unverified + n > self.unverified_limit):
            raise LimitError(503, "server busy: too many request bodies in flight; retry shortly", {"retry-after": "2"})
        self.used += n
        if not verified:
            self.used_unverified += n

    def give(self, n: int, *, verified: bool = True) -> None:
        self.used = max(0, self.used - n)
        if not verified:
            self.used_unverified = max(0, self.used_unverified - n)
        self._given += n
        if self._given >= TRIM_AFTER and not self._release_due:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop (a test, a script): at once
                self._release()
                return
            # a moment later: what the burst's other requests held is freed by then too
            self._release_due = True
            loop.call_later(RELEASE_DELAY, self._release)

    def _release(self) -> None:
        self._given = 0
        self._release_due = False
        self.releases += 1
        release_memory()


#: bytes of bodies given back after which the memory they held is returned to the system
TRIM_AFTER = 16 << 20
#: seconds after that before it is done (at most once per this many seconds)
RELEASE_DELAY = 5.0


def release_memory() -> None:
    """Return the memory of bodies no longer held to the system: collect the reference cycles
    that may still hold one (an exception's traceback and its frames), then trim the heap."""
    gc.collect()
    _trim_heap()


def settle_heap() -> None:
    """Once the server is set up: collect, then freeze what lives now (the rule pack, the app),
    so that each later collection, the automatic ones and :func:`release_memory`'s, walks only
    the objects made since (a few milliseconds instead of ~40)."""
    gc.collect()
    gc.freeze()


def _trim_heap() -> None:
    """Give the heap's free memory back to the system (glibc's ``malloc_trim``; nothing elsewhere):
    bodies arrive as many small chunks, and without it the process keeps the memory of the
    largest burst of uploads it ever held (an attack's 4 MiB bodies: ~80 MiB more, for good)."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError, TypeError):  # not glibc (musl, macOS, Windows)
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None


async def read_body(
    receive_stream: AsyncIterator[bytes], budget: BodyBudget, timeout: float, *, verified: bool = True, limit: int | None = None
) -> tuple[list[bytes], int]:
    """The request body as its chunks, and the bytes taken from ``budget`` (give them back when done,
    with the same ``verified``). ``limit``: 413 past this many bytes.

    408 when the body does not arrive within ``timeout`` seconds (a client trickling its upload);
    :class:`ClientGone` when the client disconnects (an aborted upload is not an error)."""
    from starlette.requests import ClientDisconnect

    chunks: list[bytes] = []
    taken = 0

    async def pull() -> None:
        nonlocal taken
        async for chunk in receive_stream:
            if chunk:
                if limit is not None and taken + len(chunk) > limit:
                    raise LimitError(413, f"request body too large for this endpoint: the limit is {_mib(limit)}", {"connection": "close"})
                budget.take(len(chunk), verified=verified)
                taken += len(chunk)
                chunks.append(chunk)
            del chunk  # (nor kept by this frame when the next read fails)

    # on an error the chunks are dropped here, before the budget is given back: the frames of the
    # exception's traceback (kept alive by reference cycles until the garbage collector runs) still
    # see this list, and would otherwise hold the refused body's bytes
    try:
        await asyncio.wait_for(pull(), timeout)
    except asyncio.TimeoutError:
        chunks.clear()
        budget.give(taken, verified=verified)
        raise LimitError(408, f"request body not received within {timeout:g} s", {"connection": "close"}) from None
    except ClientDisconnect:
        chunks.clear()
        budget.give(taken, verified=verified)
        raise ClientGone() from None
    except BaseException:
        chunks.clear()
        budget.give(taken, verified=verified)
        raise
    return chunks, taken


class ErrorShieldMiddleware:
    """No exception leaves the application: a client disconnect is logged at debug level and left
    unanswered; anything else is one log line (the exception's type, never its text, which may hold
    log content) and a JSON 500. Starlette's own handler would re-raise for uvicorn to print a traceback."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log = logging.getLogger("oomdoctor.server")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if _client_went_away(exc):
                self.log.debug("client disconnected during %s %s", scope.get("method"), scope.get("path"))
                return
            self.log.error("internal error on %s %s: %s", scope.get("method"), scope.get("path"), type(exc).__name__)
            if not started:
                with contextlib.suppress(Exception):  # the connection may be gone too
                    await send_json_error(send, 500, "internal error")


def _client_went_away(exc: Exception) -> bool:
    """Our own :class:`ClientGone`, or starlette's ``ClientDisconnect`` raised where the body is read
    outside :func:`read_body` (matched by name: starlette is an optional import here)."""
    return isinstance(exc, ClientGone) or type(exc).__name__ == "ClientDisconnect"


def gunzip(data: bytes | list[bytes], max_out: int, *, coding: str = "gzip") -> bytes:
    """Decompress gzip (or zlib) ``data`` as a stream, refusing output over ``max_out`` bytes (gzip bombs).

    Every member of a multi-member gzip stream is read (``cat a.gz b.gz``, ``pigz``, log rotation);
    trailing zero bytes (padding) are ignored. ``coding="deflate"`` reads HTTP's deflate (the zlib
    format, or raw deflate as some clients send it).

    ``data`` may be the body's chunks as received: each is decompressed and dropped in turn, and the
    running output is capped, so memory stays within ``max_out`` plus one chunk whatever the ratio."""
    chunks = data if isinstance(data, list) else [data]
    label = "deflate" if coding == "deflate" else "gzip"

    def new() -> Any:
        return zlib.decompressobj(wbits=15 if coding == "deflate" else 47)  # 47 = 32 + 15: gzip or zlib, detected

    d = new()
    started = False  # any byte of the current member seen
    out = bytearray()
    too_large = LimitError(413, f"decompressed log too large: the limit is {_mib(max_out)} ({max_out} bytes)")
    try:
        while chunks:
            piece: bytes = chunks.pop(0)
            while piece:
                if d.eof:  # the previous member ended: the rest is another member, or padding
                    if not piece.strip(b"\0"):
                        break
                    d, started = new(), False
                if coding == "deflate" and not started and (piece[0] & 0x0F) != 8:
                    d = zlib.decompressobj(wbits=-15)  # no zlib header: raw deflate
                started = True
                out += d.decompress(piece, max_out + 1 - len(out))
                if len(out) > max_out:
                    raise too_large
                piece = d.unconsumed_tail or (d.unused_data if d.eof else b"")
        if not d.eof:
            out += d.flush(max_out + 1 - len(out))
    except zlib.error as exc:
        raise LimitError(400, f"body is not valid {label}: {exc}") from None
    if not d.eof and len(out) <= max_out:
        raise LimitError(400, f"body is not valid {label}: the stream ends early (truncated upload?)")
    if len(out) > max_out:
        raise too_large
    return bytes(out)


#: Content-Encoding values /v1/diagnose decodes (any other is a 415, checked before the body is read)
CODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
MAX_CODINGS = 2


def content_codings(header: str) -> list[str]:
    """The codings of a ``Content-Encoding`` header in the order applied (``identity`` dropped);
    415 for one that is not supported or for more than :data:`MAX_CODINGS`."""
    codings = [c.strip().lower() for c in header.split(",") if c.strip() and c.strip().lower() != "identity"]
    for c in codings:
        if c not in CODINGS:
            raise LimitError(415, f"unsupported Content-Encoding {c[:40]!r}: send gzip, deflate or identity")
    if len(codings) > MAX_CODINGS:
        raise LimitError(415, f"too many Content-Encodings ({len(codings)}; at most {MAX_CODINGS})")
    return [CODINGS[c] for c in codings]


def decode_codings(chunks: list[bytes], codings: list[str], max_out: int) -> bytes:
    """The body with every coding undone (the last applied first), each under ``max_out``."""
    if not codings:
        body = b"".join(chunks)
        chunks.clear()
        return body
    body = b""
    for i, coding in enumerate(reversed(codings)):
        body = gunzip(chunks if i == 0 else [body], max_out, coding=coding)
    return body


class AnalysisTimeout(Exception):
    pass


class Deadline:
    """The time limit of one request's work in its worker thread (decoding, analysis, redaction,
    rendering). ``clock``: seconds, ascending (a test's own)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self.at = clock() + seconds

    def check(self) -> None:
        if self.clock() > self.at:
            raise AnalysisTimeout()


def analyse(
    data: bytes, pack: RulePack, hints: Mapping[str, str], timeout: float | Deadline, source: str = "<request>"
) -> Report:
    """Diagnose ``data``, stopping with :class:`AnalysisTimeout` once ``timeout`` seconds have passed.

    The deadline is checked before each candidate line is read (the costly work: a line read
    costs at most a few milliseconds, its regexes bounded by ``REGEX_TIMEOUT``) and between
    chunks (the prefilter's pass over one), so the limit holds within a small fraction of itself."""
    deadline = timeout if isinstance(timeout, Deadline) else Deadline(timeout)
    scanner = Scanner(pack, source=source, hints=dict(hints))
    scanner.tick = deadline.check
    view = memoryview(data)
    for start in range(0, len(data), CHUNK):
        scanner.feed(bytes(view[start : start + CHUNK]))
        deadline.check()
    report = scanner.close()
    deadline.check()
    return report


T = TypeVar("T")


class Analyser:
    """Runs each request's work in a worker thread, at most ``max_concurrency`` at once, each within ``timeout``.

    The work is everything that costs CPU or memory in proportion to the body: decompression,
    JSON parsing and validation, analysis, redaction and rendering. None of it runs on the event
    loop, and none of it starts before a slot is free."""

    def __init__(self, pack: RulePack, max_concurrency: int, timeout: float, queue_timeout: float) -> None:
        self.pack = pack
        self.timeout = timeout
        self.queue_timeout = queue_timeout
        self.max_concurrency = max_concurrency
        self._sem: asyncio.Semaphore | None = None
        self.running = 0

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:  # created lazily inside the server's event loop
            self._sem = asyncio.Semaphore(self.max_concurrency)
        return self._sem

    async def call(self, work: Callable[[Deadline], T]) -> T:
        """Run ``work(deadline)`` in a worker thread once a slot is free (503 when none frees in time)."""
        sem = self._semaphore()
        try:
            await asyncio.wait_for(sem.acquire(), self.queue_timeout)
        except asyncio.TimeoutError:
            raise LimitError(
                503, f"server busy: {self.max_concurrency} analyses running; retry shortly", {"retry-after": "2"}
            ) from None
        self.running += 1
        try:
            return await asyncio.to_thread(work, Deadline(self.timeout))
        except AnalysisTimeout:
            raise LimitError(
                503,
                f"analysis stopped at the time limit of {self.timeout:g} s; send a shorter excerpt "
                "(the failure and the lines before it)",
            ) from None
        except RuleTimeout as exc:
            raise LimitError(503, f"analysis stopped: {exc}") from None
        finally:
            self.running -= 1
            sem.release()

    def report(self, data: bytes, hints: Mapping[str, str], deadline: Deadline) -> Report:
        """The redacted report of ``data`` (in the worker thread, within ``deadline``)."""
        report = redact_report(analyse(data, self.pack, hints, deadline))
        deadline.check()
        return report

    async def run(self, data: bytes, hints: Mapping[str, str]) -> Report:
        """The redacted report of ``data``, analysed and redacted in a worker thread under the limits."""
        return await self.call(lambda deadline: self.report(data, hints, deadline))
