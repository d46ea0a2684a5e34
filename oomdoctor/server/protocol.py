"""Connection limits under uvicorn: a header deadline and a connection cap that sheds with a 503.

uvicorn times out idle keep-alive connections but not a connection that never finishes its
request headers, and it accepts connections until the process runs out of file descriptors
(then asyncio logs a traceback per refused ``accept``). :class:`GuardedH11Protocol` adds:

* a **header deadline**: a connection must send its request line and headers within
  ``header_timeout`` seconds of connecting (or of its previous response); it is closed otherwise.
  The deadline is not extended by data, so a client trickling one byte at a time gains nothing;
* a **connection cap**: at ``max_connections`` open connections, a new one displaces the oldest
  connection still waiting for its request headers (one that connected less than
  :data:`WAIT_GRACE` ago only when nothing else can go), else the oldest one still sending the body of
  an *unverified* request (one whose credentials are not in its headers: a Slack request, whose
  signature covers the body, a Mattermost request with the token in its form, any other path);
  when every connection is busy with a verified request (``/healthz``, a ``/v1`` request with the
  API token or a server without one, Mattermost's ``Authorization: Token``) the new one is answered
  ``503`` (JSON, ``Retry-After``) and closed, past the reserve below. Slow, half-open or unauthenticated clients therefore
  cannot lock out ``/healthz`` or authorized requests;
* a **reserve for health checks**: when nothing can be displaced (every connection holds a
  verified request: slow authorized uploads, say), up to :data:`HEALTH_RESERVE` connections over
  the cap are kept instead of the 503; each may ask only for ``/healthz`` (anything else is
  answered 503 busy) and is closed after its answer. So ``/healthz`` answers even then.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
from collections import OrderedDict
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from oomdoctor.server.config import ServerConfig
from oomdoctor.server.limits import BUSY, HEALTH_RESERVE_KEY

_BUSY_BODY = json.dumps({"error": BUSY}).encode()
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 2\r\nconnection: close\r\ncontent-length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY
)


#: seconds a connection may wait for its request headers before it is displaced ahead of
#: connections sending unverified bodies (a client's headers are on their way that long)
WAIT_GRACE = 1.0
#: connections over the cap kept for ``/healthz`` when every connection holds a verified request
HEALTH_RESERVE = 8


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a connection cap (see the module doc)."""

    #: set by :func:`configure` (or read from the environment in worker processes)
    limits: ServerConfig | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = _app_config(self.app) or GuardedH11Protocol.limits
        if limits is None:
            limits = GuardedH11Protocol.limits = ServerConfig.from_env()
        self._limits: ServerConfig = limits
        self._header_timer: asyncio.TimerHandle | None = None
        # connections waiting for request headers, oldest first; shared by the server's connections
        waiting = getattr(self.server_state, "oomdoctor_waiting", None)
        if waiting is None:
            waiting = OrderedDict()
            self.server_state.oomdoctor_waiting = waiting  # type: ignore[attr-defined]
        self._waiting: OrderedDict[GuardedH11Protocol, float] = waiting  # (since when, loop time)
        # connections sending the body of an unverified request, oldest first (displaced next)
        unverified = getattr(self.server_state, "oomdoctor_unverified", None)
        if unverified is None:
            unverified = OrderedDict()
            self.server_state.oomdoctor_unverified = unverified  # type: ignore[attr-defined]
        self._unverified: OrderedDict[GuardedH11Protocol, None] = unverified
        # connections over the cap kept for /healthz (see HEALTH_RESERVE)
        reserve = getattr(self.server_state, "oomdoctor_reserve", None)
        if reserve is None:
            reserve = set()
            self.server_state.oomdoctor_reserve = reserve  # type: ignore[attr-defined]
        self._reserve: set[GuardedH11Protocol] = reserve

    # -- uvicorn's backstop -----------------------------------------------------------------------

    @property
    def limit_concurrency(self) -> int | None:
        """uvicorn's own backstop, read as each request's headers arrive: a plain 503 once this
        many connections *or tasks* exist. Tasks of connections displaced a moment ago are still
        finishing when the connections that displaced them send their requests, so a burst of
        attackers at the cap briefly holds more tasks than connections, and a ``/healthz`` probe or
        an authorized request arriving then was refused. A request verified by its headers is never
        held to it: the connection cap (:meth:`connection_made`) already admitted it."""
        if getattr(self, "scope", None) and self._verified():  # (no scope: before the first request)
            return None
        return self._limit_concurrency

    @limit_concurrency.setter
    def limit_concurrency(self, value: int | None) -> None:
        self._limit_concurrency = value

    # -- connection cap ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._limits.max_connections:
            victim = self._waiting_since(WAIT_GRACE) or next(iter(self._unverified), None) or next(iter(self._waiting), None)
            if victim is not None:
                if victim in self._reserve:
                    self._reserve.add(self)  # it takes the victim's place, in the reserve
                victim._close()
            elif len(self._reserve) < HEALTH_RESERVE:  # every connection holds a verified request
                self._reserve.add(self)  # only /healthz will be answered on it
            else:  # and the reserve is full of them too: shed this one
                self._forget()
                self.connections.discard(self)
                transport.write(BUSY_RESPONSE)
                transport.close()
                return
        self._await_headers()

    def _waiting_since(self, grace: float) -> GuardedH11Protocol | None:
        """The oldest connection waiting for its request headers, if it has waited ``grace``
        seconds: one that connected a moment ago (a ``/healthz`` probe, an authorized client
        whose headers are on their way) is displaced only when nothing unverified can be."""
        oldest = next(iter(self._waiting.items()), None)
        if oldest is None or self.loop.time() - oldest[1] < grace:
            return None
        return oldest[0]

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        self._reserve.discard(self)
        super().connection_lost(exc)

    # -- header deadline --------------------------------------------------------------------------

    def _await_headers(self) -> None:
        self._forget()
        self._waiting[self] = self.loop.time()
        self._header_timer = self.loop.call_later(self._limits.header_timeout, self._close)

    def _forget(self) -> None:
        self._waiting.pop(self, None)
        self._unverified.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _close(self) -> None:
        self._forget()
        self._reserve.discard(self)
        if not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self in self._waiting and self.conn.their_state is not h11.IDLE:
            self._forget()  # the request line and headers are in: the body has its own time limit
            if self in self._reserve:  # (the app's task has not run yet: it sees the mark)
                self.scope[HEALTH_RESERVE_KEY] = True  # type: ignore[literal-required]
            if self.conn.their_state is h11.SEND_BODY and not self._verified():
                self._unverified[self] = None
        elif self in self._unverified and self.conn.their_state is not h11.SEND_BODY:
            self._unverified.pop(self, None)  # the whole body is in

    def _verified(self) -> bool:
        """Whether the current request carries in its headers the credentials its endpoint needs
        (compared in constant time; the endpoint checks them again)."""
        scope = getattr(self, "scope", None) or {}
        return request_is_verified(self._limits, str(scope.get("path", "")), scope.get("headers") or [])

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_headers()  # the next request on this keep-alive connection


