"""Fleet mode: log shippers' batches diagnosed as they stream, findings to Alertmanager, Slack,
a webhook and Prometheus.

:class:`Fleet` holds a :class:`~oomdoctor.fleet.streams.StreamTable` (one incremental scanner
per stream), the sinks and a background thread that decides quiet streams' findings and evicts
idle ones. It imports no web framework: ``oomdoctor serve``'s ``/v1/ingest`` is a thin adapter.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from oomdoctor.fleet.config import FleetConfig

if TYPE_CHECKING:
    from oomdoctor.rulepack import RulePack

__all__ = ["Fleet", "FleetConfig"]

#: seconds between the background thread's looks at quiet and idle streams
TICK_SECONDS = 0.1


class Fleet:
    """The streams, the sinks and the thread that ticks them (``start``/``stop``)."""

    def __init__(self, cfg: FleetConfig | None = None, pack: RulePack | None = None, *,
                 post: Any = None, metrics: bool = True) -> None:
        # (imported here: the server's configuration imports this package, and needs no scanner)
        from oomdoctor.fleet.sinks import Dispatcher, post_json
        from oomdoctor.fleet.streams import StreamTable

        self.cfg = cfg or FleetConfig()
        self.table = StreamTable(self.cfg, pack)
        self.dispatcher = Dispatcher(self.cfg, self.table.active, post or post_json)
        self.table.subscribe(self.dispatcher)
        self.metrics = None
        if metrics:
            try:
                from oomdoctor.fleet.metrics import FleetMetrics
            except ModuleNotFoundError:  # prometheus_client absent: no /metrics
                pass
            else:
                self.metrics = FleetMetrics(self.table, self.dispatcher)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.dispatcher.start()
        self._thread = threading.Thread(target=self._loop, name="oomdoctor-fleet", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import logging

        while not self._stop.wait(TICK_SECONDS):
            try:
                self.table.tick()
            except Exception:  # a bug must not stop the ticking for every other stream
                logging.getLogger("oomdoctor.fleet").exception("fleet tick failed")

    def stop(self) -> None:
        """Stop ticking, keep the streams' tails in the state file (when there is one), stop the sinks."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.cfg.state_file:
            self.table.save()
        self.dispatcher.stop()
