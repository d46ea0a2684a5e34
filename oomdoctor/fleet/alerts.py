"""A finding of a stream as an alert: its identity (fingerprint), labels and annotations.

An alert's labels are its identity at Alertmanager, so they hold nothing that changes from one
telling of the same failure to the next (no line number, no time): the same failure found again
(a shipper re-sending a batch after a restart) is the same alert, not a second one.
"""

from __future__ import annotations

import hashlib
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from oomdoctor.fleet.records import StreamId
from oomdoctor.report import Finding

ALERTNAME = "OOMDoctorFinding"


def fingerprint(sid: StreamId, finding: Finding) -> str:
    """The same failure told again in the same stream has the same fingerprint: stream, rule and
    the normalised failing line (its figures included)."""
    h = hashlib.sha256("\0".join((sid.key, finding.rule, finding.kind, finding.message)).encode("utf-8", "replace"))
    return h.hexdigest()[:16]


def iso(t: float) -> str:
    """RFC 3339 in UTC, as Alertmanager's API takes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


@dataclass
class FleetFinding:
    """One failure of one stream, as the API lists it and the sinks send it."""

    fingerprint: str
    stream: str
    labels: dict[str, str]
    annotations: dict[str, str]
    finding: dict[str, Any]
    starts_at: float
    ends_at: float | None = None
    #: how many times the stream told it while active (a re-sent batch, a crash loop)
    count: int = 1

    @property
    def active(self) -> bool:
        return self.ends_at is None and self.labels.get("severity") == "error"

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint, "stream": self.stream, "labels": self.labels,
            "annotations": self.annotations, "finding": self.finding, "starts_at": self.starts_at,
            "ends_at": self.ends_at, "count": self.count,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FleetFinding:
        return cls(
            fingerprint=str(d["fingerprint"]), stream=str(d["stream"]), labels=dict(d["labels"]),
            annotations=dict(d["annotations"]), finding=dict(d["finding"]), starts_at=float(d["starts_at"]),
            ends_at=None if d.get("ends_at") is None else float(d["ends_at"]), count=int(d.get("count", 1)),
        )

    def alertmanager(self, now: float, resend_seconds: float, public_url: str | None = None) -> dict[str, Any]:
        """The alert as Alertmanager's ``POST /api/v2/alerts`` takes it: firing alerts end a few
        resend intervals ahead (kept alive by re-sending, gone by themselves if oomdoctor goes),
        resolved ones at the time they were resolved."""
        ends = self.ends_at if self.ends_at is not None else now + 4 * resend_seconds
        alert: dict[str, Any] = {
            "labels": self.labels, "annotations": self.annotations,
            "startsAt": iso(self.starts_at), "endsAt": iso(ends),
        }
        if public_url:
            alert["generatorURL"] = report_url(public_url, self.stream)
        return alert


def report_url(public_url: str, stream: str) -> str:
    return public_url.rstrip("/") + "/v1/streams/" + urllib.parse.quote(stream, safe="") + "/findings"


def first_remedy(finding: Finding) -> tuple[str, str]:
    """The first remedy's title and the command or flags that apply it ('' when none)."""
    if not finding.remedies:
        return "", ""
    r = finding.remedies[0]
    if r.command:
        return r.title, r.command
    parts = [f"{k} {v}".strip() for k, v in r.flags.items()]
    parts += [f"{k}={v}" for k, v in r.env.items()]
    parts += [f"{k}={v}" for k, v in r.settings.items()]
    return r.title, " ".join(parts)


def build(sid: StreamId, finding: Finding, now: float, public_url: str | None = None) -> FleetFinding:
    """The fleet finding of ``finding`` (advised) in stream ``sid``."""
    labels = {
        "alertname": ALERTNAME,
        "severity": finding.severity,
        "kind": finding.kind,
        "cause": finding.cause.id if finding.cause else "unknown",
        "product": finding.product or finding.engine,
        "engine": finding.engine,
        **dict(sid.labels),
        "stream": sid.key,
    }
    gpu = finding.figures.get("gpu_index")
    if gpu is not None:
        labels["gpu"] = str(gpu)
    labels = {k: v for k, v in labels.items() if v}
    title, command = first_remedy(finding)
    annotations = {
        "summary": f"{finding.title}: {finding.cause.summary}" if finding.cause else finding.title,
        "description": finding.message[:1000],
    }
    if title:
        annotations["remedy"] = title
    if command:
        annotations["command"] = command
    if public_url:
        annotations["report"] = report_url(public_url, sid.key)
    summary = {
        "rule": finding.rule, "kind": finding.kind, "severity": finding.severity, "phase": finding.phase,
        "engine": finding.engine, "product": finding.product, "title": finding.title, "message": finding.message,
        "line": finding.location.line, "end_line": finding.location.end_line, "figures": finding.figures,
        "cause": finding.cause.id if finding.cause else None,
        "remedies": [r.model_dump(mode="json", include={"id", "title", "flags", "env", "settings", "command"})
                     for r in finding.remedies[:3]],
    }
    return FleetFinding(
        fingerprint=fingerprint(sid, finding), stream=sid.key, labels=labels, annotations=annotations,
        finding=summary, starts_at=now,
    )
