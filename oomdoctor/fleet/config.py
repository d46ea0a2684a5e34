"""Fleet settings, each from an environment variable (:data:`ENV`: ``OOMDOCTOR_FLEET_MAX_STREAMS``, ``OOMDOCTOR_ALERTMANAGER_URL``, ...)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: where a record's message is looked for, first present wins (Fluent Bit ``log``, Vector
#: ``message``, syslog-ng's ``format-json`` ``MESSAGE``)
MESSAGE_FIELDS = ("log", "message", "MESSAGE")
#: where each part of a record's stream key is looked for (dotted: nested objects, as Fluent
#: Bit's kubernetes filter and Vector's kubernetes_logs source nest them)
HOST_FIELDS = ("host", "hostname", "HOST", "kubernetes.host", "node")
POD_FIELDS = ("pod", "kubernetes.pod_name", "kubernetes.pod.name", "pod_name")
CONTAINER_FIELDS = ("container", "kubernetes.container_name", "container_name")
FILE_FIELDS = ("file", "filename", "path", "FILE_NAME", "filepath")
#: where a record's own time is looked for, for the ingest-lag metric: Fluent Bit's ``date``
#: (``json_date_key``, epoch seconds by default), Vector's ``timestamp`` (RFC 3339), syslog-ng's
#: ``ISODATE``, and the common ``@timestamp`` / ``time``
TIME_FIELDS = ("date", "timestamp", "@timestamp", "time", "ISODATE")


#: each setting's environment variable (without the ``OOMDOCTOR_`` prefix)
ENV = {
    "message_fields": "FLEET_MESSAGE_FIELDS", "host_fields": "FLEET_HOST_FIELDS", "pod_fields": "FLEET_POD_FIELDS",
    "container_fields": "FLEET_CONTAINER_FIELDS", "file_fields": "FLEET_FILE_FIELDS",
    "max_streams": "FLEET_MAX_STREAMS", "stream_bytes": "FLEET_STREAM_BYTES", "inflight_bytes": "FLEET_INFLIGHT_BYTES",
    "quiet_seconds": "FLEET_QUIET_SECONDS", "idle_seconds": "FLEET_IDLE_SECONDS", "retry_after": "FLEET_RETRY_AFTER",
    "findings_per_stream": "FLEET_FINDINGS_PER_STREAM", "state_file": "FLEET_STATE_FILE",
    "tail_bytes": "FLEET_TAIL_BYTES", "alertmanager_url": "ALERTMANAGER_URL", "slack_webhook_url": "SLACK_WEBHOOK_URL",
    "webhook_url": "WEBHOOK_URL", "public_url": "PUBLIC_URL", "resend_seconds": "FLEET_RESEND_SECONDS",
    "sink_queue": "FLEET_SINK_QUEUE", "retry_min": "FLEET_RETRY_MIN", "retry_max": "FLEET_RETRY_MAX",
}


def _fields(value: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in value.split(",") if p.strip())


@dataclass(frozen=True)
class FleetConfig:
    """What ``POST /v1/ingest`` and the sinks do; each value has a variable in :data:`ENV`."""

    message_fields: tuple[str, ...] = MESSAGE_FIELDS
    host_fields: tuple[str, ...] = HOST_FIELDS
    pod_fields: tuple[str, ...] = POD_FIELDS
    container_fields: tuple[str, ...] = CONTAINER_FIELDS
    file_fields: tuple[str, ...] = FILE_FIELDS
    #: streams held at most (a new stream beyond it evicts the least recently fed, else 429)
    max_streams: int = 10_000
    #: bytes one stream's scanner may hold set aside before it decides what it holds (flush)
    stream_bytes: int = 1 << 20
    #: bytes of batches being analysed at once, all streams together (429 above it)
    inflight_bytes: int = 64 << 20
    #: seconds a failure waits for the lines after it before it is decided (the pipe's QUIET_SECONDS)
    quiet_seconds: float = 0.5
    #: seconds without a line after which a stream's scanner is dropped (its findings are kept)
    idle_seconds: float = 900.0
    #: Retry-After of a 429, seconds
    retry_after: int = 1
    #: findings kept per stream (the oldest dropped first)
    findings_per_stream: int = 100
    #: a JSON file that keeps findings and active alerts across restarts (None: memory only);
    #: at shutdown it also keeps each stream's last ``tail_bytes`` of lines, read again when the
    #: stream's next batch arrives, so that a failure cut by the restart is still found once
    state_file: str | None = None
    tail_bytes: int = 64 << 10
    alertmanager_url: str | None = None
    slack_webhook_url: str | None = None
    webhook_url: str | None = None
    #: where an alert's "report" annotation links to (the server's public URL), optional
    public_url: str | None = None
    #: seconds between re-sends of an active alert to Alertmanager
    resend_seconds: float = 60.0
    #: notifications queued per sink at most (the oldest dropped beyond it, counted)
    sink_queue: int = 10_000
    #: first and largest retry delay of a sink whose receiver is down, seconds
    retry_min: float = 0.5
    retry_max: float = 30.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FleetConfig:
        """The settings from the variables of :data:`ENV` in ``env``."""

        def get(name: str) -> str | None:
            v = env.get("OOMDOCTOR_" + name)
            return v if v not in (None, "") else None

        kw: dict[str, object] = {}
        for key, name in ENV.items():
            v = get(name)
            if v is None:
                continue
            kind = cls.__dataclass_fields__[key].type
            if kind == "tuple[str, ...]":
                kw[key] = _fields(v)
            elif kind in ("int", "float"):
                try:
                    kw[key] = int(v) if kind == "int" else float(v)
                except ValueError:
                    raise ValueError(f"OOMDOCTOR_{name}: not a number: {v!r}") from None
            else:
                kw[key] = v
        cfg = cls(**kw)  # type: ignore[arg-type]
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if min(self.max_streams, self.stream_bytes, self.inflight_bytes, self.findings_per_stream, self.sink_queue,
               self.tail_bytes) < 1:
            raise ValueError("fleet limits must be positive")
        if min(self.quiet_seconds, self.idle_seconds, self.resend_seconds, self.retry_min, self.retry_max) <= 0:
            raise ValueError("fleet intervals must be positive")
        if not self.message_fields:
            raise ValueError("OOMDOCTOR_FLEET_MESSAGE_FIELDS names no field")
        for url in (self.alertmanager_url, self.slack_webhook_url, self.webhook_url):
            if url is not None and not url.startswith(("http://", "https://")):
                raise ValueError(f"sink URL must be http(s): {url!r}")
