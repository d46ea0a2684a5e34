"""Pipe mode: pass every input byte through unchanged, diagnose on the side.

Guarantees (tested in tests/test_pipe*.py):

* Output bytes == input bytes. The main thread only ``os.read``\\s and ``os.write``\\s; it never
  decodes, splits or waits for analysis.
* Analysis never blocks the upstream. Chunks go to an analyser thread through a bounded queue
  (at most ``QUEUE_BYTES``, 16 MiB, and ``QUEUE_CHUNKS`` reads); when the queue is full the oldest
  queued chunks are skipped for analysis, so the latest input (where a dying server prints its
  failure) is always analysed. With hyperscan, what is skipped is sifted first (one scan per
  chunk, :mod:`oomdoctor.prefilter.triage`): a chunk holding a rule's or context rule's trigger
  is kept, so a failure in a flood is still found unless such chunks alone fill the queue;
  the others keep only their line count. Skipped newlines are still counted, so line numbers stay exact,
  and one line on stderr says how many bytes analysis skipped (never when stdin is a regular file: then
  there is no upstream to protect and the reader waits for the analyser, within the same 16 MiB, so
  ``oomdoctor < huge.log`` runs in constant memory like ``oomdoctor huge.log``). The remaining coupling is the GIL: a regex
  holds it for at most ``REGEX_TIMEOUT`` (a rule that runs longer stops the analysis, naming the
  rule), pure-Python analysis hands it back every few milliseconds.
* Under a flood (input is being skipped), analysis steps aside: it takes at most
  ``FLOOD_SHARE`` of the time and sleeps the rest, and it loads the rule pack (~0.4 s of
  imports holding the GIL) only once the flood is over or ``FLOOD_BUILD_WAIT`` has passed. The
  passthrough then runs at nearly its speed alone; the latest input is still analysed at full
  speed once the input pauses or ends.
* An internal analysis error is reported once (``oomdoctor: analysis stopped: ...``); the
  passthrough continues to EOF and the caller exits 2.
* Downstream closed (``| head -1``): passthrough stops, no traceback, the findings so far are
  still printed on stderr.
* SIGINT/SIGTERM (when ``handle_signals``): stop reading, finish what the analyser holds (for a
  bounded time), let the caller print the report and exit 130/143.
"""

from __future__ import annotations

import contextvars
import errno
import functools
import os
import queue
import select
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oomdoctor.i18n import _
from oomdoctor.newlines import count_newlines

if TYPE_CHECKING:  # imported by the analyser thread: the passthrough starts before pydantic loads
    from oomdoctor.report import Finding, Report
    from oomdoctor.scanner import Scanner

#: seconds without input after which findings waiting for look-ahead lines are decided
QUIET_SECONDS = 0.5
#: largest single read
READ_SIZE = 1 << 20
#: reads queued for analysis at most (reads can be a few bytes: a burst must not fill the queue)
QUEUE_CHUNKS = 4096
#: bytes queued for analysis at most (bounds memory whatever the read sizes)
QUEUE_BYTES = 16 << 20
#: after a signal, the analyser may spend this long on data already queued (OOMDOCTOR_SIGNAL_GRACE)
SIGNAL_GRACE_SECONDS = 2.0
#: and the caller waits this much longer for it at most
SIGNAL_JOIN_SLACK_SECONDS = 3.0
#: the largest grace OOMDOCTOR_SIGNAL_GRACE may ask for
SIGNAL_GRACE_MAX = 3600.0

#: poll interval of ``stop_when_idle``
IDLE_POLL = 0.2

#: while input is being skipped, the analyser works at most this share of the time and sleeps
#: the rest, handing the CPU and the GIL to the passthrough (what it skips is skipped anyway)
FLOOD_SHARE = 0.1
#: input skipped less than this many seconds ago means the flood goes on
FLOOD_WINDOW = 0.05
#: the analyser waits at most this long for a flood to end before it loads the rule pack
FLOOD_BUILD_WAIT = 5.0

_END = object()


class _Terminated(BaseException):
    """Raised in the main thread by our SIGTERM handler."""