def request_is_verified(cfg: ServerConfig, path: str, headers: list[tuple[bytes, bytes]]) -> bool:
    """``/healthz``; ``/v1/...`` with the API token (or on a server without one); Mattermost with
    ``Authorization: Token`` right. Anything else proves nothing before its body is read."""
    if path == "/healthz":
        return True
    auth = next((v for k, v in headers if k == b"authorization"), b"").decode("latin-1").strip()
    scheme, _sp, value = auth.partition(" ")
    if path.startswith("/v1/"):
        if not cfg.api_token:
            return True
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode("latin-1", "replace"), cfg.api_token.encode())
    if path == "/mattermost/commands" and cfg.mattermost_token and scheme.lower() == "token":
        return hmac.compare_digest(value.strip().encode("latin-1", "replace"), cfg.mattermost_token.encode())
    return False


def _app_config(app: object) -> ServerConfig | None:
    """The :class:`ServerConfig` of our app, found through uvicorn's wrappers (``.app`` chains)."""
    for _ in range(8):
        state = getattr(app, "state", None)
        cfg = getattr(state, "config", None)
        if isinstance(cfg, ServerConfig):
            return cfg
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def configure(cfg: ServerConfig) -> None:
    """Use ``cfg``'s limits for connections accepted in this process."""
    GuardedH11Protocol.limits = cfg


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft open-files limit towards ``wanted`` (best effort); returns the soft limit."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return int(soft) if soft != resource.RLIM_INFINITY else wanted


def fit_to_fd_limit(cfg: ServerConfig) -> ServerConfig:
    """``cfg`` with the connection cap kept below the open-files limit (raised when allowed), so
    accepting a connection never fails for want of a descriptor."""
    files = raise_fd_limit(cfg.max_connections + 256)
    cap = max(8, min(cfg.max_connections, files - 128))
    if cap == cfg.max_connections:
        return cfg
    os.environ["OOMDOCTOR_MAX_CONNECTIONS"] = str(cap)  # for worker processes
    return cfg.with_(max_connections=cap)


def uvicorn_options(cfg: ServerConfig) -> dict[str, object]:
    """The uvicorn settings that bound connections: protocol, timeouts, concurrency, header size."""
    configure(cfg)
    return {
        "http": "oomdoctor.server.protocol:GuardedH11Protocol",
        "timeout_keep_alive": max(1, round(cfg.keep_alive_timeout)),
        # uvicorn's own backstop (a plain 503 once this many connections or tasks exist), for
        # unverified requests only (see GuardedH11Protocol.limit_concurrency), past the health reserve
        "limit_concurrency": cfg.max_connections + HEALTH_RESERVE + 1,
        "h11_max_incomplete_event_size": 16 << 10,  # request line + headers; larger is a 400
        "backlog": 2048,
        "timeout_graceful_shutdown": 5,
    }
