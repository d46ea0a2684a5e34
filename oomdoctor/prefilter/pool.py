"""Find a big file's candidate lines in worker processes, ahead of the scanner.

The pure-Python prefilter, and counting the newlines between its candidates, need nothing but
the bytes of a block, and are most of a post-mortem's time (about 13 of the 16 s a GiB of serving
log takes in one process): so for a plain file of at least ``MIN_BYTES`` on Linux, worker
processes (one per CPU) each take every n-th chunk of the file, read it themselves, find its
candidate lines and count the newlines before each (:func:`newlines_before`), while the main
process reads the same chunks in order and scans them with those answers. (Hyperscan's prefilter
is too fast for that to pay: see ``HyperscanPrefilter.runs_in_workers``.) The findings are the
same as without workers: a worker runs the same prefilter on the same bytes, and an answer is
used only for the very block it was computed for (:class:`Precomputed`); anything else (a chunk
that ends inside a line longer than ``SLACK``, bytes appended while reading) is prefiltered in
the main process.

Where a worker finds no candidate in a chunk, the main process need not read most of it: a
stretch that holds no candidate (and no periodic needle, see :func:`quiet_start`) only ever
leaves memory unread, as a far span, where the file can be read again. So, while no failure is
pending or open (``Scanner.pass_quiet`` says), the main process passes over all of such a chunk
but its last ``BEFORE_LINES`` lines, which it reads and scans as usual. Its own read of each
chunk and the presence pass over it were half its CPU time on a log with few candidates.

A chunk is the lines that start in ``[k * CHUNK, (k + 1) * CHUNK)``: its bounds depend only on
the file, so each worker finds them alone (a line start is offset 0 or one past a newline; with
no line start within ``SLACK`` bytes, the bound is the offset ``SLACK`` bytes on).

Workers are forked (Linux only: elsewhere, and with ``OOMDOCTOR_WORKERS=0``, the main process
does it all), ignore SIGINT, and are stopped when the scan ends or fails; a worker that fails
or dies only sends the main process back to prefiltering alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Generator
from typing import Any

from oomdoctor.newlines import count_newlines
from oomdoctor.prefilter.gates import SAMPLE_BYTES
from oomdoctor.prefilter.interface import Prefilter
from oomdoctor.prefilter.pure import PurePrefilter
from oomdoctor.reader import MAX_LINE_BYTES, has_long_line, last_lines_start
from oomdoctor.scan.state import BEFORE_LINES, FAR_MARK

#: bytes per chunk (nominal: chunks end at line starts). Larger chunks cost more than they save:
#: each is a fresh buffer twice over (read, lower-cased), and at 4 MiB the page faults of those
#: took 3 s of system time per GiB
CHUNK = 1 << 20
#: how far past a nominal bound a line start is looked for
SLACK = 512 << 10
#: files smaller than this take about half a second alone: not worth starting workers for
MIN_BYTES = 32 << 20
#: chunks asked of each worker ahead of the one being scanned
AHEAD = 2

Spans = list[tuple[int, int, int]]


#: newlines before each candidate's start, and in the whole chunk
Newlines = tuple[list[int], int]

#: of a chunk without candidates: where its last ``BEFORE_LINES`` lines start, and the first and
#: last ``FAR_MARK`` bytes before there (see :func:`quiet_start`)
Quiet = tuple[int, bytes, bytes]

#: the least a chunk's quiet start must be for the main process to pass over it unread
QUIET_MIN = 64 << 10

#: what the main process passes a quiet stretch to: ``(size, newlines, head, tail)``, True
#: when it was passed over (see ``Scanner.pass_quiet``)
Passer = Callable[[int, int, bytes, bytes], bool]


def newlines_before(block: bytes, spans: Spans) -> Newlines:
    """How many newlines ``block`` has before each span's start, and in all (a worker counts
    them with the candidates, so the scanner does not have to)."""
    before: list[int] = []
    seen = prev = 0
    for start, _, _ in spans:
        seen += count_newlines(block, prev, start)
        before.append(seen)
        prev = start
    return before, seen + count_newlines(block, prev)


def quiet_start(block: bytes, spans: Spans, newlines: int, presence: Any, held: bool | None = None) -> Quiet | None:
    """For a chunk of whole lines: where its last ``BEFORE_LINES`` lines start, when what
    comes before them may be passed over unread (see ``Scanner.pass_quiet``): the chunk holds
    no candidate (``spans``), more than ``BEFORE_LINES`` lines (``newlines``), and before
    there no line longer than the cap and none of the periodic needles ``presence`` looks for
    (``held``: whether the whole chunk holds one, where the prefilter noted it); with the first
    and last ``FAR_MARK`` bytes before there. None otherwise."""
    if spans or newlines <= BEFORE_LINES or not block.endswith(b"\n"):
        return None
    near = last_lines_start(block, 0, len(block), BEFORE_LINES)  # (as EvidenceAside._set_aside does)
    if near < QUIET_MIN or has_long_line(block, MAX_LINE_BYTES, 0, near):
        return None
    if held or (presence is not None and held is None and presence.which(block, 0, near)):
        return None
    return near, block[:FAR_MARK], block[max(0, near - FAR_MARK) : near]


class Precomputed:
    """A prefilter that answers with candidates found elsewhere for the one block it expects,
    and asks ``inner`` for any other."""

    def __init__(self, inner: Prefilter) -> None:
        self.inner = inner
        self.needles = inner.needles
        if hasattr(inner, "mask"):  # (see interface.py)
            self.mask = inner.mask
        if hasattr(inner, "present_in"):  # what the latest scan noted (hyperscan_path.py, pure.py)
            self.present_in = self._present_in
            self.present_literals: tuple[bytes, ...] = getattr(inner, "present_literals", ())
        self._block: bytes | None = None
        self._spans: Spans = []
        self._newlines: Newlines | None = None
        self._held: bool | None = None
        self._answered: tuple[bytes, Spans, Newlines] | None = None
        #: the block the latest ``candidates`` call answered from a worker, and whether it holds
        #: a ``present`` literal (None: not known)
        self._noted: tuple[bytes, bool | None] | None = None
        #: where quiet stretches go, and the periodic needles that keep a stretch from being
        #: quiet (see :meth:`pass_quiet_to`)
        self.passer: Passer | None = None
        self.presence: Any = None

    def pass_quiet_to(self, passer: Passer, presence: Any) -> None:
        """Offer the stretches of chunks that hold no candidate to ``passer`` before reading
        them (``Scanner.pass_quiet``); ``presence``: the periodic needles that keep a stretch
        from being quiet (``Scanner.periodic_presence``)."""
        self.passer, self.presence = passer, presence

    def expect(self, block: bytes, spans: Spans, newlines: Newlines | None = None, held: bool | None = None) -> None:
        """Answer the next ``candidates`` call for ``block`` with ``spans`` (``newlines``: the
        newlines before each and in all; ``held``: whether it holds a ``present`` literal)."""
        self._block, self._spans, self._newlines, self._held = block, spans, newlines, held

    def candidates(self, block: bytes, lo: int = 0, hi: int | None = None) -> Spans:
        self._answered = self._noted = None
        if block is self._block and lo == 0 and (hi is None or hi == len(block)):
            self._block = None
            if self._newlines is not None:
                self._answered = (block, self._spans, self._newlines)
            self._noted = (block, self._held)
            return self._spans
        return self.inner.candidates(block, lo, hi)

    def _present_in(self, block: bytes, a: int, b: int) -> int | None:
        """``present_in`` of the block answered from a worker (none where it noted none), else
        the inner prefilter's."""
        if self._noted is not None and self._noted[0] is block:
            return 0 if self._noted[1] is False else None
        return self.inner.present_in(block, a, b)  # type: ignore[attr-defined]

    def line_starts(self, block: bytes) -> dict[int, int] | None:
        """For the block the latest :meth:`candidates` call answered with a worker's counts:
        the newlines before each line start it knows (the block's start and end, each
        candidate's line and the line after it); None otherwise."""
        if self._answered is None or self._answered[0] is not block:
            return None
        _, spans, (before, total) = self._answered
        known = {0: 0, len(block): total}
        for (start, end, _), seen in zip(spans, before, strict=True):
            known[start] = seen
            if end < len(block):
                known[end + 1] = seen + 1
        return known


