"""Prometheus metrics of the fleet (``prometheus_client``, in the ``server`` extra).

Each :class:`FleetMetrics` has a registry of its own (a process may hold several apps: tests).
Counters the stream table keeps itself are read at scrape time (a custom collector), so ingest
pays nothing for them; findings are counted as they are made.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from oomdoctor.fleet.alerts import FleetFinding

if TYPE_CHECKING:
    from oomdoctor.fleet.sinks import Dispatcher
    from oomdoctor.fleet.streams import StreamTable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class FleetMetrics:
    """The registry: findings by kind, cause, product and node; bytes, lines and batches ingested;
    streams open; evictions; analysis time; sink outcomes; HTTP requests of every endpoint."""

    def __init__(self, table: StreamTable, dispatcher: Dispatcher | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self.findings = Counter(
            "oomdoctor_findings", "Findings made, by kind, cause, product, node and severity.",
            ["kind", "cause", "product", "node", "severity"], registry=self.registry,
        )
        self.analysis = Histogram(
            "oomdoctor_ingest_analysis_seconds", "Time to analyse one ingest batch.", registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.lag = Histogram(
            "oomdoctor_ingest_lag_seconds",
            "Arrival time less the record's own time (date, timestamp, @timestamp, time, ISODATE), per record.",
            registry=self.registry, buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
        )
        self.requests = Counter(
            "oomdoctor_http_requests", "HTTP requests answered, by route and status.",
            ["route", "status"], registry=self.registry,
        )
        self.registry.register(_TableCollector(table, dispatcher))
        table.on_finding.append(self._count)
        table.on_analysis.append(self.analysis.observe)

    def observe_lag(self, times: list[float], now: float) -> None:
        """One observation per record time; a time ahead of ``now`` (another clock) counts as 0."""
        for t in times:
            self.lag.observe(max(0.0, now - t))

    def _count(self, ff: FleetFinding) -> None:
        lab = ff.labels
        self.findings.labels(
            kind=lab.get("kind", ""), cause=lab.get("cause", ""), product=lab.get("product", ""),
            node=lab.get("node", ""), severity=lab.get("severity", ""),
        ).inc()

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))


class _TableCollector:
    def __init__(self, table: StreamTable, dispatcher: Dispatcher | None) -> None:
        self.table = table
        self.dispatcher = dispatcher

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        c = dict(self.table.counts)
        for name, key, doc in (
            ("oomdoctor_ingest_bytes", "bytes", "Bytes of log lines ingested."),
            ("oomdoctor_ingest_lines", "lines", "Log lines ingested."),
            ("oomdoctor_ingest_batches", "batches", "Ingest batches analysed."),
            ("oomdoctor_ingest_rejected", "rejected", "Ingest batches refused with 429 (back-pressure)."),
        ):
            yield CounterMetricFamily(name, doc, value=c[key])
        ev = CounterMetricFamily("oomdoctor_stream_evictions", "Stream scanners dropped, by reason.", labels=["reason"])
        ev.add_metric(["idle"], c["evicted_idle"])
        ev.add_metric(["full"], c["evicted_full"])
        yield ev
        yield CounterMetricFamily("oomdoctor_stream_early_flushes",
                                  "Streams that decided early, having set aside their limit of bytes.",
                                  value=c["flushed_full"])
        yield GaugeMetricFamily("oomdoctor_streams_open", "Streams with a scanner held.", value=self.table.open_streams())
        yield GaugeMetricFamily("oomdoctor_alerts_active", "Error findings not resolved yet.", value=len(self.table.active()))
        if self.dispatcher is not None:
            sent = CounterMetricFamily("oomdoctor_sink_deliveries", "Sink deliveries, by sink and outcome.",
                                       labels=["sink", "outcome"])
            queued = GaugeMetricFamily("oomdoctor_sink_queued", "Notifications waiting, by sink.", labels=["sink"])
            for sink in self.dispatcher.sinks:
                for outcome, n in sink.outcomes.items():
                    sent.add_metric([sink.name, outcome], n)
                queued.add_metric([sink.name], sink.queued())
            yield sent
            yield queued
