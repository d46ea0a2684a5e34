"""``oomdoctor [FILE...]``: post-mortem on files, or pipe mode on stdin."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from oomdoctor import __version__
from oomdoctor.cli import complete
from oomdoctor.cli.commands import SUBCOMMANDS
from oomdoctor.cli.errors import fail, warn
from oomdoctor.cli.live import LIVE_FORMATS, LiveFindings, exit_code
from oomdoctor.cli.live import write_report as _write_report
from oomdoctor.i18n import N_, _
from oomdoctor.render import FORMATS

if TYPE_CHECKING:
    import typer

    from oomdoctor.inputs import InputError
    from oomdoctor.report import Report
    from oomdoctor.rulepack import RulePack
    from oomdoctor.scanner import Scanner

# Pipe mode starts passing input through before the rule pack, pydantic and the scanner are
# imported (they load in the analyser thread); the other modes import them where they need them.

from oomdoctor.hints import HINT_KEYS as HINT_KEYS
from oomdoctor.hints import HintError, parse_hint_items

HINT_HELP = N_(
    "Fact KEY=VALUE (repeatable), KEY one of: gpus, gpu, gpu-memory, model, model-config, vllm-version, "
    "version. E.g. gpus=2."
)  # names every key of HINT_KEYS (a test checks it)
LANG_HELP = N_(
    "Language of the explanations: en or ja (default: OOMDOCTOR_LANG, then LC_ALL/LC_MESSAGES/LANG, "
    "then en). Flags, kinds and JSON keys stay English."
)

HELP = N_(
    "Diagnose GPU out-of-memory failures in log FILEs (.gz/.bz2/.xz ok; '-' is stdin). With no FILE and "
    "stdin a pipe, pass the input through to stdout and print the diagnosis on stderr (with -q, nothing "
    "passes through and the diagnosis goes to stdout).\n\n"
    "Exit status: 0 no out-of-memory failure (with --fail-on warning: no finding), 1 one was found, "
    "2 usage or input error, 130 interrupted (Ctrl-C)."
)

#: the "Commands" section of ``oomdoctor --help`` (after the options, as click lists a group's)
COMMANDS_HELP: tuple[tuple[str, str], ...] = (
    ("run -- COMMAND", N_("Run COMMAND, pass its output through and diagnose it live.")),
    ("fit", N_("Pre-flight: will a model fit on these GPUs, and with which flags?")),
    ("serve", N_("HTTP service; Slack and Mattermost answers.")),
    ("rules list|show|test", N_("List, show and test the rules.")),
)
COMMANDS_MORE = N_("See oomdoctor COMMAND --help.")


def _command_class() -> type:
    """typer's command class, with a Commands section after the options in ``--help``."""
    from typer.core import TyperCommand

    class DiagnoseCommand(TyperCommand):
        def format_options(self, ctx: Any, formatter: Any) -> None:
            super().format_options(ctx, formatter)
            with formatter.section(N_("Commands")):
                formatter.write_dl([(name, _(text)) for name, text in COMMANDS_HELP])
                formatter.write_paragraph()
                formatter.write_text(_(COMMANDS_MORE))

    return DiagnoseCommand


def parse_hints(items: list[str]) -> dict[str, str]:
    """``["gpus=2"]`` -> ``{"gpus": "2"}``; raises :class:`HintError` for a malformed hint, an
    unknown key or a value the key does not take (:mod:`oomdoctor.hints`, shared with the server)."""
    return parse_hint_items(items)


def _version(value: bool) -> None:
    if value:
        import typer

        print(f"oomdoctor {__version__}")
        raise typer.Exit(0)


def _complete_first_word(ctx: Any, incomplete: str) -> list[str]:
    """Shell completion of FILE: the first word may also be a subcommand (``run``, ``fit``, ...).
    When none matches, nothing is returned and the shell completes file names itself."""
    import glob


    if ctx.params.get("files"):
        return []
    names = [s for s in SUBCOMMANDS if s.startswith(incomplete)]
    if not names:
        return []
    paths = sorted(glob.glob(glob.escape(incomplete) + "*"))
    return names + [p + "/" if os.path.isdir(p) else p for p in paths]


