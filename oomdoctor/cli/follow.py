"""``oomdoctor --follow FILE`` (``-F``): diagnose a growing log like ``tail -F``.

The file is read from its start, then followed by name: when it is replaced (rotation: another
inode at the path) the old file is read to its end and the new one from its start; when it
shrinks (truncation, ``> file``) reading restarts at 0. A missing file is waited for. Findings are
printed as soon as they are complete, or after ``QUIET_SECONDS`` without new lines (``-f jsonl``: a
record each; ``-f json``: the whole report so far, a JSON document each time). SIGINT or SIGTERM
stops following; the summary is printed and the exit status is 130 or 143, as for the pipe and
``tail -F`` (the findings are in the report; the exit status says how following ended).
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
import time
from typing import BinaryIO

from oomdoctor.cli.errors import fail
from oomdoctor.cli.live import LIVE_FORMATS, LiveFindings, exit_code
from oomdoctor.cli.pipe import QUIET_SECONDS, READ_SIZE, say
from oomdoctor.i18n import _
from oomdoctor.scanner import RuleTimeout, Scanner

#: seconds between looks at the file when nothing new arrived
POLL_SECONDS = 0.2


class _Stop(BaseException):
    pass


class FollowError(Exception):
    """The followed file cannot be opened; the message is the path and the OS's reason."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop()


def follow_file(path: str, pack: object, hints: dict[str, str], fmt: str, output: str | None, fail_on: str) -> int:
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            return fail(_("{path}: is a directory").format(path=path))
    except FileNotFoundError:
        pass
    except OSError as exc:
        return fail(_("{path}: cannot follow: {error}").format(path=path, error=exc.strerror or exc))
    scanner = Scanner(pack, source=path, hints=hints)  # type: ignore[arg-type]
    every_report = fmt == "json" and not output  # a JSON document per change (see LiveFindings)
    live = LiveFindings(
        (fmt in LIVE_FORMATS or every_report) and not output, stream=sys.stdout, fmt=fmt,
        report_so_far=scanner.report_so_far if every_report else None,
    )
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_stop)
    follower = _Follower(path, scanner, live)
    error: str | None = None
    stopped_by: int | None = None
    try:
        follower.loop()
    except KeyboardInterrupt:
        stopped_by = signal.SIGINT
    except _Stop:
        stopped_by = signal.SIGTERM
    except (RuleTimeout, FollowError) as exc:
        error = str(exc)
    except Exception as exc:  # analysis bug: say it in one line, still summarise
        error = f"analysis failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        follower.close()
    if error is not None:
        return fail(error)
    try:
        report = scanner.close()
    except Exception as exc:
        return fail(_("analysis failed: {error}: {detail}").format(error=type(exc).__name__, detail=" ".join(str(exc).split())))
    live.summary(report, fmt, output)
    if stopped_by is not None:  # as the pipe and tail -F: 130 after Ctrl-C, 143 after SIGTERM
        return 128 + int(stopped_by)
    return exit_code(report, fail_on)


def is_glob(path: str) -> bool:
    """Whether ``--follow``'s argument is a pattern (node mode) rather than one file's path."""
    return any(c in path for c in "*?[") and not os.path.exists(path)


def follow_glob(pattern: str, pack: object, fmt: str, fail_on: str) -> int:
    """Node mode: follow every file matching ``pattern`` (each its own stream, see
    :mod:`oomdoctor.fleet.node`) and send its findings to the fleet's sinks, configured as for
    ``oomdoctor serve`` (``OOMDOCTOR_ALERTMANAGER_URL``, ...). Each firing or resolved finding is
    printed as it happens, a JSON line each with ``-f jsonl`` or ``-f json``. Exit status as for
    one followed file: 130 or 143 when stopped by a signal."""
    import json
    import socket

    from oomdoctor.fleet import Fleet, FleetConfig
    from oomdoctor.fleet.node import GlobFollower

    try:
        cfg = FleetConfig.from_env(os.environ)
    except ValueError as exc:
        return fail(str(exc))
    fleet = Fleet(cfg, pack)  # type: ignore[arg-type]
    errors = [0]
    warnings = [0]

    def show(event: str, ff: object) -> None:
        from oomdoctor.fleet.alerts import FleetFinding

        assert isinstance(ff, FleetFinding)
        if event == "firing":
            errors[0] += 1
        if fmt in ("jsonl", "json"):
            line = json.dumps({"status": event, **ff.to_json()})
        else:
            lab, ann = ff.labels, ff.annotations
            line = f"{event}: {lab.get('kind')} [{lab.get('cause')}] {ff.stream}: {ann.get('summary', '')}"
            if ann.get("command"):
                line += f" | {ann.get('remedy', '')}: {ann['command']}"
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def counted(ff: object) -> None:
        from oomdoctor.fleet.alerts import FleetFinding

        assert isinstance(ff, FleetFinding)
        if ff.labels.get("severity") != "error":
            warnings[0] += 1

    fleet.table.subscribe(show)
    fleet.table.on_finding.append(counted)
    node = os.environ.get("NODE_NAME") or socket.gethostname()
    follower = GlobFollower(pattern, fleet.table, node)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_stop)
    stopped_by: int | None = None
    fleet.start()
    try:
        while True:
            if not follower.poll():
                time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        stopped_by = signal.SIGINT
    except _Stop:
        stopped_by = signal.SIGTERM
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        follower.close()
        fleet.stop()
    if stopped_by is not None:
        return 128 + int(stopped_by)
    return 1 if errors[0] or (fail_on == "warning" and warnings[0]) else 0


class _Follower:
    def __init__(self, path: str, scanner: Scanner, live: object) -> None:
        self.path = path
        self.scanner = scanner
        self.live = live
        self.fh: BinaryIO | None = None
        self.ident: tuple[int, int] | None = None
        self.opened = 0
        self.waiting_said = False

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def _open(self) -> bool:
        try:
            fh = open(self.path, "rb", buffering=0)  # noqa: SIM115
        except FileNotFoundError:
            if not self.waiting_said:
                say("oomdoctor: " + _("cannot open {path}: No such file or directory; waiting for it to appear").format(
                    path=self.path))
                self.waiting_said = True
            return False
        except OSError as exc:
            raise FollowError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        st = os.fstat(fh.fileno())
        self.fh = fh
        self.ident = (st.st_dev, st.st_ino)
        self.opened += 1
        if self.opened > 1:
            self.scanner.new_source(f"{self.path} (reopened {self.opened - 1})")
        return True

    def _findings(self) -> None:
        found = self.scanner.poll()
        if found:
            self.live(found)  # type: ignore[operator]

    def loop(self) -> None:
        last_data = time.monotonic()
        dirty = False
        while True:
            if self.fh is None and not self._open():
                time.sleep(POLL_SECONDS)
                continue
            assert self.fh is not None
            data = self.fh.read(READ_SIZE)
            if data:
                self.scanner.feed(data)
                self._findings()
                dirty = True
                last_data = time.monotonic()
                continue
            # nothing new: rotated, truncated, or just quiet?
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                st = None
            if st is None or (st.st_dev, st.st_ino) != self.ident:
                # the old file is drained (read returned b""); move on to the new one
                self.close()
                continue
            if st.st_size < self.fh.tell():
                self.fh.seek(0)
                self.opened += 1
                self.scanner.new_source(f"{self.path} (truncated {self.opened - 1})")
                continue
            if dirty and time.monotonic() - last_data >= QUIET_SECONDS:
                self.scanner.flush()
                self._findings()
                dirty = False
            time.sleep(POLL_SECONDS)
