"""Log shippers' batches → (stream key, labels, line) in arrival order.

Fluent Bit's ``http`` output (``format json_lines`` or ``json``), Vector's ``http`` sink
(``codec json``, newline-delimited or an array) and syslog-ng's ``http()`` destination (a
``format-json`` body per message, batched with newlines) all send JSON records: one object per
log line. The message is the first of ``message_fields`` present; the stream key is made of the
first present of each of the host, pod, container and file fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oomdoctor.fleet.config import TIME_FIELDS, FleetConfig

#: the parts of a stream key, in order; a missing part is written ``-``
KEY_PARTS = ("node", "pod", "container", "file")
#: the longest value of one key part (a longer one is cut)
MAX_PART = 253


class RecordError(ValueError):
    """A batch that is not what it claims to be (the message says where)."""


@dataclass(frozen=True)
class StreamId:
    """A stream's key and the labels it carries into findings and alerts."""

    key: str
    labels: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, parts: dict[str, str], key: str | None = None) -> StreamId:
        labels = tuple((k, parts[k][:MAX_PART]) for k in KEY_PARTS if parts.get(k))
        if key is None:
            key = "/".join(parts.get(k, "")[:MAX_PART] or "-" for k in KEY_PARTS)
        return cls(key=key, labels=labels)


def _get(record: dict[str, Any], path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _first(record: dict[str, Any], paths: tuple[str, ...]) -> str:
    for p in paths:
        v = _get(record, p)
        if v not in (None, ""):
            return v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else str(v)
    return ""


def _objects(body: bytes) -> Iterator[Any]:
    text = body.strip()
    if not text:
        return
    if text[:1] == b"[":  # one JSON array (Fluent Bit ``format json``, Vector without framing)
        try:
            items = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise RecordError(f"malformed JSON array: {type(exc).__name__}") from None
        if not isinstance(items, list):
            raise RecordError("a JSON body must be an array of records or newline-delimited records")
        yield from items
        return
    for n, raw in enumerate(text.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise RecordError(f"record {n}: malformed JSON ({type(exc).__name__})") from None
        if isinstance(obj, list):  # (a shipper that sends one array per line)
            yield from obj
        else:
            yield obj


def record_time(rec: dict[str, Any]) -> float | None:
    """The record's own time in epoch seconds (:data:`~oomdoctor.fleet.config.TIME_FIELDS`: epoch
    seconds or milliseconds as a number, or an ISO 8601 / RFC 3339 string with its zone), or None."""
    for name in TIME_FIELDS:
        v = rec.get(name)
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)):
            return float(v) / 1000 if v > 1e11 else float(v)  # epoch milliseconds are > 1e11 after 1973
        if isinstance(v, str):
            try:
                t = datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                continue
            if t.tzinfo is not None:
                return t.timestamp()
    return None


def parse_records(
    body: bytes, cfg: FleetConfig, times: list[float] | None = None
) -> list[tuple[StreamId, bytes]]:
    """The (stream, line) pairs of a JSON batch, in order; each line ends with ``\\n``. A record
    without any message field is skipped; one that is not an object is an error. ``times``, when
    given, receives each kept record's own time (:func:`record_time`) where it states one."""
    out: list[tuple[StreamId, bytes]] = []
    ids: dict[tuple[str, ...], StreamId] = {}
    for n, rec in enumerate(_objects(body), 1):
        if not isinstance(rec, dict):
            raise RecordError(f"record {n}: not a JSON object")
        msg = _first(rec, cfg.message_fields)
        if not msg:
            continue
        parts = (
            _first(rec, cfg.host_fields), _first(rec, cfg.pod_fields),
            _first(rec, cfg.container_fields), _first(rec, cfg.file_fields),
        )
        sid = ids.get(parts)
        if sid is None:
            sid = ids[parts] = StreamId.of(dict(zip(KEY_PARTS, parts, strict=True)))
        if times is not None and (t := record_time(rec)) is not None:
            times.append(t)
        data = msg.encode("utf-8", "surrogatepass")
        out.append((sid, data if data.endswith(b"\n") else data + b"\n"))
    return out


def group_runs(pairs: list[tuple[StreamId, bytes]]) -> list[tuple[StreamId, bytes]]:
    """Consecutive lines of one stream joined, so that each stream is fed in as few calls as its
    order allows (lines of different streams keep their relative order per stream)."""
    by: dict[str, tuple[StreamId, list[bytes]]] = {}
    for sid, line in pairs:
        got = by.get(sid.key)
        if got is None:
            by[sid.key] = (sid, [line])
        else:
            got[1].append(line)
    return [(sid, b"".join(lines)) for sid, lines in by.values()]
