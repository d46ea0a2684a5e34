"""Command line entry point: ``oomdoctor [FILE...]`` and ``oomdoctor rules|run|fit|serve ...``.

The CLI is a thin adapter over the core (``oomdoctor.diagnose``, ``Scanner``, renderers).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable

from oomdoctor.cli.commands import SUBCOMMANDS


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns (and exits with) the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    from oomdoctor.i18n import use_lang

    with use_lang(_lang_of(args)):  # every message, even one before the options are parsed
        moved = _lang_after_subcommand(args)
        bad = _unknown_lang(args) if len(moved) < len(args) else None  # rules, serve: checked here
        code = _bad_lang(bad) if bad else _main(moved)
    if argv is None:
        sys.exit(code)
    return code


def _explicit_lang(args: list[str]) -> str | None:
    """The value of the last ``--lang`` before any ``--``, else None."""
    explicit = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(args):
            explicit = args[i + 1]
        elif arg.startswith("--lang="):
            explicit = arg.split("=", 1)[1]
    return explicit


def _lang_of(args: list[str]) -> str:
    """The language the command line asks for (``--lang`` before any ``--``), else the environment's;
    an unknown ``--lang`` is reported later by the command, in the environment's language."""
    from oomdoctor.i18n import resolve_lang

    try:
        return resolve_lang(_explicit_lang(args))
    except ValueError:
        return resolve_lang(None)


def _unknown_lang(args: list[str]) -> str | None:
    """The error of a ``--lang`` whose value is no language oomdoctor speaks, else None."""
    from oomdoctor.i18n import resolve_lang

    try:
        resolve_lang(_explicit_lang(args))
    except ValueError as exc:
        return str(exc)
    return None


def _bad_lang(message: str) -> int:
    from oomdoctor.cli.errors import fail

    return fail(f"--lang: {message}")


def _main(args: list[str]) -> int:
    from oomdoctor.i18n import _

    if not (args and args[0] == "serve"):  # the server's models are the user's service: left as they are
        from oomdoctor.cli.pydantic_plugins import skip_plugin_lookup

        skip_plugin_lookup()
    shell = _shown_completion_shell(args)
    if shell is not None:
        return _show_completion(shell)
    try:
        if (args and args[0] in SUBCOMMANDS) or _completing_subcommand():
            from oomdoctor.cli.tools import app as tools_app

            if _completing_subcommand():
                from typer.completion import completion_init

                completion_init()  # the subcommands' app adds no --install-completion of its own
            code = _invoke(tools_app, args)
        else:
            from oomdoctor.cli import diagnose

            args = _help_not_a_file(args)
            plain = diagnose.plain_options(args)
            code = _invoke(diagnose.app, args) if plain is None else _run_plain(diagnose.run, plain)
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
        code = fail(_("internal error: {error}: {detail} (set OOMDOCTOR_DEBUG=1 for the traceback)").format(
            error=type(exc).__name__, detail=detail))
    return code


#: options whose value is a file: ``oomdoctor --follow --help`` asks for help, not to follow "--help"
_FILE_OPTIONS = ("--follow", "-F", "--output", "-o")


def _help_not_a_file(args: list[str]) -> list[str]:
    """``args`` with ``--help``/``-h`` taken as the help option where it stands as a file option's
    value (a file of that name is still ``./--help``)."""
    for i, arg in enumerate(args[:-1]):
        if arg == "--":
            break
        if arg in _FILE_OPTIONS and args[i + 1] in ("--help", "-h"):
            return ["--help"]
    return args


#: the shells ``--show-completion SHELL`` writes a script for (typer's)
SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _shown_completion_shell(args: list[str]) -> str | None:
    """``--show-completion zsh`` (or ``=zsh``): the shell named, else None. typer's own option is
    a flag when the shell can be detected, so the name would be taken for a FILE and the detected
    shell's script printed instead."""
    if not args or args[0] in SUBCOMMANDS:
        return None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg.startswith("--show-completion="):
            return arg.split("=", 1)[1]
        if arg == "--show-completion" and i + 1 < len(args) and args[i + 1] in SHELLS:
            return args[i + 1]
    return None


