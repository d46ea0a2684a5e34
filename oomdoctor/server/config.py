"""Server configuration: command-line options over ``OOMDOCTOR_*`` environment variables."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from oomdoctor.fleet.config import FleetConfig

DEFAULT_MAX_BODY = 4 << 20  # 4 MiB on the wire
DEFAULT_MAX_LOG = 32 << 20  # 32 MiB after gzip decompression


class ConfigError(ValueError):
    """A configuration value is invalid or unsafe; the message says what to change."""


def _size(value: str, name: str) -> int:
    from oomdoctor.i18n import _
    from oomdoctor.units import parse_size

    try:
        n = parse_size(value) if not value.strip().isdigit() else int(value)
    except Exception as exc:  # the size parser's own errors vary
        raise ConfigError(_("{name}: not a size: {value}").format(name=name, value=repr(value))) from exc
    if n is None or n <= 0:
        raise ConfigError(_("{name}: must be a positive size, got {value}").format(name=name, value=repr(value)))
    return int(n)


def _float(value: str, name: str) -> float:
    from oomdoctor.i18n import _

    try:
        x = float(value)
    except ValueError:
        raise ConfigError(_("{name}: not a number: {value}").format(name=name, value=repr(value))) from None
    if x < 0:
        raise ConfigError(_("{name}: must not be negative, got {value}").format(name=name, value=repr(value)))
    return x


def _prefixes(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    insecure: bool = False
    #: bearer token for /v1/* (``OOMDOCTOR_API_TOKEN``)
    api_token: str | None = None
    slack_signing_secret: str | None = None
    #: optional bot token: lets /slack/events answer in the message's thread (chat.postMessage)
    slack_bot_token: str | None = None
    slack_api_url: str = "https://slack.com/api"
    #: where a deferred Slack answer may be POSTed (response_url must start with one of these)
    slack_response_prefixes: tuple[str, ...] = ("https://hooks.slack.com/",)
    mattermost_token: str | None = None
    #: Mattermost is self-hosted: a deferred answer goes to response_url only when it starts with one of these
    mattermost_response_prefixes: tuple[str, ...] = ()
    #: the largest request body accepted, in bytes (413 above it)
    max_body: int = DEFAULT_MAX_BODY
    #: the largest log after decompression, in bytes
    max_log: int = DEFAULT_MAX_LOG
    #: analysis time limit per request, seconds
    analysis_timeout: float = 20.0
    #: analyses running at once (per worker process); more wait in line
    max_concurrency: int = field(default_factory=lambda: max(2, min(8, os.cpu_count() or 2)))
    #: how long a request waits for a free analysis slot before 503
    queue_timeout: float = 10.0
    #: Slack/Mattermost: answer inline when analysis finishes within this many seconds, else ack and defer
    chat_inline_seconds: float = 2.0
    #: Slack replay window, seconds (Slack's own SDK uses 5 minutes)
    replay_window: int = 300
    #: response_type of chat answers: "ephemeral" (only the caller sees it) or "in_channel"
    chat_response_type: str = "ephemeral"
    #: language of Slack and Mattermost answers (``OOMDOCTOR_CHAT_LANG``: en or ja; slash commands carry no locale)
    chat_lang: str = "en"
    #: open connections at most (per worker process); at the limit a new connection displaces the
    #: oldest one still waiting for its request headers, or is answered 503 busy
    max_connections: int = 1000
    #: seconds a connection may take to send its request line and headers (slow clients are closed)
    header_timeout: float = 10.0
    #: seconds a request may take to send its body (408 after)
    body_timeout: float = 30.0
    #: seconds an idle keep-alive connection stays open
    keep_alive_timeout: float = 5.0
    #: request-body bytes buffered at once across requests, waiting for an analysis slot (503 above)
    body_budget: int = 256 << 20
    #: fleet mode: ``POST /v1/ingest``, its streams and sinks (the variables of ``oomdoctor.fleet.config.ENV``)
    fleet: FleetConfig = field(default_factory=FleetConfig)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> ServerConfig:
        """Read ``OOMDOCTOR_*`` variables; keyword overrides (e.g. from the command line) win when not None."""
        e = os.environ if env is None else env
        kw: dict[str, object] = {}

        def get(name: str) -> str | None:
            v = e.get("OOMDOCTOR_" + name)
            return v if v not in (None, "") else None

        for key, name in (
            ("api_token", "API_TOKEN"),
            ("slack_signing_secret", "SLACK_SIGNING_SECRET"),
            ("slack_bot_token", "SLACK_BOT_TOKEN"),
            ("mattermost_token", "MATTERMOST_TOKEN"),
            ("slack_api_url", "SLACK_API_URL"),
            ("chat_response_type", "CHAT_RESPONSE_TYPE"),
            ("chat_lang", "CHAT_LANG"),
            ("host", "HOST"),
        ):
            if (v := get(name)) is not None:
                kw[key] = v
        if (v := get("MAX_BODY")) is not None:
            kw["max_body"] = _size(v, "OOMDOCTOR_MAX_BODY")
        if (v := get("MAX_LOG")) is not None:
            kw["max_log"] = _size(v, "OOMDOCTOR_MAX_LOG")
        for key, name in (
            ("analysis_timeout", "ANALYSIS_TIMEOUT"),
            ("queue_timeout", "QUEUE_TIMEOUT"),
            ("chat_inline_seconds", "CHAT_INLINE_SECONDS"),
        ):
            if (v := get(name)) is not None:
                kw[key] = _float(v, "OOMDOCTOR_" + name)
        if (v := get("BODY_BUDGET")) is not None:
            kw["body_budget"] = _size(v, "OOMDOCTOR_BODY_BUDGET")
        for key, name in (
            ("header_timeout", "HEADER_TIMEOUT"),
            ("body_timeout", "BODY_TIMEOUT"),
            ("keep_alive_timeout", "KEEP_ALIVE_TIMEOUT"),
        ):
            if (v := get(name)) is not None:
                kw[key] = _float(v, "OOMDOCTOR_" + name)
        if (v := get("MAX_CONNECTIONS")) is not None:
            kw["max_connections"] = max(1, int(_float(v, "OOMDOCTOR_MAX_CONNECTIONS")))
        if (v := get("MAX_CONCURRENCY")) is not None:
            kw["max_concurrency"] = max(1, int(_float(v, "OOMDOCTOR_MAX_CONCURRENCY")))
        if (v := get("PORT")) is not None:
            kw["port"] = int(_float(v, "OOMDOCTOR_PORT"))
        if (v := get("SLACK_RESPONSE_PREFIXES")) is not None:
            kw["slack_response_prefixes"] = _prefixes(v)
        if (v := get("MATTERMOST_RESPONSE_PREFIXES")) is not None:
            kw["mattermost_response_prefixes"] = _prefixes(v)
        if get("INSECURE") in ("1", "true", "yes"):
            kw["insecure"] = True
        try:
            kw["fleet"] = FleetConfig.from_env(e)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        names = {f.name for f in fields(cls)}
        for k, ov in overrides.items():
            if k not in names:
                raise TypeError(f"unknown server setting {k!r}")
            if ov is not None:
                kw[k] = ov
        cfg = cls(**kw)  # type: ignore[arg-type]
        cfg.validate()
        return cfg

    def with_(self, **changes: object) -> ServerConfig:
        cfg = replace(self, **changes)  # type: ignore[arg-type]
        cfg.validate()
        return cfg

    def validate(self) -> None:
        from oomdoctor.i18n import LANGS, _, normalize

        if normalize(self.chat_lang) != self.chat_lang:
            lang = normalize(self.chat_lang)
            if lang is None:
                raise ConfigError(_("chat language must be one of {langs}, got {lang}").format(
                    langs=", ".join(LANGS), lang=repr(self.chat_lang)))
            object.__setattr__(self, "chat_lang", lang)
        if self.chat_response_type not in ("ephemeral", "in_channel"):
            raise ConfigError(_("chat response type must be ephemeral or in_channel, got {value}").format(
                value=repr(self.chat_response_type)))
        if not 0 < self.port < 65536:
            raise ConfigError(_("port must be 1..65535, got {port}").format(port=self.port))
        if self.workers < 1:
            raise ConfigError(_("--workers must be at least 1, got {workers}").format(workers=self.workers))
        if self.max_body <= 0 or self.max_log <= 0 or self.body_budget <= 0:
            raise ConfigError(_("body and log limits must be positive"))
        if self.max_connections < 1:
            raise ConfigError(_("max connections must be at least 1, got {n}").format(n=self.max_connections))
        if min(self.header_timeout, self.body_timeout, self.keep_alive_timeout) <= 0:
            raise ConfigError(_("header, body and keep-alive timeouts must be positive"))

    def warnings(self) -> list[str]:
        """What this configuration leaves silently undone (said once at start-up): a Slack app
        whose mentions are acknowledged but never answered, for want of a bot token."""
        from oomdoctor.i18n import _

        out = []
        if self.slack_signing_secret and not self.slack_bot_token:
            out.append(_(
                "OOMDOCTOR_SLACK_SIGNING_SECRET is set but OOMDOCTOR_SLACK_BOT_TOKEN is not: slash commands "
                "are answered, but app_mention and message events are acknowledged without an answer"
            ))
        return out

    def check_exposure(self) -> None:
        """Refuse a non-loopback address without an API token unless ``insecure``."""
        if is_loopback(self.host) or self.api_token or self.insecure:
            return
        from oomdoctor.i18n import _

        raise ConfigError(_(
            "refusing to listen on {host} without an API token: set OOMDOCTOR_API_TOKEN "
            "(clients then send 'Authorization: Bearer <token>'), listen on 127.0.0.1, or pass --insecure"
        ).format(host=self.host))


def is_loopback(host: str) -> bool:
    h = host.strip().strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False
