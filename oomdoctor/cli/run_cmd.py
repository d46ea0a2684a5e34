"""``oomdoctor run -- COMMAND ...``: run a command, tee its output, diagnose it as it runs.

stdout and stderr of the command share one pipe (or one pty with ``--pty``), so their lines keep
their order; ``PYTHONUNBUFFERED=1`` makes Python children write as they go. The command runs in
its own session (process group): SIGINT/SIGTERM/SIGHUP that reach oomdoctor are forwarded to the
whole group, and oomdoctor keeps reading until the output ends, so the shutdown messages are
diagnosed too. The exit status is the command's (killed by signal N: 128+N), so ``oomdoctor run``
can stand in for the command in scripts; ``--exit-status findings`` exits as ``oomdoctor FILE``
does instead (1 when an out-of-memory failure was found, else 0). A command that cannot be
started: 127 (not found) or 126 (not executable), with one line on stderr.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from oomdoctor.cli import complete
from oomdoctor.cli.diagnose import HINT_HELP, LANG_HELP
from oomdoctor.cli.errors import fail
from oomdoctor.i18n import N_, _

#: after the command exits, wait this long for output still held by its children
DRAIN_SECONDS = 2.0
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def register(app: typer.Typer) -> None:
    app.command(
        "run",
        help=N_(
            "Run COMMAND (after --), pass its merged stdout/stderr through and diagnose it live. "
            "Example: oomdoctor run -- vllm serve MODEL --max-model-len 32768. Exit status: the command's "
            "(128+N when killed by signal N), or with --exit-status findings 1 when an out-of-memory failure "
            "was found and 0 otherwise; 127/126 when the command cannot be started."
        ),
        context_settings={
            "allow_extra_args": True,
            "ignore_unknown_options": True,
            "allow_interspersed_args": False,
            "help_option_names": ["-h", "--help"],
        },
    )(run)


def run(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None, typer.Argument(metavar="COMMAND", hidden=True)
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help=N_("Report format at the end."), metavar="FORMAT",
                                     autocompletion=complete.formats)] = "text",
    output: Annotated[
        str | None, typer.Option("--output", "-o", help=N_("Write the report here."), metavar="PATH")
    ] = None,
    hint: Annotated[list[str] | None, typer.Option("--hint", help=HINT_HELP, metavar="KEY=VALUE", autocompletion=complete.hints)] = None,
    model_config: Annotated[
        str | None, typer.Option("--model-config", help=N_("The model's config.json (KV geometry)."), metavar="PATH")
    ] = None,
    rules: Annotated[
        list[str] | None, typer.Option("--rules", help=N_("Extra rule directory (repeatable)."), metavar="DIR")
    ] = None,
    use_pty: Annotated[
        bool, typer.Option("--pty", help=N_("Give the command a pseudo-terminal (line-buffered C output)."))
    ] = False,
    exit_status: Annotated[
        str, typer.Option("--exit-status", help=N_("command (its status) or findings (1 if an OOM was found)."),
                          metavar="FROM", autocompletion=complete.choices("command", "findings"))
    ] = "command",
    plain: Annotated[bool, typer.Option("--plain", help=N_("No colour, no rules."))] = False,
    brief: Annotated[
        bool, typer.Option("--brief", help=N_("One line per finding: where, kind, cause, first remedy."))
    ] = False,
    lang: Annotated[str | None, typer.Option("--lang", help=LANG_HELP, metavar="LANG", autocompletion=complete.langs)] = None,
) -> int:
    from oomdoctor.cli.diagnose import HintError, given_options, parse_hints, resolve_options
    from oomdoctor.cli.pipe import signal_grace
    from oomdoctor.render import FORMATS
    from oomdoctor.rulepack import RulePackError, default_pack, load_pack

    argv = list(command or [])
    if not argv:
        return fail(_("run: no command given (usage: oomdoctor run -- COMMAND [ARGS...])"))
    try:
        options = resolve_options(fmt if "fmt" in given_options(ctx) else None, None, plain, lang, brief)
    except ValueError as exc:
        return fail(str(exc))
    fmt, plain, lang = options.fmt, options.plain, options.lang
    if fmt not in FORMATS and fmt != "brief":
        return fail(_("unknown --format {value} (choose {choices})").format(value=repr(fmt), choices=", ".join(FORMATS)))
    if exit_status not in ("command", "findings"):
        return fail(_("unknown --exit-status {value} (choose command or findings)").format(value=repr(exit_status)))
    try:
        signal_grace()  # a bad OOMDOCTOR_SIGNAL_GRACE is refused before the command starts
    except ValueError as exc:
        return fail(str(exc))
    try:
        hints = {**options.hints, **parse_hints(hint or [])}
    except HintError as exc:
        return fail(str(exc))
    if model_config:
        from oomdoctor.cli.checks import model_config_error

        if (problem := model_config_error(model_config)) is not None:
            return fail(problem)
        hints["model-config"] = model_config
    try:
        pack = load_pack([Path(r) for r in rules]) if rules else default_pack()
    except RulePackError as exc:
        return fail(str(exc))
    if rules:
        from oomdoctor.cli.diagnose import announce_pack

        announce_pack(pack)
    from oomdoctor.i18n import resolve_lang, use_lang

    try:
        chosen = resolve_lang(lang)
    except ValueError as exc:
        return fail(f"--lang: {exc}")
    with use_lang(chosen):
        return run_command(argv, pack, hints, fmt, output, use_pty=use_pty, exit_status=exit_status, plain=plain)


def run_command(
    argv: list[str], pack: object, hints: dict[str, str], fmt: str, output: str | None, *, use_pty: bool = False,
    exit_status: str = "command", plain: bool = False,
) -> int:
    from oomdoctor.cli.diagnose import LIVE_FORMATS, LiveFindings, warm_imports
    from oomdoctor.cli.pipe import run_pipe
    from oomdoctor.scanner import Scanner

    scanner = Scanner(pack, source=f"<{Path(argv[0]).name}>", hints=hints)  # type: ignore[arg-type]
    scanner.set_command(argv)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if use_pty:
        import pty

        read_fd, write_fd = pty.openpty()
        _no_crlf(write_fd)
    else:
        read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            argv, stdout=write_fd, stderr=write_fd, env=env, start_new_session=True, close_fds=True
        )
    except FileNotFoundError:
        os.close(read_fd)
        os.close(write_fd)
        return fail(_("{command}: command not found").format(command=argv[0]), 127)
    except PermissionError:
        os.close(read_fd)
        os.close(write_fd)
        return fail(_("{command}: permission denied (not executable)").format(command=argv[0]), 126)
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        return fail(_("{command}: cannot run: {error}").format(command=argv[0], error=exc.strerror or exc), 126)
    os.close(write_fd)

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    exited_at: list[float] = []

    def child_gone() -> bool:
        if proc.poll() is None:
            return False
        if not exited_at:
            exited_at.append(time.monotonic())
        return time.monotonic() - exited_at[0] > DRAIN_SECONDS

    live = LiveFindings(fmt in LIVE_FORMATS and not output, plain=plain, fmt=fmt)
    try:
        try:
            out_fd: int | None = sys.stdout.fileno()
        except (OSError, ValueError):
            out_fd = None
        result = run_pipe(
            scanner, live, in_fd=read_fd, out_fd=out_fd, handle_signals=False, stop_when_idle=child_gone,
            warmup=warm_imports,
        )
        os.close(read_fd)
        status = proc.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if result.report is not None:
        live.summary(result.report, fmt, output, quiet=result.downstream_closed, partial=result.skipped_bytes > 0)
    if result.downstream_closed:
        from oomdoctor.cli import _quiet_stdout

        _quiet_stdout()
    if exit_status == "findings":
        return 1 if result.report is not None and result.report.has_errors else 0
    if status < 0:
        return 128 - status
    return status


def _no_crlf(fd: int) -> None:
    """A terminal turns each \\n the command writes into \\r\\n (ONLCR); the output passed
    through is a log, so the pty keeps the command's bytes as written."""
    import termios

    with contextlib.suppress(termios.error):
        attrs = termios.tcgetattr(fd)
        attrs[1] &= ~termios.ONLCR
        termios.tcsetattr(fd, termios.TCSANOW, attrs)


def describe(argv: list[str]) -> str:
    return shlex.join(argv)