def workers_for(prefilter: Prefilter, size: int) -> int:
    """How many worker processes to use for a plain file of ``size`` bytes (0: none)."""
    wanted = os.environ.get("OOMDOCTOR_WORKERS", "").strip()
    if wanted:
        if not wanted.isdigit():
            raise ValueError(f"OOMDOCTOR_WORKERS={wanted!r}: expected a whole number (0: no worker processes)")
        n = int(wanted)
    else:
        n = min(os.cpu_count() or 1, 8)
        if n < 2 or size < MIN_BYTES:
            return 0
    if n < 1 or sys.platform != "linux" or not getattr(prefilter, "runs_in_workers", False):
        return 0
    return n


def bound(fd: int, k: int, size: int) -> int:
    """Offset where chunk ``k`` starts (``size`` for the chunk after the last)."""
    nominal = k * CHUNK
    if k == 0:
        return 0
    if nominal >= size:
        return size
    looked, want = 0, 4096  # lines are short: look a little way first
    while looked <= SLACK:
        want = min(want, SLACK + 1 - looked)
        window = os.pread(fd, want, nominal - 1 + looked)
        nl = window.find(b"\n")
        if nl >= 0:
            return min(nominal + looked + nl, size)  # (bytes appended since: not this chunk's)
        if len(window) < want:  # end of file
            break
        looked += len(window)
        want *= 16
    return min(nominal + SLACK, size)


