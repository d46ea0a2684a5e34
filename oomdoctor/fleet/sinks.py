"""Where findings go: Alertmanager (v2 API), a Slack incoming webhook, a generic webhook.

Each sink runs in a thread of its own and takes events through :meth:`Sink.put`, which never
blocks ingest. A receiver that is down is retried with exponential back-off (``retry_min``
doubling up to ``retry_max``); nothing is lost within the sink's bounded queue (beyond it the
oldest events are dropped and counted). Alertmanager's queue holds the latest state of each
alert (a later state replaces an earlier one still waiting), and every active alert is re-sent
each ``resend_seconds``, as Prometheus does, so that Alertmanager keeps it firing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from oomdoctor.fleet.alerts import FleetFinding
from oomdoctor.fleet.config import FleetConfig

log = logging.getLogger("oomdoctor.fleet")

#: seconds one delivery may take
POST_TIMEOUT = 5.0


def post_json(url: str, payload: Any, timeout: float = POST_TIMEOUT) -> None:
    """POST ``payload`` as JSON; raises on a connection error or a non-2xx answer."""
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # the operator configured the URL
        if not 200 <= resp.status < 300:
            raise OSError(f"HTTP {resp.status}")


class Sink:
    """A receiver of events, with its queue, thread and back-off."""

    name = "sink"

    def __init__(self, url: str, cfg: FleetConfig, post: Callable[[str, Any], None] = post_json) -> None:
        self.url = url
        self.cfg = cfg
        self._post = post
        self._cond = threading.Condition()
        self._stopping = False
        self.outcomes: dict[str, int] = {"sent": 0, "failed": 0, "dropped": 0}
        self._thread: threading.Thread | None = None

    # the queue (under self._cond) ---------------------------------------------------------------

    def _enqueue(self, event: str, ff: FleetFinding) -> None:
        raise NotImplementedError

    def _take(self) -> Any | None:
        raise NotImplementedError

    def _give_back(self, item: Any) -> None:
        raise NotImplementedError

    def _payload(self, item: Any) -> Any:
        raise NotImplementedError

    def queued(self) -> int:
        raise NotImplementedError

    def _due(self, now: float) -> None:
        """Called in the loop: add what is due now (re-sends)."""

    # -------------------------------------------------------------------------------------------

    def put(self, event: str, ff: FleetFinding) -> None:
        """Queue ``event`` (``firing`` or ``resolved``) of ``ff``; never blocks."""
        with self._cond:
            self._enqueue(event, ff)
            self._cond.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"oomdoctor-sink-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = self.cfg.retry_min
        while True:
            with self._cond:
                self._due(time.time())
                item = self._take()
                while item is None and not self._stopping:
                    self._cond.wait(0.25)
                    self._due(time.time())
                    item = self._take()
                if item is None:
                    return
            try:
                self._post(self.url, self._payload(item))
            except Exception as exc:
                self.outcomes["failed"] += 1
                log.warning("%s sink: delivery failed (%s); retrying in %.1f s", self.name, type(exc).__name__, delay)
                with self._cond:
                    self._give_back(item)
                    if self._stopping:
                        return
                    self._cond.wait(delay)
                delay = min(delay * 2, self.cfg.retry_max)
                continue
            self.outcomes["sent"] += 1
            delay = self.cfg.retry_min


class AlertmanagerSink(Sink):
    """``POST {url}/api/v2/alerts`` with every alert waiting, each in its latest state."""

    name = "alertmanager"

    def __init__(self, url: str, cfg: FleetConfig, active: Callable[[], list[FleetFinding]],
                 post: Callable[[str, Any], None] = post_json) -> None:
        super().__init__(url.rstrip("/") + "/api/v2/alerts", cfg, post)
        self._active = active
        self._pending: OrderedDict[str, FleetFinding] = OrderedDict()
        self._next_resend = time.time() + cfg.resend_seconds

    def _enqueue(self, event: str, ff: FleetFinding) -> None:
        self._pending[ff.fingerprint] = ff
        self._pending.move_to_end(ff.fingerprint)
        while len(self._pending) > self.cfg.sink_queue:
            self._pending.popitem(last=False)
            self.outcomes["dropped"] += 1

    def _due(self, now: float) -> None:
        if now >= self._next_resend:
            self._next_resend = now + self.cfg.resend_seconds
            for ff in self._active():
                if ff.fingerprint not in self._pending:
                    self._enqueue("firing", ff)

    def _take(self) -> Any | None:
        if not self._pending:
            return None
        items = list(self._pending.values())
        self._pending.clear()
        return items

    def _give_back(self, item: Any) -> None:
        for ff in item:  # a state queued since is newer: it stays
            if ff.fingerprint not in self._pending:
                self._enqueue("firing", ff)

    def _payload(self, item: Any) -> Any:
        now = time.time()
        return [ff.alertmanager(now, self.cfg.resend_seconds, self.cfg.public_url) for ff in item]

    def queued(self) -> int:
        with self._cond:
            return len(self._pending)


class EventSink(Sink):
    """One POST per event, in order (Slack and generic webhooks)."""

    def __init__(self, url: str, cfg: FleetConfig, post: Callable[[str, Any], None] = post_json) -> None:
        super().__init__(url, cfg, post)
        self._queue: deque[tuple[str, FleetFinding]] = deque()

    def _enqueue(self, event: str, ff: FleetFinding) -> None:
        self._queue.append((event, ff))
        while len(self._queue) > self.cfg.sink_queue:
            self._queue.popleft()
            self.outcomes["dropped"] += 1

    def _take(self) -> Any | None:
        return self._queue.popleft() if self._queue else None

    def _give_back(self, item: Any) -> None:
        self._queue.appendleft(item)

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)


class WebhookSink(EventSink):
    """``{"status": "firing"|"resolved", "fingerprint", "stream", "labels", "annotations", "finding"}``."""

    name = "webhook"

    def _payload(self, item: Any) -> Any:
        event, ff = item
        return {"status": event, **ff.to_json()}


class SlackSink(EventSink):
    """A Slack incoming webhook: one message per firing or resolved finding."""

    name = "slack"

    def _payload(self, item: Any) -> Any:
        event, ff = item
        lab, ann = ff.labels, ff.annotations
        where = " / ".join(f"{k} `{lab[k]}`" for k in ("node", "pod", "container", "gpu") if k in lab) or f"stream `{ff.stream}`"
        if event == "resolved":
            return {"text": f":white_check_mark: resolved: {lab.get('kind')} on {where} (the process is up again)"}
        text = f":rotating_light: *{ann.get('summary', lab.get('kind'))}*\n{where}\nkind `{lab.get('kind')}` · cause `{lab.get('cause')}`"
        if "remedy" in ann:
            text += f"\n*Try first:* {ann['remedy']}"
        if "command" in ann:
            text += f"\n```{ann['command']}```"
        if "report" in ann:
            text += f"\n<{ann['report']}|full report>"
        return {"text": text}


class Dispatcher:
    """The configured sinks, fed by a stream table's events."""

    def __init__(self, cfg: FleetConfig, active: Callable[[], list[FleetFinding]],
                 post: Callable[[str, Any], None] = post_json) -> None:
        self.sinks: list[Sink] = []
        if cfg.alertmanager_url:
            self.sinks.append(AlertmanagerSink(cfg.alertmanager_url, cfg, active, post))
        if cfg.slack_webhook_url:
            self.sinks.append(SlackSink(cfg.slack_webhook_url, cfg, post))
        if cfg.webhook_url:
            self.sinks.append(WebhookSink(cfg.webhook_url, cfg, post))
        # active alerts kept from before a restart are sent again at once
        for ff in active():
            for sink in self.sinks:
                if isinstance(sink, AlertmanagerSink):
                    sink.put("firing", ff)

    def __call__(self, event: str, ff: FleetFinding) -> None:
        for sink in self.sinks:
            sink.put(event, ff)

    def start(self) -> None:
        for sink in self.sinks:
            sink.start()

    def stop(self) -> None:
        for sink in self.sinks:
            sink.stop()
