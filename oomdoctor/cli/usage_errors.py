"""click's and typer's usage errors (``No such option: --bogus``) in the language in force.

The click that typer vendors (typer 0.22 on) writes its messages as f-strings, not through
gettext, so there is no click domain to install: the one mechanism is to translate the message
where :func:`oomdoctor.cli._invoke` catches the exception. :data:`TEMPLATES` lists the forms the
message takes, each an English msgid of our own catalog whose ``{name}`` placeholders stand for
what click fills in; :func:`translate` matches the message against them in order (the longer form
first), translates the parts that are themselves messages (the reason after ``Invalid value for
'--port':``) and formats the Japanese. A message no template matches stays English;
``tests/test_i18n_usage_errors.py`` reads the vendored click's source and fails when it can print
a form that is not here.
"""

from __future__ import annotations

import re
from functools import cache

from oomdoctor.i18n import N_, _, current_lang

#: the forms of click's, typer's and pydantic's usage-error texts, most specific first
TEMPLATES: tuple[str, ...] = (
    N_("No such option: {name} (Possible options: {options})"),
    N_("No such option: {name}"),
    N_("No such command {name}."),
    N_("Missing command."),
    N_("Got unexpected extra argument(s) ({args})"),
    N_("Option {name} requires an argument."),
    N_("Option {name} requires {count} arguments."),
    N_("Option {name} does not take a value."),
    N_("Argument {name} takes {count} values."),
    N_("Missing argument {hint}. {detail}"),
    N_("Missing option {hint}. {detail}"),
    N_("Missing parameter {hint}. {detail}"),
    N_("Missing argument {hint}."),
    N_("Missing option {hint}."),
    N_("Missing parameter {hint}."),
    N_("Invalid value for {hint}: {reason}"),
    N_("Invalid value: {reason}"),
    N_("Value {value} is not a valid {type}."),
    N_("Value must be an iterable."),
    N_("Input should be a valid integer, unable to parse string as an integer"),
    N_("Input should be a valid integer, got a number with a fractional part"),
    N_("Input should be a valid number, unable to parse string as a number"),
    N_("Input should be a valid boolean, unable to interpret input"),
    N_("Input should be {expected}"),
)

#: placeholders whose value is itself a message to translate
_NESTED = ("reason", "detail")


def translate(message: str) -> str:
    """``message`` (a usage error as click formats it) in the language in force; unchanged in
    English, and when it has no template."""
    if current_lang() == "en":
        return message
    return _translate(message)


def _translate(message: str) -> str:
    for template, pattern in _patterns():
        match = pattern.fullmatch(message)
        if match:
            values = {
                key: _translate(value) if key in _NESTED else value for key, value in match.groupdict().items()
            }
            return _(template).format(**values)
    return message


@cache
def _patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((template, pattern_of(template)) for template in TEMPLATES)


def pattern_of(template: str) -> re.Pattern[str]:
    """The regular expression of the English texts a template stands for (a placeholder matches
    any text, as little as it can)."""
    parts = re.split(r"\{(\w+)\}", template)
    regex = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>.+?)" for i, part in enumerate(parts))
    return re.compile(regex, re.DOTALL)
