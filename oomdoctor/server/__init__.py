"""``oomdoctor serve``: the HTTP / chat-ops backend (extra ``oomdoctor[server]``: FastAPI + uvicorn).

Import :func:`create_app` from :mod:`oomdoctor.server.app`; this package's own import pulls in no
web framework, so ``oomdoctor.server.config`` stays usable without the extra (redaction lives in
the core, :mod:`oomdoctor.redaction`).
"""

from __future__ import annotations

from oomdoctor.server.config import ConfigError, ServerConfig
from oomdoctor.server.logs import setup_logging

__all__ = ["ConfigError", "ServerConfig", "serve", "setup_logging"]


def serve(config: ServerConfig, *, log_level: str = "info") -> None:
    """Run uvicorn with ``config`` (blocks). Raises :class:`ConfigError` on an unsafe configuration."""
    import os

    import uvicorn

    from oomdoctor.server.protocol import fit_to_fd_limit, uvicorn_options

    config.check_exposure()
    config = fit_to_fd_limit(config)
    os.environ["OOMDOCTOR_LOG_LEVEL"] = log_level  # for worker processes
    setup_logging(log_level)
    common: dict[str, object] = {
        "host": config.host,
        "port": config.port,
        "access_log": False,  # our own access log carries no query strings
        "server_header": False,
        "log_level": log_level,
        "proxy_headers": False,
    }
    common.update(uvicorn_options(config))
    if config.workers > 1:
        # workers re-create the app from the environment (the CLI exported its options there)
        uvicorn.run("oomdoctor.server.app:create_app_from_env", factory=True, workers=config.workers, **common)  # type: ignore[arg-type]
    else:
        from oomdoctor.server.app import create_app
        from oomdoctor.server.limits import settle_heap

        app = create_app(config)
        settle_heap()
        uvicorn.run(app, **common)  # type: ignore[arg-type]