def _build_app() -> typer.Typer:
    """The typer command (help, usage errors and every option spelling). Built on first use:
    plain invocations (see :func:`plain_options`) skip typer and click altogether."""
    global typer
    import typer

    app = typer.Typer(add_completion=True, pretty_exceptions_enable=False, rich_markup_mode=None)

    @app.command(help=HELP, cls=_command_class(), context_settings={"help_option_names": ["-h", "--help"]})
    def diagnose(
        ctx: typer.Context,
        files: Annotated[
            list[str] | None,
            typer.Argument(metavar="FILE", show_default=False, hidden=True, autocompletion=_complete_first_word),
        ] = None,
        fmt: Annotated[
            str, typer.Option("--format", "-f", help=N_("One of: text, json, jsonl, markdown, slack."), metavar="FORMAT",
                         autocompletion=complete.formats)
        ] = "text",
        output: Annotated[
            str | None, typer.Option("--output", "-o", help=N_("Write the report here."), metavar="PATH")
        ] = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help=N_("Pipe mode: do not pass input through."))] = False,
        hint: Annotated[list[str] | None, typer.Option("--hint", help=HINT_HELP, metavar="KEY=VALUE", autocompletion=complete.hints)] = None,
        model_config: Annotated[
            str | None,
            typer.Option("--model-config", help=N_("The model's config.json (KV geometry)."), metavar="PATH"),
        ] = None,
        rules: Annotated[
            list[str] | None, typer.Option("--rules", help=N_("Extra rule directory (repeatable)."), metavar="DIR")
        ] = None,
        fail_on: Annotated[
            str, typer.Option("--fail-on", help=N_("Exit 1 on: error or warning."), metavar="LEVEL",
                         autocompletion=complete.choices("error", "warning"))
        ] = "error",
        follow: Annotated[
            str | None, typer.Option("--follow", "-F", help=N_("Follow FILE like tail -F."), metavar="FILE")
        ] = None,
        plain: Annotated[
            bool, typer.Option("--plain", help=N_("No colour, no rules (also when not a terminal or NO_COLOR is set)."))
        ] = False,
        brief: Annotated[
            bool, typer.Option("--brief", help=N_("One line per finding: where, kind, cause, first remedy."))
        ] = False,
        lang: Annotated[
            str | None,
            typer.Option("--lang", help=LANG_HELP, metavar="LANG", autocompletion=complete.langs),
        ] = None,
        version: Annotated[
            bool, typer.Option("--version", callback=_version, is_eager=True, help=N_("Print the version."))
        ] = False,
    ) -> int:
        given = given_options(ctx)  # a default is not given: the config file's value then applies
        return run(files, fmt if "fmt" in given else None, output, quiet, hint, model_config, rules,
                   fail_on if "fail_on" in given else None, follow, plain, lang, brief)

    return app


def given_options(ctx: Any) -> set[str]:
    """The parameters of the command being run (``ctx``: typer's context) that the command line
    gave, not their defaults. (typer may vendor click: the source is told by its name.)"""
    given = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if source is not None and getattr(source, "name", "") != "DEFAULT":
            given.add(name)
    return given


def __getattr__(name: str) -> Any:
    if name == "app":
        app = _build_app()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Options :func:`plain_options` reads itself: spelling -> (parameter, repeatable).
_PLAIN_OPTIONS: dict[str, tuple[str, bool]] = {
    "-f": ("fmt", False),
    "--format": ("fmt", False),
    "-o": ("output", False),
    "--output": ("output", False),
    "--hint": ("hint", True),
    "--model-config": ("model_config", False),
    "--rules": ("rules", True),
    "--fail-on": ("fail_on", False),
    "--lang": ("lang", False),
}


