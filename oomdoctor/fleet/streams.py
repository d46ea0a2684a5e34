"""Streams: one incremental :class:`~oomdoctor.scanner.Scanner` per stream key, fed batch after
batch, bounded, evicted when idle; their findings, and the events the sinks send.

Memory: a stream's scanner sets aside at most ``stream_bytes`` of lines before it decides what it
holds (``Scanner.flush``; its other buffers are bounded by the scanner's own constants), at most
``max_streams`` scanners are held (a new stream evicts the least recently fed one), and at most
``inflight_bytes`` of batches are analysed at once: a batch beyond that is refused with
:class:`Busy` (HTTP 429 with ``Retry-After``) rather than buffered.

Latency: a finding waits for the lines after it (its phase, the other ranks' copies) until the
scanner decides it, or until ``quiet_seconds`` after it opened, or after its stream went quiet,
whichever comes first; so an alert leaves about ``quiet_seconds`` after its failure's last line
even while the stream keeps printing.

Resolution: an error finding stays active until the stream shows the process back up, that is a
line holding one of :data:`UP_MARKERS` (the readiness lines of uvicorn-served engines, vLLM's
and SGLang's API servers among them; TGI's router; llama.cpp's server; ollama) after the failure.
A new start-up alone is not enough: the restarted process may fail the same way while loading.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oomdoctor.fleet.alerts import FleetFinding, build
from oomdoctor.fleet.config import FleetConfig
from oomdoctor.fleet.records import StreamId
from oomdoctor.report import Finding
from oomdoctor.rulepack import RulePack, default_pack
from oomdoctor.scanner import Scanner

#: a line holding one of these says the process is up (serving) again
UP_MARKERS: tuple[bytes, ...] = (
    b"Application startup complete",  # uvicorn: vLLM's and SGLang's OpenAI servers, FastAPI apps
    b"Uvicorn running on",
    b"The server is fired up and ready to roll",  # SGLang
    b"Connected",  # TGI router: "Connected" (its last start-up line)
    b"server is listening on",  # llama.cpp server
    b"Listening on",  # ollama
)
#: Markers that are whole-line-ish words elsewhere: looked for only as written at a line's end
_END_ONLY = frozenset({b"Connected"})

Listener = Callable[[str, FleetFinding], None]


class Busy(Exception):
    """Too much is being analysed now: try again in ``retry_after`` seconds (HTTP 429)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Stream:
    """One stream's state: its scanner (None once evicted), counts, and findings."""

    sid: StreamId
    scanner: Scanner | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_fed: float = 0.0  # monotonic
    last_seen: float = 0.0  # wall clock, for the API
    #: when the scan's oldest finding still open (waiting for the lines after it) opened (monotonic)
    open_since: float | None = None
    lines: int = 0
    nbytes: int = 0
    #: lines fed to the stream's earlier scanners (a scanner numbers its lines from 1)
    base: int = 0
    #: line number (in the whole stream) of the latest "process is up" line
    up_line: int = 0
    findings: list[FleetFinding] = field(default_factory=list)
    #: the current run's last lines (only with a state file: kept at shutdown, see ``replay``)
    tail: bytearray = field(default_factory=bytearray)
    #: lines of the run before a restart, fed again before the stream's next batch
    replay: bytes = b""

    def info(self) -> dict[str, Any]:
        return {
            "key": self.sid.key, "labels": dict(self.sid.labels), "open": self.scanner is not None,
            "lines": self.lines, "bytes": self.nbytes, "last_seen": self.last_seen,
            "findings": len(self.findings), "active": sum(f.active for f in self.findings),
        }


def _up_end(data: bytes) -> int:
    """The offset just after the first "process is up" line in ``data``, or -1."""
    best = -1
    for m in UP_MARKERS:
        i = data.find(m)
        while i >= 0:
            end = data.find(b"\n", i)
            end = len(data) if end < 0 else end + 1
            if m not in _END_ONLY or data[i + len(m): end].strip() in (b"", b"."):
                if best < 0 or end < best:
                    best = end
                break
            i = data.find(m, i + 1)
    return best