class _Gap:
    __slots__ = ("nbytes", "newlines")

    def __init__(self) -> None:
        self.nbytes = 0
        self.newlines = 0


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def say(line: str) -> None:
    """One line on stderr; never raises (stderr may be closed too)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class PipeResult:
    def __init__(self) -> None:
        self.report: Report | None = None
        self.analysis_error: str | None = None
        self.output_error: str | None = None
        self.downstream_closed = False
        self.skipped_bytes = 0
        #: bytes only sifted for failures under a flood (see :mod:`oomdoctor.prefilter.triage`)
        self.sifted_bytes = 0
        self.bytes_in = 0
        #: signal number that stopped the pipe (SIGINT/SIGTERM), else None
        self.signal: int | None = None


class _Analyser(threading.Thread):
    """Consumes chunks from a bounded queue; the producer never waits for it."""

    def __init__(
        self,
        scanner: Scanner | Callable[[], Scanner],
        on_findings: Callable[[list[Finding]], None],
        result: PipeResult,
        max_chunks: int,
        quiet: float,
        warmup: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="oomdoctor-analyser", daemon=True)
        #: the producer's context (the language in force, oomdoctor.i18n): the scan words its
        #: remedies in it although it runs on this thread
        self._context = contextvars.copy_context()
        self.warmup = warmup
        self.lossless = False
        #: a scanner, or (until the analyser thread has run it) the function that makes one
        self._make = scanner if callable(scanner) else None
        self.scanner: Scanner = scanner  # type: ignore[assignment]
        self.on_findings = on_findings
        self.result = result
        self.quiet = quiet
        self.q: queue.Queue[object] = queue.Queue(maxsize=max_chunks)
        self.max_bytes = QUEUE_BYTES
        self._queued = 0  # bytes in the queue; producer adds, consumer subtracts, under the lock
        self._lock = threading.Lock()
        #: signalled when the analyser takes bytes off the queue (a lossless producer waits on it)
        self._room = threading.Condition(self._lock)
        self.active = True
        self.deadline: float | None = None
        self._gap: _Gap | None = None  # owned by the producer thread
        #: ``time.monotonic()`` of the last skip (producer writes, consumer reads)
        self.last_skip = float("-inf")
        #: set once the producer has sent end-of-input
        self.ended = threading.Event()
        #: how the analyser steps aside under a flood: a sleep that the end of input cuts short
        self.nap: Callable[[float], object] = self.ended.wait
        #: sifting under a flood (see :mod:`oomdoctor.prefilter.triage`): ``holds(chunk)``, or None
        self.triage: Any = None
        #: the next chunk is read in full: it may continue a failure the last one held
        self._keep_next = False
        #: ids of queued chunks sifting kept (they may hold a failure): skipped last
        self._kept: set[int] = set()

    # -- producer side (main thread) ------------------------------------------------------------

    def offer(self, data: bytes) -> None:
        if not self.active:
            return
        if self.lossless:  # nobody to block: wait for the analyser rather than skip
            with self._room:  # ... within the same byte cap: constant memory whatever the file's size
                while self.active and self._queued and self._queued + len(data) > self.max_bytes and self.is_alive():
                    self._room.wait(0.1)
            while self.active and self.is_alive():
                try:
                    self.q.put(data, timeout=0.1)
                    self._count(len(data))
                    return
                except queue.Full:
                    continue
            return
        try:
            self._make_room(len(data))
            if self._queued + len(data) > self.max_bytes:
                raise queue.Full
            if self._gap is not None:
                self.q.put_nowait(self._gap)
                self._gap = None
            self.q.put_nowait(data)
            self._count(len(data))
        except queue.Full:
            self._gap = self._skip(data, self._gap or _Gap())

    def _make_room(self, nbytes: int) -> None:
        """Turn the oldest queued reads into gaps until ``nbytes`` more fit.

        When analysis is behind, what it skips is the oldest input, so the latest, where a
        dying server prints its failure, is always analysed. A gap keeps the skipped lines'
        count, so line numbers after it stay exact."""
        if self._queued + nbytes <= self.max_bytes and self.q.qsize() < self.q.maxsize:
            return
        with self.q.mutex:  # the analyser takes from the front meanwhile, never in the middle
            items = self.q.queue
            kept = self._kept
            # what is skipped is sifted first, and the chunks that may hold a failure go last: a
            # failure is skipped only when such chunks alone fill the queue (16 MiB)
            self._skip_oldest(items, nbytes, kept, sift=True)
            self._skip_oldest(items, nbytes, set(), sift=False)

    def _skip_oldest(self, items: Any, nbytes: int, spare: set[int], *, sift: bool) -> None:
        """Turn the oldest queued reads not in ``spare`` into gaps until ``nbytes`` more fit
        (``sift``: sparing those that may hold a failure too)."""
        i = 0
        while i < len(items) and (self._queued + nbytes > self.max_bytes or len(items) >= self.q.maxsize):
            item = items[i]
            if not isinstance(item, bytes) or id(item) in spare:
                i += 1
                continue
            if sift and self.triage is not None and self.triage.holds(item):
                # never sifted, and it may hold a failure: kept, and skipped only if nothing else can be
                spare.add(id(item))
                i += 1
                continue
            self._kept.discard(id(item))
            self._count(-len(item))
            prev = items[i - 1] if i else None
            gap = self._skip(item, prev if isinstance(prev, _Gap) else _Gap(), searched=sift and self.triage is not None)
            if gap is prev:
                del items[i]
            else:
                items[i] = gap
                i += 1

    def _skip(self, data: bytes, gap: _Gap, *, searched: bool = False) -> _Gap:
        """Skip ``data`` for analysis into ``gap``, which keeps its bytes and lines
        (``searched``: sifting found nothing in it that may start a failure)."""
        gap.nbytes += len(data)
        gap.newlines += count_newlines(data)
        if searched:
            self.result.sifted_bytes += len(data)
        else:
            self.result.skipped_bytes += len(data)
        self.last_skip = time.monotonic()
        return gap

    def _count(self, nbytes: int) -> None:
        with self._lock:
            self._queued += nbytes
            if nbytes < 0:
                self._room.notify_all()

    def finish(self, join_timeout: float | None) -> bool:
        """Send end-of-input and wait; False when the analyser did not finish in time."""
        limit = None if join_timeout is None else time.monotonic() + join_timeout
        self.ended.set()
        items: list[object] = [self._gap] if self._gap is not None else []
        self._gap = None
        items.append(_END)
        for item in items:
            while self.is_alive():
                try:
                    self.q.put(item, timeout=0.1)
                    break
                except queue.Full:
                    if limit is not None and time.monotonic() > limit:
                        return False
        self.join(None if limit is None else max(0.0, limit - time.monotonic()))
        return not self.is_alive()

    # -- consumer side ----------------------------------------------------------------------------

    def run(self) -> None:
        self._context.run(self._run)

    def _run(self) -> None:
        self._guard(self._make_triage)
        if self._make is not None:  # the rule pack and the scanner load here, off the passthrough
            self._wait_out_flood()
            self._guard(self._build)
        scanner = self.scanner
        dirty = False
        if self.warmup is not None:  # imports the first finding would otherwise wait for
            self._guard(self.warmup)
        while True:
            try:
                item = self.q.get(timeout=self.quiet if dirty else None)
            except queue.Empty:
                dirty = False
                if self.active:
                    self._guard(self._decide)
                continue
            if isinstance(item, bytes):
                self._count(-len(item))
                with self.q.mutex:
                    sifted = id(item) in self._kept
                    self._kept.discard(id(item))
                if not sifted and self.flooding() and self.active:
                    item = self._sift(item)
            if item is _END:
                break
            if not self.active:
                continue
            if self.deadline is not None and time.monotonic() > self.deadline:
                if isinstance(item, bytes):
                    self.result.skipped_bytes += len(item)
                continue
            started = time.monotonic()
            if isinstance(item, _Gap):
                self._guard(functools.partial(_feed_newlines, scanner, item.newlines))
            else:
                assert isinstance(item, bytes)
                self._guard(functools.partial(self._feed, item))
                dirty = True
            if self.flooding():
                self.nap((time.monotonic() - started) * (1 / FLOOD_SHARE - 1))
        if self.active:
            try:
                self.result.report = scanner.close()
            except Exception as exc:
                self._halt(exc)

    def flooding(self) -> bool:
        """Input was skipped within ``FLOOD_WINDOW`` and has not ended."""
        return not self.ended.is_set() and time.monotonic() - self.last_skip < FLOOD_WINDOW

    def _wait_out_flood(self) -> None:
        """Load the rule pack after a flood, not in it: its imports hold the GIL for ~0.4 s,
        which the passthrough needs between its reads and writes.

        The first wait lets a flood show itself: it fills the queue (16 MiB) within
        ``FLOOD_WINDOW`` only above about 330 MB/s, far above what a server writes. Meanwhile
        the producer sifts what it skips (see :meth:`_make_room`), so a failure in the flood
        is kept for the scanner."""
        limit = time.monotonic() + FLOOD_BUILD_WAIT
        self.nap(FLOOD_WINDOW)
        while self.flooding() and time.monotonic() < limit and self.deadline is None:
            self.nap(FLOOD_WINDOW)

    def prepare_sifting(self) -> None:
        """Build the sifting for the shipped rules now (hyperscan only; see
        :mod:`oomdoctor.prefilter.triage`); the analyser replaces it with its rule pack's."""
        try:
            from oomdoctor.prefilter.triage import builtin_triage

            self.triage = builtin_triage()
        except Exception:  # sifting is an optimisation: without it, floods skip blindly as before
            self.triage = None

    def _make_triage(self) -> None:
        if self._make is None:  # a scanner handed in ready: its own pack
            self._triage_for_pack()
        elif self.triage is None and not self.lossless:
            self.prepare_sifting()

    def _triage_for_pack(self) -> None:
        from oomdoctor.prefilter.triage import triage_for

        pack = getattr(self.scanner, "pack", None)
        if pack is not None:
            self.triage = triage_for(pack.rules, pack.contexts)

    def _sift(self, data: bytes) -> bytes | _Gap:
        """``data``, or only its line count when sifting finds nothing in it that may start a
        failure (neither does the chunk before: its failure may go on here)."""
        if self.triage is None:
            return data
        if self.triage.holds(data):
            self._keep_next = True
            return data
        if self._keep_next:
            self._keep_next = False
            return data
        gap = _Gap()
        gap.nbytes, gap.newlines = len(data), count_newlines(data)
        self.result.sifted_bytes += len(data)
        return gap

    def _build(self) -> None:
        assert self._make is not None
        self.scanner = self._make()
        self._triage_for_pack()  # the rules in force (a custom pack's too)

    def _feed(self, data: bytes) -> None:
        self.scanner.feed(data)
        found = self.scanner.poll()
        if found:
            self.on_findings(found)

    def _decide(self) -> None:
        self.scanner.flush()
        found = self.scanner.poll()
        if found:
            self.on_findings(found)

    def _guard(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:  # analysis must never stop the passthrough
            self._halt(exc)

    def _halt(self, exc: BaseException) -> None:
        self.active = False
        text = " ".join(str(exc).split())
        name = type(exc).__name__
        self.result.analysis_error = text if name == "RuleTimeout" else f"{name}: {text}".rstrip(": ")
        say("oomdoctor: " + _("analysis stopped: {error}").format(error=self.result.analysis_error))


def _feed_newlines(scanner: Scanner, count: int) -> None:
    """Advance line numbers over data skipped for analysis."""
    block = b"\n" * min(count, READ_SIZE)
    while count > 0:
        n = min(count, len(block))
        scanner.feed(block[:n])
        count -= n


#: seconds a thread may hold the GIL before the passthrough thread gets it (Python's default: 5 ms)
PASSTHROUGH_SWITCH_INTERVAL = 0.0005
#: Linux fcntl command to resize a pipe's buffer (F_SETPIPE_SZ, not exported by Python < 3.10 on all builds)
_F_SETPIPE_SZ = 1031
PIPE_BUFFER = 1 << 20


def _widen_pipes(*fds: int | None) -> None:
    """Give our pipes 1 MiB buffers (Linux): 16× fewer reads, writes and thread hand-offs.

    Best effort: other systems, non-pipes and limits below 1 MiB keep what they have.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return
    for fd in fds:
        if fd is None:
            continue
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", _F_SETPIPE_SZ), PIPE_BUFFER)
        except OSError:
            pass


def signal_grace() -> float:
    """Seconds the analyser may go on over what was already read after Ctrl-C or SIGTERM:
    ``OOMDOCTOR_SIGNAL_GRACE`` (a slow or busy machine, a burst just before the signal), else
    ``SIGNAL_GRACE_SECONDS``. ValueError for anything but seconds from 0 to ``SIGNAL_GRACE_MAX``."""
    raw = os.environ.get("OOMDOCTOR_SIGNAL_GRACE", "").strip()
    if not raw:
        return SIGNAL_GRACE_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= SIGNAL_GRACE_MAX:  # (NaN fails both)
        raise ValueError(f"OOMDOCTOR_SIGNAL_GRACE={raw!r}: expected seconds from 0 to {SIGNAL_GRACE_MAX:g}")
    return value


def run_pipe(
    scanner: Scanner | Callable[[], Scanner],
    on_findings: Callable[[list[Finding]], None],
    *,
    in_fd: int = 0,
    out_fd: int | None = 1,
    handle_signals: bool = True,
    max_chunks: int = QUEUE_CHUNKS,
    quiet: float = QUIET_SECONDS,
    stop_when_idle: Callable[[], bool] | None = None,
    warmup: Callable[[], None] | None = None,
    lossless: bool | None = None,
) -> PipeResult:
    """Copy ``in_fd`` to ``out_fd`` (None: no passthrough) and analyse it on the side until EOF.

    ``scanner`` may be a function that makes one: the analyser thread calls it, so the
    passthrough starts without waiting for the rule pack to load.

    ``on_findings`` is called from the analyser thread. The returned result holds the final
    report (None when analysis stopped or did not finish). ``stop_when_idle``, if given, is
    asked every ``IDLE_POLL`` seconds without input whether to stop before EOF (``oomdoctor run``:
    the child has exited but a grandchild still holds the pipe open).
    """
    grace = signal_grace()
    result = PipeResult()
    analyser = _Analyser(scanner, on_findings, result, max_chunks, quiet, warmup)
    if lossless is None:  # input from a regular file (``oomdoctor < log``): no upstream to protect
        try:
            lossless = stat.S_ISREG(os.fstat(in_fd).st_mode)
        except OSError:
            lossless = False
    analyser.lossless = lossless
    if not lossless:
        # sifting is ready before the first read (~50 ms, once): a burst at the start (a log
        # piped in whole) comes before the analyser thread could have loaded anything
        analyser.prepare_sifting()
    _widen_pipes(in_fd, out_fd)
    switch = sys.getswitchinterval()
    # the passthrough thread needs the GIL back quickly after each read and write
    sys.setswitchinterval(min(switch, PASSTHROUGH_SWITCH_INTERVAL))
    restore: dict[int, object] = {}
    if handle_signals and threading.current_thread() is threading.main_thread():
        restore[signal.SIGTERM] = signal.signal(signal.SIGTERM, _raise_terminated)
    analyser.start()
    join_timeout: float | None = None
    try:
        try:
            while True:
                if stop_when_idle is not None:
                    ready, _writable, _errors = select.select([in_fd], [], [], IDLE_POLL)
                    if not ready:
                        if stop_when_idle():
                            break
                        continue
                try:
                    data = os.read(in_fd, READ_SIZE)
                except OSError as exc:
                    if exc.errno != errno.EIO:  # EIO: the other end of a pty is gone, i.e. EOF
                        result.analysis_error = f"cannot read input: {exc.strerror or exc}"
                        say(f"oomdoctor: error: {result.analysis_error}")
                    break
                if not data:
                    break
                result.bytes_in += len(data)
                if out_fd is not None:
                    try:
                        write_all(out_fd, data)
                    except BrokenPipeError:
                        result.downstream_closed = True
                        analyser.offer(data)
                        break
                    except OSError as exc:
                        result.output_error = f"cannot write output: {exc.strerror or exc}"
                        say(f"oomdoctor: error: {result.output_error}")
                        analyser.offer(data)
                        break
                analyser.offer(data)
        except KeyboardInterrupt:
            result.signal = signal.SIGINT
        except _Terminated:
            result.signal = signal.SIGTERM
        if result.signal is not None:
            analyser.deadline = time.monotonic() + grace
            join_timeout = grace + SIGNAL_JOIN_SLACK_SECONDS
        if not analyser.finish(join_timeout) and result.analysis_error is None:
            result.analysis_error = "analysis did not finish in time"
            say("oomdoctor: " + _("analysis stopped: {error}").format(error=result.analysis_error))
    finally:
        sys.setswitchinterval(switch)
        for signum, handler in restore.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
    if result.skipped_bytes:
        say(
            "oomdoctor: " + _(
                "analysis skipped {count} bytes (input arrived faster than it could be analysed; all of it "
                "was passed through). To analyse a saved log whole, name it: oomdoctor FILE"
            ).format(count=result.skipped_bytes)
        )
    if result.sifted_bytes:
        say(
            f"oomdoctor: {result.sifted_bytes} bytes arrived faster than they could be analysed and were only "
            "searched for failures: none can start in them (run facts and phase lines in them were not read)"
        )
    return result


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated()