def plain_options(args: list[str]) -> dict[str, Any] | None:
    """The arguments of :func:`run` for a plain command line, or None to let typer parse it.

    Plain means: file names that do not start with ``-``, ``-q``/``--quiet``, and the options of
    ``_PLAIN_OPTIONS`` written ``-f VALUE``, ``--format VALUE`` or ``--format=VALUE`` with a
    value that does not start with ``-`` (and a well-formed ``--hint``). These parse the same
    way in click; everything else (help, version, ``--``, ``-``, ``-fjson``, ``--follow``,
    errors, shell completion) goes through typer, whose import and command building cost more
    than the diagnosis of a small log.
    """
    if any(k.startswith("_OOMDOCTOR_COMPLETE") for k in os.environ):
        return None
    opts: dict[str, Any] = {"files": None, "quiet": False}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-"):
            opts["files"] = [*(opts["files"] or []), arg]
            continue
        if arg in ("-q", "--quiet"):
            opts["quiet"] = True
            continue
        if arg in ("--plain", "--brief"):
            opts[arg[2:]] = True
            continue
        name, eq, value = arg.partition("=")
        if name not in _PLAIN_OPTIONS or (eq and not name.startswith("--")):
            return None
        if not eq:
            if i >= len(args):
                return None
            value = args[i]
            i += 1
        if value.startswith("-"):
            return None
        param, repeatable = _PLAIN_OPTIONS[name]
        if param == "hint":
            key, has_eq, _rest = value.partition("=")
            if not has_eq or not key.strip():
                return None
        opts[param] = [*(opts.get(param) or []), value] if repeatable else value
    return opts


def run(
    files: list[str] | None = None,
    fmt: str | None = None,
    output: str | None = None,
    quiet: bool = False,
    hint: list[str] | None = None,
    model_config: str | None = None,
    rules: list[str] | None = None,
    fail_on: str | None = None,
    follow: str | None = None,
    plain: bool = False,
    lang: str | None = None,
    brief: bool = False,
) -> int:
    """``oomdoctor [FILE...]`` once the command line is parsed; returns the exit code.

    Options not given come from the config file (:mod:`oomdoctor.cli.config_file`), else the
    defaults. The language (``--lang``, else ``OOMDOCTOR_LANG``, else the config file's, else the
    locale, see :func:`oomdoctor.i18n.resolve_lang`) is in force for the diagnosis and its output."""
    from oomdoctor.i18n import resolve_lang, use_lang

    try:
        options = resolve_options(fmt, fail_on, plain, lang, brief)
    except ValueError as exc:
        return fail(str(exc))
    try:
        chosen = resolve_lang(options.lang)
    except ValueError as exc:
        return fail(f"--lang: {exc}")
    with use_lang(chosen):
        return _run(files, options.fmt, output, quiet, hint, model_config, rules, options.fail_on, follow, options.plain,
                    options.hints)


class Options:
    """The output options in force: the command line's, else the config file's, else the defaults."""

    def __init__(self, fmt: str, fail_on: str, plain: bool, lang: str | None, hints: dict[str, str]) -> None:
        self.fmt = fmt  # "brief" for --brief
        self.fail_on = fail_on
        self.plain = plain
        self.lang = lang
        self.hints = hints  # the config file's (a --hint of the same key wins)


def resolve_options(fmt: str | None, fail_on: str | None, plain: bool, lang: str | None, brief: bool) -> Options:
    """Raises ValueError (one line) for a config file that cannot be used, or ``--brief`` with a
    format other than text."""
    from oomdoctor.cli.config_file import load_config

    cfg = load_config()
    out = cfg.output
    if lang is None and not os.environ.get("OOMDOCTOR_LANG"):
        lang = out.get("lang")
    chosen = fmt or out.get("format") or "text"
    if brief and chosen != "text":
        raise ValueError(_("--brief writes text; it does not combine with --format {value}").format(value=chosen))
    if chosen == "text" and (brief or (fmt is None and out.get("brief"))):
        chosen = "brief"
    return Options(chosen, fail_on or out.get("fail-on") or "error", plain or bool(out.get("plain")), lang, cfg.hints)


