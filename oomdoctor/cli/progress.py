"""A progress bar on stderr for long post-mortems (file mode only, only when stderr is a TTY).

Bytes read, rate and findings so far; it disappears when the scan ends. Small inputs, pipes and
redirected stderr get no bar and do not even import ``rich.progress``.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any

#: inputs smaller than this finish too fast for a bar to help
MIN_BYTES = 64 << 20


def _total(paths: list[str]) -> int | None:
    total = 0
    for p in paths:
        if p == "-":
            return None
        try:
            with open(p, "rb") as f:
                head = f.read(6)
            if head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head[:6] == b"\xfd7zXZ\x00" or head[:4] == b"\x28\xb5\x2f\xfd":
                return None  # compressed: the decompressed size is unknown
            total += os.path.getsize(p)
        except OSError:
            return None
    return total


class FileProgress:
    """``with FileProgress(paths) as bar: bar.advance(len(block), findings)``."""

    def __init__(self, paths: list[str], stream: Any = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._bar: Any = None
        self._task: Any = None
        try:
            tty = bool(self._stream.isatty())
        except (AttributeError, ValueError, OSError):
            tty = False
        if not tty or os.environ.get("OOMDOCTOR_NO_PROGRESS"):
            return
        total = _total(paths)
        if total is None or total < MIN_BYTES:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._bar = Progress(
            TextColumn("oomdoctor"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[findings]} finding(s)"),
            console=Console(file=self._stream),
            transient=True,
            refresh_per_second=4,
        )
        self._task = self._bar.add_task("scan", total=total, findings=0)

    @property
    def active(self) -> bool:
        return self._bar is not None

    def __enter__(self) -> FileProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def advance(self, nbytes: int, findings: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=nbytes, findings=findings)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