def _show_completion(shell: str) -> int:
    from oomdoctor.cli.errors import fail

    if shell not in SHELLS:
        from oomdoctor.i18n import _

        return fail(_("--show-completion: unknown shell {shell} (choose {shells})").format(
            shell=repr(shell), shells=", ".join(SHELLS)))
    from typer.completion import get_completion_script

    sys.stdout.write(get_completion_script(prog_name="oomdoctor", complete_var="_OOMDOCTOR_COMPLETE", shell=shell) + "\n")
    return 0


def _completing_subcommand() -> bool:
    """Shell completion (``_OOMDOCTOR_COMPLETE`` set) of a word after a subcommand's name: the
    subcommands' app completes it. The first word (a file or a subcommand name) is the diagnose
    command's, whose FILE argument also offers the subcommand names."""
    if "_OOMDOCTOR_COMPLETE" not in os.environ:
        return False
    if "COMP_WORDS" in os.environ:  # bash: the words, and the index of the one being completed
        import shlex

        try:
            words = shlex.split(os.environ["COMP_WORDS"])
            done = words[1 : int(os.environ.get("COMP_CWORD", "0"))]
        except ValueError:
            return False
    else:  # zsh, fish, powershell (typer's scripts): the line up to the cursor
        line = os.environ.get("_TYPER_COMPLETE_ARGS", "")
        words = line.split()
        done = words[1:] if line.endswith(" ") else words[1:-1]
    return bool(done) and done[0] in SUBCOMMANDS


def _invoke(app, args: list[str]) -> int:
    """Run a typer app without its own exit handling, its help in the language in force; usage
    errors become one line, exit 2, in the language in force (:mod:`oomdoctor.cli.usage_errors`).

    typer vendors click from 0.22 on, so click's exception classes are recognised by shape
    (``format_message`` + ``exit_code``) rather than imported.
    """
    from typer.main import get_command

    from oomdoctor.cli.errors import fail
    from oomdoctor.cli.help_text import localized

    try:  # typer builds a fresh click command for each call; its help is put in the language in force
        result = localized(get_command(app))(args=args, prog_name="oomdoctor", standalone_mode=False)
    except SystemExit:
        # click turns a broken pipe (``oomdoctor rules list | head``) into exit 1, with stdout
        # wrapped to silence the final flush; a reader that stopped early is no error (as for ls)
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            _quiet_stdout()
            return 0
        raise
    except Exception as exc:
        name = type(exc).__name__
        if name == "Exit":
            return int(getattr(exc, "exit_code", 0))
        if name == "Abort":
            return 130
        if name == "NoArgsIsHelpError":
            sys.stdout.write(str(getattr(exc, "ctx", None) and exc.ctx.get_help()) + "\n")  # type: ignore[attr-defined]
            return 2
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            from oomdoctor.cli.usage_errors import translate

            return fail(translate(exc.format_message()))
        raise
    return int(result or 0)


def _run_plain(run: Callable[..., int], options: dict[str, object]) -> int:
    """Run a command parsed without typer, with the outcomes ``_invoke`` gives the same errors
    (click turns EOFError into Abort, EPIPE into exit 1 with quiet streams)."""
    try:
        return run(**options)
    except EOFError:
        return 130
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        _quiet_stdout()
        sys.exit(1)


def _lang_after_subcommand(args: list[str]) -> list[str]:
    """``oomdoctor --lang ja fit ...`` means ``oomdoctor fit --lang ja ...``: a leading ``--lang``
    before a subcommand that takes one moves behind the subcommand's name; before one that takes
    none (``rules``) it is removed, :func:`main` having read it."""
    if args and args[0].startswith("--lang="):
        lang, rest = args[:1], args[1:]
    elif len(args) >= 2 and args[0] == "--lang":
        lang, rest = args[:2], args[2:]
    else:
        return args
    if rest and rest[0] in ("fit", "run"):
        return [rest[0], *lang, *rest[1:]]
    if rest and rest[0] in SUBCOMMANDS:  # rules, serve: no option of their own; main() sets the language
        return rest
    return args


def _quiet_stdout() -> None:
    """After EPIPE on stdout: point it at /dev/null so the interpreter's final flush is silent
    (the recipe in Python's signal module documentation; SIGPIPE stays ignored)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
