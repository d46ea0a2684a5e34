"""The service's own log, set up by ``oomdoctor serve`` and by the app factory alike (both import it
from here, so neither imports the other for it)."""

from __future__ import annotations

import logging


def setup_logging(log_level: str) -> None:
    """The service's own log: access lines (method, path without query string, status, time), never a body."""
    ours = logging.getLogger("oomdoctor.server")
    if not ours.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(name)s %(message)s"))
        ours.addHandler(handler)
        ours.propagate = False
    ours.setLevel(logging.INFO if log_level in ("info", "debug", "trace") else logging.WARNING)
