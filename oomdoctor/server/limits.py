"""Request limits: body size (ASGI middleware), bounded concurrency and an analysis time limit."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from oomdoctor.report import Report
from oomdoctor.rulepack import RulePack
from oomdoctor.scanner import RuleTimeout, Scanner

#: the analysis deadline is checked between chunks of this size
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


class BodyLimitMiddleware:
    """413 with a JSON message when a body is larger than ``max_body`` bytes.

    A declared ``Content-Length`` over the limit is refused before anything is read; a chunked
    body is counted as it arrives and refused as soon as it passes the limit.
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
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_json_error(send, 400, "invalid Content-Length header")
                    return
                if declared > self.max_body:
                    await send_json_error(send, 413, self.message(), {"connection": "close"})
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_body:
                    raise LimitError(413, self.message())
            return msg

        async def tracking_send(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except LimitError as exc:
            if not started:
                await send_json_error(send, exc.status, exc.message, {"connection": "close"})


class AccessLogMiddleware:
    """One line per request: method, path (never the query string), status, milliseconds. No bodies."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.log = logging.getLogger("oomdoctor.server.access")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500

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


def gunzip(data: bytes, max_out: int) -> bytes:
    """Decompress gzip (or zlib) ``data``, refusing output over ``max_out`` bytes (gzip bombs)."""
    d = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, detected
    try:
        out = d.decompress(data, max_out + 1)
    except zlib.error as exc:
        raise LimitError(400, f"body is not valid gzip: {exc}") from None
    if len(out) > max_out or d.unconsumed_tail:
        raise LimitError(413, f"decompressed log too large: the limit is {_mib(max_out)} ({max_out} bytes)")
    return out


class AnalysisTimeout(Exception):
    pass


def analyse(data: bytes, pack: RulePack, hints: Mapping[str, str], timeout: float, source: str = "<request>") -> Report:
    """Diagnose ``data``, stopping with :class:`AnalysisTimeout` once ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    scanner = Scanner(pack, source=source, hints=dict(hints))
    view = memoryview(data)
    for start in range(0, len(data), CHUNK):
        scanner.feed(bytes(view[start : start + CHUNK]))
        if time.monotonic() > deadline:
            raise AnalysisTimeout()
    report = scanner.close()
    if time.monotonic() > deadline:
        raise AnalysisTimeout()
    return report


class Analyser:
    """Runs analyses in worker threads, at most ``max_concurrency`` at once, each within ``timeout``."""

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

    async def run(self, data: bytes, hints: Mapping[str, str]) -> Report:
        sem = self._semaphore()
        try:
            await asyncio.wait_for(sem.acquire(), self.queue_timeout)
        except asyncio.TimeoutError:
            raise LimitError(
                503, f"server busy: {self.max_concurrency} analyses running; retry shortly", {"retry-after": "2"}
            ) from None
        self.running += 1
        try:
            return await asyncio.to_thread(analyse, data, self.pack, hints, self.timeout)
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