def _run(
    files: list[str] | None,
    fmt: str,
    output: str | None,
    quiet: bool,
    hint: list[str] | None,
    model_config: str | None,
    rules: list[str] | None,
    fail_on: str,
    follow: str | None,
    plain: bool,
    base_hints: dict[str, str] | None = None,
) -> int:
    if fmt not in FORMATS and fmt != "brief":
        return fail(_("unknown --format {value} (choose {choices})").format(value=repr(fmt), choices=", ".join(FORMATS)))
    if fail_on not in ("error", "warning"):
        return fail(_("unknown --fail-on {value} (choose error or warning)").format(value=repr(fail_on)))
    try:
        hints = {**(base_hints or {}), **parse_hints(hint or [])}
    except HintError as exc:
        return fail(str(exc))
    if model_config:
        from oomdoctor.cli.checks import model_config_error

        if (problem := model_config_error(model_config)) is not None:
            return fail(problem)
        hints["model-config"] = model_config
    rule_dirs = [Path(r) for r in (rules or [])]
    env_rules = os.environ.get("OOMDOCTOR_RULES")
    if env_rules:
        rule_dirs += [Path(p) for p in env_rules.split(os.pathsep) if p]
    paths = list(files or [])
    pack: RulePack | None = None  # pipe mode loads the built-in pack while input passes through
    if paths or follow or rule_dirs:
        from oomdoctor.rulepack import RulePackError, default_pack, load_pack

        try:
            pack = load_pack(rule_dirs) if rule_dirs else default_pack()
        except RulePackError as exc:
            return fail(str(exc))
        if rule_dirs:
            announce_pack(pack)
    if follow:
        if paths:  # (each file is its own run: one follower each)
            return fail(_("--follow follows one file; {files} would not be read: run one oomdoctor --follow per file").format(
                files=", ".join(paths)))
        from oomdoctor.cli.follow import follow_file, follow_glob, is_glob

        if is_glob(follow):  # node mode: every matching file, each its own stream, to the fleet's sinks
            return follow_glob(follow, pack, fmt, fail_on)
        return follow_file(follow, pack, hints, fmt, output, fail_on)
    if not paths:
        if sys.stdin is None or sys.stdin.isatty():
            return fail(_("no input: give a log FILE, or pipe a log into oomdoctor (see oomdoctor --help)"))
        return _pipe_mode(pack, hints, fmt, output, quiet, fail_on, plain)
    return _file_mode(paths, pack, hints, fmt, output, fail_on, plain)


def announce_pack(pack: RulePack) -> None:
    """Print what loading the user's rules had to say, and send warnings of the run to stderr."""
    for message in pack.warnings:
        warn(message)
    pack.warn = warn


def looks_binary(block: bytes) -> bool:
    """NUL bytes near the start: not a text log (logs in UTF-16 included, which read poorly)."""
    return b"\x00" in block[:8192]


def _file_mode(
    paths: list[str], pack: object, hints: dict[str, str], fmt: str, output: str | None, fail_on: str,
    plain: bool = False,
) -> int:
    """Each file is its own run, diagnosed by a scanner of its own (a llama.cpp log beside a vLLM
    one must not take vLLM's engine, model or launch arguments); the reports are then joined."""
    from oomdoctor.cli.progress import FileProgress
    from oomdoctor.report import combine_reports
    from oomdoctor.scanner import RuleTimeout

    reports: list[Report] = []
    input_error: InputError | None = None
    try:
        with FileProgress(paths) as bar:
            for path in paths:
                report, input_error = _scan_file(path, pack, hints, bar, sum(len(r.findings) for r in reports))
                reports.append(report)
                if input_error is not None:
                    break
        report = combine_reports(reports)
    except RuleTimeout as exc:
        return fail(str(exc))
    except Exception as exc:  # an analysis bug must not end in a traceback
        return fail(_("analysis failed: {error}: {detail}").format(error=type(exc).__name__, detail=" ".join(str(exc).split())))
    if input_error is not None and not input_error.partial and not report.findings:
        return fail(str(input_error))
    try:
        _write_report(report, fmt, output, sys.stdout, plain)
    except BrokenPipeError:  # the reader stopped early: the analysis is whole, its verdict stands
        _quiet_broken_pipe()
        return exit_code(report, fail_on) if input_error is None else 2
    except OSError as exc:
        return fail(_("{path}: cannot write: {error}").format(path=output or "<stdout>", error=exc.strerror or exc))
    if input_error is not None:
        return fail(str(input_error))
    return exit_code(report, fail_on)


