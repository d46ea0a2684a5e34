"""Command line entry point: ``oomdoctor [FILE...]`` and ``oomdoctor rules|run|fit|serve ...``.

The CLI is a thin adapter over the core (``oomdoctor.diagnose``, ``Scanner``, renderers).
"""

from __future__ import annotations

import contextlib
import os
import sys

SUBCOMMANDS = ("rules", "run", "fit", "serve")


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns (and exits with) the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] in SUBCOMMANDS:
            from oomdoctor.cli.tools import app as tools_app

            code = _invoke(tools_app, args)
        else:
            from oomdoctor.cli.diagnose import app as diagnose_app

            code = _invoke(diagnose_app, args)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        _quiet_stdout()
        code = 0
    except Exception as exc:  # the last line of defence: one line, never a traceback
        if os.environ.get("OOMDOCTOR_DEBUG"):
            raise
        from oomdoctor.cli.errors import fail

        detail = " ".join(str(exc).split())
        code = fail(f"internal error: {type(exc).__name__}: {detail} (set OOMDOCTOR_DEBUG=1 for the traceback)")
    if argv is None:
        sys.exit(code)
    return code


def _exception_modules() -> list:
    """click's exceptions, from typer's vendored copy (typer >= 0.20) and/or click itself."""
    import importlib

    mods = []
    with contextlib.suppress(ImportError):
        mods.append(importlib.import_module("typer._click.exceptions"))
    try:
        from click import exceptions as plain

        mods.append(plain)
    except ImportError:
        pass
    return mods


def _invoke(app, args: list[str]) -> int:
    from oomdoctor.cli.errors import fail

    mods = _exception_modules()

    def kinds(name: str) -> tuple[type[BaseException], ...]:
        return tuple(getattr(m, name) for m in mods if hasattr(m, name))

    try:
        result = app(args=args, prog_name="oomdoctor", standalone_mode=False)
    except kinds("NoSuchOption") as exc:
        return fail(f"no such option: {exc.option_name}")  # type: ignore[attr-defined]
    except kinds("UsageError") as exc:  # BadParameter, MissingParameter, ... are UsageErrors
        return fail(exc.format_message())  # type: ignore[attr-defined]
    except kinds("Exit") as exc:
        return int(exc.exit_code)  # type: ignore[attr-defined]
    except kinds("Abort"):
        return 130
    return int(result or 0)


def _quiet_stdout() -> None:
    """After EPIPE on stdout: point it at /dev/null so the interpreter's final flush is silent
    (the recipe in Python's signal module documentation; SIGPIPE stays ignored)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
