"""Pipe mode: pass every input byte through unbuffered, diagnose on the side.

Input is read with ``os.read`` (whatever is available, up to 1 MiB) and written to stdout
*before* the scanner sees it, so the upstream never waits for analysis. A finished finding is
printed on stderr at once; a finding still waiting for look-ahead lines is decided after
``QUIET_SECONDS`` without input.
"""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable

from oomdoctor.report import Finding, Report
from oomdoctor.scanner import Scanner

QUIET_SECONDS = 0.5
READ_SIZE = 1 << 20


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class PipeResult:
    def __init__(self) -> None:
        self.report: Report | None = None
        self.analysis_error: str | None = None
        self.downstream_closed = False


def run_pipe(
    scanner: Scanner,
    on_findings: Callable[[list[Finding]], None],
    *,
    in_fd: int = 0,
    out_fd: int | None = 1,
) -> PipeResult:
    """Copy ``in_fd`` to ``out_fd`` (None: no passthrough) and feed the scanner until EOF."""
    result = PipeResult()
    analysing = True
    dirty = False
    while True:
        timeout = QUIET_SECONDS if (dirty and analysing) else None
        try:
            ready, _, _ = select.select([in_fd], [], [], timeout)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        if not ready:
            dirty = False
            if analysing:
                try:
                    scanner.flush()
                    found = scanner.poll()
                    if found:
                        on_findings(found)
                except Exception as exc:  # analysis must never stop the passthrough
                    analysing = False
                    result.analysis_error = f"{type(exc).__name__}: {exc}"
            continue
        data = os.read(in_fd, READ_SIZE)
        if not data:
            break
        if out_fd is not None and not result.downstream_closed:
            try:
                write_all(out_fd, data)
            except BrokenPipeError:
                result.downstream_closed = True
        if analysing:
            try:
                scanner.feed(data)
                found = scanner.poll()
                if found:
                    on_findings(found)
                dirty = True
            except Exception as exc:
                analysing = False
                result.analysis_error = f"{type(exc).__name__}: {exc}"
                _say(f"oomdoctor: analysis stopped: {result.analysis_error}")
    if analysing:
        try:
            result.report = scanner.close()
            rest = [f for f in result.report.findings if not getattr(f, "_shown", False)]
            del rest
        except Exception as exc:
            result.analysis_error = f"{type(exc).__name__}: {exc}"
    return result


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:
        pass
