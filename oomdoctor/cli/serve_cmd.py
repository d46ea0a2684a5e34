"""``oomdoctor serve``: run the HTTP / chat-ops backend (needs the ``server`` extra)."""

from __future__ import annotations

from typing import Annotated

import typer

from oomdoctor.cli import complete
from oomdoctor.cli.errors import fail, warn
from oomdoctor.i18n import N_, _

#: uvicorn's log levels (uvicorn.config.LOG_LEVELS)
LOG_LEVELS: tuple[str, ...] = ("critical", "error", "warning", "info", "debug", "trace")


def register(app: typer.Typer) -> None:
    @app.command(
        "serve",
        help=N_(
            "Run the HTTP service: POST /v1/diagnose, /slack/commands, /slack/events, /mattermost/commands, "
            "GET /healthz, /v1/rules, /openapi.json. Secrets come from the environment: OOMDOCTOR_API_TOKEN, "
            "OOMDOCTOR_SLACK_SIGNING_SECRET, OOMDOCTOR_SLACK_BOT_TOKEN, OOMDOCTOR_MATTERMOST_TOKEN; limits from "
            "OOMDOCTOR_MAX_BODY, OOMDOCTOR_MAX_LOG, OOMDOCTOR_ANALYSIS_TIMEOUT, OOMDOCTOR_MAX_CONCURRENCY, "
            "OOMDOCTOR_QUEUE_TIMEOUT, OOMDOCTOR_MAX_CONNECTIONS, OOMDOCTOR_HEADER_TIMEOUT, OOMDOCTOR_BODY_TIMEOUT, "
            "OOMDOCTOR_KEEP_ALIVE_TIMEOUT, OOMDOCTOR_BODY_BUDGET (README lists them all)."
        ),
    )
    def serve(
        host: Annotated[
            str | None, typer.Option("--host", help=N_("Address to listen on (default 127.0.0.1)."), metavar="ADDRESS")
        ] = None,
        port: Annotated[int | None, typer.Option("--port", help=N_("Port (default 8080)."), metavar="PORT")] = None,
        workers: Annotated[int, typer.Option("--workers", help=N_("Worker processes."), metavar="N")] = 1,
        insecure: Annotated[
            bool, typer.Option("--insecure", help=N_("Allow a non-loopback address without OOMDOCTOR_API_TOKEN."))
        ] = False,
        log_level: Annotated[str, typer.Option("--log-level", help=N_("uvicorn log level."), metavar="LEVEL",
                                          autocompletion=complete.choices(*LOG_LEVELS))] = "info",
    ) -> int:
        try:
            import fastapi  # noqa: F401
            import uvicorn  # noqa: F401
        except ModuleNotFoundError:
            return fail(_("oomdoctor serve needs the server extra: pip install 'oomdoctor[server]'"))
        if log_level.lower() not in LOG_LEVELS:  # uvicorn looks the name up in its table: a KeyError otherwise
            return fail(_("unknown --log-level {value} (choose {choices})").format(
                value=repr(log_level), choices=", ".join(LOG_LEVELS)))
        import os

        from oomdoctor.server import ConfigError, ServerConfig
        from oomdoctor.server import serve as run_server

        try:
            cfg = ServerConfig.from_env(host=host, port=port, workers=workers, insecure=insecure or None)
            cfg.check_exposure()
        except (ConfigError, ValueError) as exc:
            return fail(str(exc))
        for message in cfg.warnings():
            warn(message)
        busy = port_in_use(cfg.host, cfg.port)
        if busy:
            return fail(_("cannot listen on {host}:{port}: {reason}").format(host=cfg.host, port=cfg.port, reason=busy))
        if workers > 1:  # worker processes rebuild the configuration from the environment
            os.environ["OOMDOCTOR_HOST"] = cfg.host
            if cfg.insecure:
                os.environ["OOMDOCTOR_INSECURE"] = "1"
        try:
            run_server(cfg, log_level=log_level)
        except ConfigError as exc:
            return fail(str(exc))
        return 0


def port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (e.g. "address already in use"), or None when it can."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return str(exc.strerror or exc)
    family, _type, _proto, _name, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(addr)
        except OSError as exc:
            return (exc.strerror or str(exc)).lower()
    return None
