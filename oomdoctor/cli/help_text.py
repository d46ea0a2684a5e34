"""``--help`` in the language in force.

The help texts of the commands and options are English literals marked with ``N_()`` where
typer declares them; :func:`localized` puts them, in the click command that typer builds for one
invocation, through gettext (:func:`oomdoctor.i18n._`). The words click and typer add themselves
("Usage:", the headings, "[default: …]", the help option's text) are translated by the help
formatter, which also wraps Japanese text by terminal cells (a wide character takes two).

:func:`oomdoctor.cli.main` sets the language (``--lang`` anywhere before ``--``, else the
environment) before any command is built, so ``oomdoctor --lang ja --help`` and
``LANG=ja_JP.UTF-8 oomdoctor --help`` print the same help.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

from oomdoctor.i18n import N_, _

#: the words click and typer write into a help page themselves (their own catalogs are not ours)
CLICK_WORDS: tuple[str, ...] = (
    N_("Usage: "),
    N_("Options"),
    N_("Arguments"),
    N_("Commands"),
    N_("Show this message and exit."),
    N_("Install completion for the current shell."),
    N_("Show completion for the current shell, to copy it or customize the installation."),
)

_EXTRAS = re.compile(r"(?s)(.*?)  \[([^\[\]]*)\]")


def localized(command: Any) -> Any:
    """``command`` (a click command built by typer) with the help texts of it, its options and
    its subcommands in the language in force; returns it. The command is changed in place: typer
    builds a fresh one for each invocation."""
    for cmd in walk(command):
        if cmd.help:
            cmd.help = _(cmd.help)
            if _has_wide(cmd.help) and not cmd.short_help:
                cmd.short_help = cmd.help.split("。", 1)[0] + "。"
        for param in cmd.params:
            if getattr(param, "help", None):
                param.help = _(param.help)
        cmd.context_class = _context_class(cmd.context_class)
    return command


def walk(command: Any) -> Iterator[Any]:
    """``command`` and every subcommand under it."""
    yield command
    for sub in (getattr(command, "commands", None) or {}).values():
        yield from walk(sub)


def translate_definition(text: str) -> str:
    """One definition of a help list (an option's or a command's help) in the language in force,
    with the ``[default: …]`` that click appends."""
    match = _EXTRAS.fullmatch(text)
    main, extras = (match.group(1), match.group(2)) if match else (text, None)
    main = _(main) if main else main
    if extras is None:
        return main
    return f"{main}  [{'; '.join(_extra(e) for e in extras.split('; '))}]"


def _extra(item: str) -> str:
    if item.startswith("default: "):
        return _("default: {default}").format(default=item[len("default: "):])
    return item


def _has_wide(text: str) -> bool:
    from oomdoctor.render.text import cell_len

    return cell_len(text) != len(text)


@cache
def _context_class(base: Any) -> type:
    """``base`` (click's Context) making help formatters of :func:`_formatter_class`."""
    if getattr(base, "_oomdoctor_localized", False):
        return base
    formatter = _formatter_class(base.formatter_class)
    return type("LocalizedContext", (base,), {"formatter_class": formatter, "_oomdoctor_localized": True})


@cache
def _formatter_class(base: Any) -> type:
    """``base`` (click's HelpFormatter) writing click's own words in the language in force and
    wrapping text with wide characters by terminal cells."""

    class LocalizedFormatter(base):
        def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
            super().write_usage(prog, args, _("Usage: ") if prefix is None else prefix)

        def write_heading(self, heading: str) -> None:
            text = _(heading)
            if _has_wide(text):  # a Japanese heading takes the full-width colon (CONTRIBUTING, "Japanese style")
                self.write(f"{'':>{self.current_indent}}{text}：\n")
            else:
                super().write_heading(text)

        def write_text(self, text: str) -> None:
            if not _has_wide(text):
                super().write_text(text)
                return
            indent = " " * self.current_indent
            paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]
            self.write("\n\n".join("\n".join(_wrap(p, self.width, indent, indent)) for p in paragraphs))
            self.write("\n")

        def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
            rows = [(first, translate_definition(second)) for first, second in rows]
            if not any(_has_wide(second) for _first, second in rows):
                super().write_dl(rows, col_max, col_spacing)
                return
            from oomdoctor.render.text import cell_len

            first_col = min(max(cell_len(first) for first, _second in rows), col_max) + col_spacing
            pad = " " * (first_col + self.current_indent)
            for first, second in rows:
                self.write(" " * self.current_indent + first)
                if not second:
                    self.write("\n")
                    continue
                if cell_len(first) <= first_col - col_spacing:
                    self.write(" " * (first_col - cell_len(first)))
                else:
                    self.write("\n" + pad)
                lines = _wrap(" ".join(second.split()), max(self.width - first_col - 2, 10), "", "")
                self.write(lines[0] + "\n")
                for line in lines[1:]:
                    self.write(pad + line + "\n")

    return LocalizedFormatter


def _wrap(text: str, width: int, indent: str, hang: str) -> list[str]:
    from oomdoctor.render.text import wrap_cells

    return wrap_cells(text, width, indent, hang) or [indent]
