"""What a run prints and returns, shared by file, pipe and follow modes (:mod:`oomdoctor.cli.diagnose`,
:mod:`oomdoctor.cli.follow`, :mod:`oomdoctor.cli.run_cmd`): the exit code, the redacted report and
the live findings. It imports none of those modes, so they import it at the top."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomdoctor.cli.errors import color_for
from oomdoctor.render import renderer

if TYPE_CHECKING:
    from oomdoctor.report import Finding, Report


def exit_code(report: Report, fail_on: str) -> int:
    if fail_on == "warning":
        return 1 if report.findings else 0
    return 1 if report.has_errors else 0


def write_atomically(output: str, data: bytes) -> None:
    """Write ``data`` to the file ``output`` whole or not at all: into a temporary file beside it,
    then renamed over it (a full disk leaves the old file, never a truncated report). A path that
    is not a regular file (``/dev/stdout``, a FIFO) is written directly."""
    import tempfile

    target = Path(output)
    try:
        st = target.stat()
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    else:
        if not stat.S_ISREG(st.st_mode):
            target.write_bytes(data)
            return
        mode = stat.S_IMODE(st.st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(target.parent) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_report(report: Report, fmt: str, output: str | None, stream: object, plain: bool = False) -> None:
    """Render ``report`` (secrets redacted: the one place every CLI report passes) to ``output`` or ``stream``."""
    from oomdoctor.redaction import redact_report

    report = redact_report(report)
    if output:
        write_atomically(output, renderer(fmt)(report, color=False).encode("utf-8"))
        return
    if stream is None:  # started with the stream closed (``>&-``)
        raise OSError(errno.EBADF, "the stream is closed")
    text = renderer(fmt)(report, color=color_for(stream) and not plain)
    stream.write(text)  # type: ignore[attr-defined]
    stream.flush()  # type: ignore[attr-defined]


#: formats written as the findings become final (the others once, at the end)
LIVE_FORMATS = ("text", "brief", "jsonl")


class LiveFindings:
    """Writes findings as soon as the scanner finishes them: text (a block per finding) and JSON
    Lines (a ``finding`` record per finding, the ``summary`` record at the end); the other formats
    are written once, at the end. ``every_report``: ``-f json`` writes the whole report so far
    (one JSON document) each time findings become final (``--follow``: a jq reader gets a
    document per change; the last one is the final report)."""

    def __init__(
        self, live: bool, stream: Any = None, plain: bool = False, fmt: str = "text",
        report_so_far: Any = None,
    ) -> None:
        self.live = live
        self.fmt = fmt if live else "text"
        self.stream = stream or sys.stderr
        self.plain = plain
        self.shown: set[int] = set()
        #: ``() -> Report`` of the findings so far (``-f json`` under ``--follow``), else None
        self.report_so_far = report_so_far

    def __call__(self, found: list[Finding]) -> None:
        self.shown.update(id(f) for f in found)
        if self.report_so_far is not None:
            from oomdoctor.redaction import redact_report
            from oomdoctor.render.json import render_json

            self._write(render_json(redact_report(self.report_so_far())))
        elif self.live:
            self._write(self._findings_text(found))

    def _findings_text(self, found: list[Finding]) -> str:
        from oomdoctor.redaction import redact_findings

        if self.fmt == "jsonl":
            from oomdoctor.render.json import finding_jsonl

            return "".join(finding_jsonl(f) for f in redact_findings(found))
        if self.fmt == "brief":
            from oomdoctor.render.text import render_brief_findings

            return render_brief_findings(redact_findings(found))
        from oomdoctor.render.text import render_findings_text

        return render_findings_text(redact_findings(found), color=self._color())

    def _color(self) -> bool:
        return color_for(self.stream) and not self.plain

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def summary(
        self, report: Report, fmt: str, output: str | None, *, quiet: bool = False, partial: bool = False
    ) -> None:
        """The end of a live run: unseen findings and one summary line (or the full report).

        ``partial``: analysis skipped some input, so "none found" covers only the rest."""
        try:
            if not self.live or self.report_so_far is not None:
                write_report(report, fmt, output, self.stream, self.plain)
                return
            rest = [f for f in report.findings if id(f) not in self.shown]
            text = self._findings_text(rest) if rest else ""
            if self.fmt == "jsonl":
                from oomdoctor.redaction import redact_report
                from oomdoctor.render.json import jsonl_summary

                self._write(text + jsonl_summary(redact_report(report)))
                return
            from oomdoctor.render.text import summary_line

            line = summary_line(report)  # the same line as file mode
            if report.findings or not quiet or report.summary.cut_lines:
                if partial and not report.findings:
                    line = line[:-1] + " in the part analysed."
                if self.fmt == "text":
                    from oomdoctor.render.text import healthy_text

                    text += healthy_text(report)
                from oomdoctor.render.text import cut_note

                text += cut_note(report) + line + "\n"
            self._write(text)
        except OSError:
            pass