def _read(fd: int, start: int, end: int) -> bytes:
    """``end - start`` bytes from ``start``, fewer only at the end of the file."""
    data = os.pread(fd, end - start, start)
    while len(data) < end - start:  # a short read before the end: rare
        more = os.pread(fd, end - start - len(data), start + len(data))
        if not more:
            break
        data += more
    return data


def _work(conn: Any, path: str, size: int, prefilter: Prefilter, quiet: bool, presence: Any) -> None:
    """Worker loop: receive a chunk number, send ``(k, start, end, spans, newlines, held,
    quiet)`` (``None``: stop; ``held``: whether the chunk holds a periodic needle, None if not
    known; ``quiet``: see :func:`quiet_start`, asked when ``quiet`` is set)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        noted = getattr(prefilter, "noted_in", None)  # (the periodic needles: see PurePrefilter)
        # (a note of other literals than ``presence`` asks about says nothing of those)
        same = presence is not None and getattr(prefilter, "present_literals", None) == presence.literals
        fd = os.open(path, os.O_RDONLY)
        while True:
            k = conn.recv()
            if k is None:
                break
            start, end = bound(fd, k, size), bound(fd, k + 1, size)
            block = _read(fd, start, end)
            spans = prefilter.candidates(block)
            newlines = newlines_before(block, spans)
            held = noted(block, 0, len(block)) if noted is not None else None
            still = quiet_start(block, spans, newlines[1], presence, held if same else None) if quiet and k else None
            conn.send((k, start, end, spans, newlines, held, still))
    except Exception as exc:  # reported to the main process, which goes on alone
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def parallel_blocks(path: str, fd: int, size: int, pre: Precomputed, workers: int) -> Generator[bytes, None, None]:
    """Yield the chunks of the plain file ``fd`` (``size`` bytes when opened) in order, each
    told to ``pre`` with its candidates; then whatever was appended, in blocks ``pre`` does
    not know. Falls back to reading on alone when a worker fails."""
    import multiprocessing

    inner = pre.inner
    if isinstance(inner, PurePrefilter):  # plan once here, so the workers inherit the plan
        # priced by slices from across the file, not only its start (a banner, not the traffic)
        piece = SAMPLE_BYTES // 4
        inner.plan_for(b"".join(_read(fd, size * i // 8, size * i // 8 + piece) for i in (1, 3, 5, 7)).lower())
    ctx = multiprocessing.get_context("fork")
    chunks = -(-size // CHUNK)
    pipes: list[Any] = []
    procs: list[Any] = []
    sent = 0
    pos = 0
    try:
        for _ in range(min(workers, chunks)):
            here, there = ctx.Pipe()
            proc = ctx.Process(
                target=_work, args=(there, path, size, inner, pre.passer is not None, pre.presence), daemon=True
            )
            proc.start()
            there.close()
            pipes.append(here)
            procs.append(proc)
        n = len(pipes)

        def ask() -> bool:
            """Send the next chunk number to its worker; False when the worker is gone."""
            nonlocal sent
            if sent < chunks:
                try:
                    pipes[sent % n].send(sent)
                except OSError:
                    return False
                sent += 1
            return True

        while sent < min(chunks, n * (AHEAD + 1)):
            if not ask():
                break
        for k in range(chunks if sent else 0):
            try:
                got = pipes[k % n].recv()
            except (EOFError, OSError):
                break
            if got[0] != k or got[1] != pos:  # an error, or not the chunk we are at
                break
            _, start, end, spans, newlines, held, quiet = got
            if not ask():
                break
            if quiet is not None and pre.passer is not None:
                near, head, tail = quiet
                if pre.passer(near, newlines[1] - BEFORE_LINES, head, tail):
                    # passed over unread: only its last lines are read (see quiet_start)
                    start, newlines = start + near, ([], BEFORE_LINES)
                    pos = start  # (the scanner has had the bytes before: read on alone from here)
            block = _read(fd, start, end)
            if len(block) != end - start:  # the file shrank under us
                break
            pos = end
            if block:  # (a chunk is empty when a line without newline runs from its start to EOF)
                pre.expect(block, spans, newlines, held)
                yield block
    finally:
        for conn in pipes:
            with contextlib.suppress(OSError):
                conn.send(None)
                conn.close()
        for proc in procs:
            proc.join(timeout=0.5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    while True:  # what the workers did not do: the rest of the file, alone
        data = os.pread(fd, CHUNK, pos)
        if not data:
            return
        pos += len(data)
        yield data