def _scan_file(path: str, pack: object, hints: dict[str, str], bar: Any, before: int) -> tuple[Report, InputError | None]:
    """The report of one file, scanned on its own, and the input error that cut it short (if one);
    ``before``: the findings of the files before it (for the progress display)."""
    from oomdoctor.inputs import InputError, read_blocks, rereader
    from oomdoctor.prefilter.pool import Precomputed
    from oomdoctor.scanner import Scanner

    scanner = Scanner(pack, source=path, hints=hints)  # type: ignore[arg-type]
    ahead = Precomputed(scanner.prefilter)  # big plain files: candidates found by workers
    scanner.use_prefilter(ahead)

    def pass_quiet(size: int, newlines: int, head: bytes, tail: bytes) -> bool:
        """A stretch the workers found quiet: passed over unread where the scanner can."""
        if not scanner.pass_quiet(size, newlines, head, tail):
            return False
        bar.advance(size, before + scanner.findings_so_far())
        return True

    ahead.pass_quiet_to(pass_quiet, scanner.periodic_presence)
    scanner.rereadable(rereader(path))
    input_error: InputError | None = None
    try:
        first = True
        for block in read_blocks(path, ahead=ahead, warn=warn):
            if first and looks_binary(block):
                warn(_("{path} looks binary (NUL bytes); reading it as text anyway").format(path=path))
            first = False
            scanner.feed(block)
            bar.advance(len(block), before + scanner.findings_so_far())
    except InputError as exc:
        input_error = exc
    return scanner.close(), input_error


def warm_imports() -> None:
    """Import what the first live finding needs (run in the analyser thread, off the passthrough)."""
    import oomdoctor.advisor.ranking
    import oomdoctor.render.text  # noqa: F401


def _pipe_mode(
    pack: RulePack | None, hints: dict[str, str], fmt: str, output: str | None, quiet: bool, fail_on: str,
    plain: bool = False,
) -> int:
    """``pack`` None: the built-in pack, loaded by the analyser thread while input passes through."""
    from oomdoctor.cli.pipe import run_pipe, say, signal_grace

    def scanner() -> Scanner:
        from oomdoctor.scanner import Scanner

        return Scanner(pack, source="<stdin>", hints=hints)

    # nothing passed through (-q): the report is the output, on stdout like any filter's
    live = LiveFindings(fmt in LIVE_FORMATS and not output, stream=sys.stdout if quiet else None, plain=plain, fmt=fmt)
    try:
        in_fd = sys.stdin.fileno()
        out_fd = None if quiet else sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return fail(_("stdin/stdout is not a file descriptor"))
    try:
        signal_grace()  # refused before a byte is read, not at Ctrl-C
    except ValueError as exc:
        return fail(str(exc))
    result = run_pipe(scanner, live, in_fd=in_fd, out_fd=out_fd, warmup=warm_imports)
    report = result.report
    # output closed or failing: the input after it was never read, so only a finding is known
    cut = result.downstream_closed or result.output_error is not None
    found = report is not None and exit_code(report, fail_on) != 0
    if report is not None and (found or not cut):
        live.summary(report, fmt, output, quiet=result.downstream_closed, partial=result.skipped_bytes > 0)
    if result.downstream_closed:
        _quiet_broken_pipe()
    if result.signal is not None:
        return 128 + int(result.signal)
    if cut and found:
        return 1
    if cut and result.analysis_error is None:
        say("oomdoctor: " + _("output closed; analysis incomplete"))
        return 2
    if result.analysis_error or result.output_error or report is None:
        return 2
    return exit_code(report, fail_on)


def _quiet_broken_pipe() -> None:
    # Python's documented way to avoid a second BrokenPipeError at interpreter exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