class StreamTable:
    """The streams of one server process (thread-safe: requests feed it from worker threads,
    :meth:`tick` runs in the background)."""

    def __init__(
        self,
        cfg: FleetConfig | None = None,
        pack: RulePack | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg or FleetConfig()
        self.pack = pack or default_pack()
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._streams: dict[str, Stream] = {}
        self._inflight = 0
        self._listeners: list[Listener] = []
        self._state_lock = threading.Lock()
        #: counters the metrics read (see :mod:`oomdoctor.fleet.metrics`)
        self.counts: dict[str, float] = {
            "bytes": 0, "lines": 0, "batches": 0, "rejected": 0, "evicted_idle": 0, "evicted_full": 0,
            "flushed_full": 0,
        }
        self.on_finding: list[Callable[[FleetFinding], None]] = []
        self.on_analysis: list[Callable[[float], None]] = []
        if self.cfg.state_file:
            self._load()

    # -- events --------------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        """``listener(event, finding)`` with event ``firing`` or ``resolved``, called in the thread
        that made the change (it must not block: the sinks queue)."""
        self._listeners.append(listener)

    def _emit(self, event: str, ff: FleetFinding) -> None:
        for listener in self._listeners:
            listener(event, ff)

    def active(self) -> list[FleetFinding]:
        """The active (firing) findings of every stream."""
        with self._lock:
            streams = list(self._streams.values())
        return [f for s in streams for f in list(s.findings) if f.active]

    # -- ingest --------------------------------------------------------------------------------

    def ingest(self, batch: list[tuple[StreamId, bytes]]) -> int:
        """Feed each stream its lines (grouped by stream, in order); returns the lines taken.
        Raises :class:`Busy` when the batch would take the bytes analysed at once over the limit."""
        nbytes = sum(len(d) for _s, d in batch)
        with self._lock:
            if self._inflight and self._inflight + nbytes > self.cfg.inflight_bytes:
                self.counts["rejected"] += 1
                raise Busy(f"{self._inflight} bytes are being analysed (limit {self.cfg.inflight_bytes})",
                           self.cfg.retry_after)
            self._inflight += nbytes
        t0 = time.perf_counter()
        lines = 0
        try:
            for sid, data in batch:
                lines += self._feed(sid, data)
        finally:
            with self._lock:
                self._inflight -= nbytes
                self.counts["bytes"] += nbytes
                self.counts["lines"] += lines
                self.counts["batches"] += 1
            for cb in self.on_analysis:
                cb(time.perf_counter() - t0)
        return lines

    def _stream(self, sid: StreamId) -> Stream:
        evict: Stream | None = None
        with self._lock:
            s = self._streams.get(sid.key)
            if s is None:
                s = self._streams[sid.key] = Stream(sid)
                self._trim_entries()
            if s.scanner is None:
                held = [x for x in self._streams.values() if x.scanner is not None]
                if len(held) >= self.cfg.max_streams:
                    evict = min(held, key=lambda x: x.last_fed)
        if evict is not None:
            self._evict(evict, "evicted_full")
        return s

    def _trim_entries(self) -> None:
        """Forget the oldest streams without a scanner or an active finding beyond twice
        ``max_streams`` entries (their findings go with them)."""
        over = len(self._streams) - 2 * self.cfg.max_streams
        if over <= 0:
            return
        idle = sorted((s for s in self._streams.values() if s.scanner is None and not any(f.active for f in s.findings)),
                      key=lambda s: s.last_fed)
        for s in idle[:over]:
            del self._streams[s.sid.key]

    def _feed(self, sid: StreamId, data: bytes) -> int:
        s = self._stream(sid)
        n = data.count(b"\n")
        with s.lock:
            if s.replay:  # the run's lines from before a restart: read again, nothing told twice
                replay, s.replay = s.replay, b""
                self._feed_all(s, replay, replaying=True)
            s.nbytes += len(data)
            s.last_fed = self._clock()
            s.last_seen = self._wall()
            self._feed_all(s, data)
        return n

    def _feed_all(self, s: Stream, data: bytes, replaying: bool = False) -> None:
        while data:
            cut = _up_end(data)
            piece, data = (data, b"") if cut < 0 else (data[:cut], data[cut:])
            self._feed_piece(s, piece, replaying, up=cut >= 0)
            if cut >= 0:  # the process is up again: what follows is a new run, with a scan of its own
                self._new_run(s, replaying)

    def _feed_piece(self, s: Stream, data: bytes, replaying: bool, up: bool) -> None:
        """Feed one piece of a stream's lines; ``up``: its last line says the process is up."""
        if s.scanner is None:
            s.scanner = Scanner(self.pack, source=s.sid.key)
            s.base = s.lines - (data.count(b"\n") if replaying else 0)
        s.scanner.feed(data)
        if not replaying:
            s.lines += data.count(b"\n")
        if self.cfg.state_file:
            s.tail += data
            if len(s.tail) > self.cfg.tail_bytes:
                cut = s.tail.find(b"\n", len(s.tail) - self.cfg.tail_bytes)
                del s.tail[: cut + 1 if cut >= 0 else len(s.tail)]
        if up:
            s.up_line = s.lines
        if s.scanner.held_bytes() > self.cfg.stream_bytes:
            self.counts["flushed_full"] += 1
            s.scanner.flush()
        self._poll(s, replaying)

    def _poll(self, s: Stream, replaying: bool = False) -> None:
        """Collect the findings the scan decided; note whether one is still open, and since when."""
        assert s.scanner is not None
        found = s.scanner.poll()
        self._collect(s, found, replaying)
        self._resolve(s)
        if s.scanner.undecided():
            if s.open_since is None:
                s.open_since = self._clock()
        else:
            s.open_since = None

    def _decide(self, s: Stream, replaying: bool = False) -> None:
        """Decide what the stream's scan holds now (its input may continue)."""
        assert s.scanner is not None
        s.scanner.flush()
        self._poll(s, replaying)
        s.open_since = None

    def _new_run(self, s: Stream, replaying: bool = False) -> None:
        """Decide what the stream's scan holds and start the next run's scan afresh (its context,
        the model and flags of the process before, does not carry over)."""
        if s.scanner is not None:
            self._decide(s, replaying)
            s.scanner = None
        s.tail.clear()

    # -- findings ------------------------------------------------------------------------------

    def _collect(self, s: Stream, found: list[Finding], replaying: bool = False) -> None:
        changed = False
        for f in found:
            ff = build(s.sid, f, self._wall(), self.cfg.public_url)
            if replaying and any(x.fingerprint == ff.fingerprint for x in s.findings):
                continue  # found before the restart already
            same = next((x for x in s.findings if x.fingerprint == ff.fingerprint and x.ends_at is None), None)
            if same is not None:  # told again while active: the same failure
                same.count += 1
                changed = True
                continue
            s.findings.append(ff)
            del s.findings[: -self.cfg.findings_per_stream]
            changed = True
            for cb in self.on_finding:
                cb(ff)
            if ff.labels.get("severity") != "error":
                ff.ends_at = ff.starts_at  # a warning: listed, never an alert
                continue
            ff.finding["stream_line"] = s.base + max(f.location.line, f.location.end_line)
            self._emit("firing", ff)
        if changed:
            self._save()

    def _resolve(self, s: Stream) -> None:
        if not s.up_line:
            return
        changed = False
        for ff in s.findings:
            if ff.active and s.up_line > ff.finding.get("stream_line", 0):
                ff.ends_at = self._wall()
                changed = True
                self._emit("resolved", ff)
        if changed:
            self._save()

    def tick(self) -> None:
        """Decide the findings undecided for ``quiet_seconds``; drop the scanners of streams idle
        for ``idle_seconds`` (call it a few times a second)."""
        now = self._clock()
        with self._lock:
            streams = list(self._streams.values())
        for s in streams:
            if s.scanner is None:
                continue
            if now - s.last_fed >= self.cfg.idle_seconds:
                self._evict(s, "evicted_idle")
            # (a stream with nothing undecided has nothing a flush would decide: left alone)
            elif s.open_since is not None and now - s.open_since >= self.cfg.quiet_seconds:
                with s.lock:
                    if s.scanner is not None and s.open_since is not None:
                        self._decide(s)

    def _evict(self, s: Stream, why: str) -> None:
        with s.lock:
            if s.scanner is None:
                return
            self._decide(s)
            s.scanner = None
            s.tail.clear()
        with self._lock:
            self.counts[why] += 1

    def flush_all(self) -> None:
        """Decide every stream's open findings now (shutdown, tests)."""
        with self._lock:
            streams = list(self._streams.values())
        for s in streams:
            with s.lock:
                if s.scanner is not None:
                    self._decide(s)

    # -- reading -------------------------------------------------------------------------------

    def open_streams(self) -> int:
        with self._lock:
            return sum(s.scanner is not None for s in self._streams.values())

    def streams(self) -> list[dict[str, Any]]:
        with self._lock:
            return [s.info() for s in self._streams.values()]

    def findings(self, key: str) -> list[dict[str, Any]] | None:
        """The findings of stream ``key`` (None: no such stream)."""
        with self._lock:
            s = self._streams.get(key)
        if s is None:
            return None
        return [{**ff.to_json(), "active": ff.active} for ff in list(s.findings)]

    # -- persistence ---------------------------------------------------------------------------

    def save(self) -> None:
        """Write the state file with each stream's tail (at shutdown: the lines of runs whose
        failures may not be decided yet, read again by the next process)."""
        self._save(tails=True)

    def _save(self, tails: bool = False) -> None:
        """Write the findings to ``state_file`` (atomically), so that a restarted server keeps its
        active alerts and does not count a re-sent batch's failure twice."""
        path = self.cfg.state_file
        if not path:
            return
        with self._state_lock:
            with self._lock:
                streams = list(self._streams.values())
            doc = {"version": 1, "streams": [
                {"key": s.sid.key, "labels": [list(x) for x in s.sid.labels], "lines": s.lines, "bytes": s.nbytes,
                 "findings": [ff.to_json() for ff in s.findings],
                 "tail": base64.b64encode(bytes(s.tail) if tails else s.replay).decode()}
                for s in streams if s.findings or (tails and s.tail) or s.replay
            ]}
            d = os.path.dirname(os.path.abspath(path))
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".fleet-state-")
            try:
                with os.fdopen(fd, "w") as fh:
                    json.dump(doc, fh)
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise

    def _load(self) -> None:
        path = self.cfg.state_file
        assert path
        try:
            with open(path) as fh:
                doc = json.load(fh)
        except FileNotFoundError:
            return
        for entry in doc.get("streams", []):
            sid = StreamId(key=entry["key"], labels=tuple((str(a), str(b)) for a, b in entry["labels"]))
            s = Stream(sid, findings=[FleetFinding.from_json(f) for f in entry["findings"]])
            for ff in s.findings:  # (line numbers of the process before: any "up" line now is later)
                ff.finding["stream_line"] = 0
            s.lines, s.nbytes = int(entry.get("lines", 0)), int(entry.get("bytes", 0))
            s.replay = base64.b64decode(entry.get("tail", ""))
            self._streams[sid.key] = s
