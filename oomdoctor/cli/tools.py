"""Subcommands: ``rules list|show|test``, ``run``, ``fit``, ``serve``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from oomdoctor import cache
from oomdoctor.cli import complete
from oomdoctor.cli.errors import fail
from oomdoctor.i18n import N_, _, current_lang, use_lang
from oomdoctor.rulepack import RulePackError, load_pack

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
rules_app = typer.Typer(help=N_("Inspect and test rule packs."), no_args_is_help=True)
app.add_typer(rules_app, name="rules")


def _lang() -> str:
    """The language of these subcommands: the one :func:`oomdoctor.cli.main` set from a leading
    ``--lang``, else from the environment."""
    return current_lang()


def _pack(dirs: list[str] | None, builtin: bool = True):
    return load_pack([Path(d) for d in (dirs or [])], include_builtin=builtin)


_FORMAT_HELP = N_("text or json.")
_FORMATS = complete.choices("text", "json")


def _check_format(fmt: str) -> int | None:
    if fmt in ("text", "json"):
        return None
    with use_lang(_lang()):
        return fail(_("unknown --format {value} (choose {choices})").format(value=repr(fmt), choices="text, json"))


@rules_app.command("list", help=N_("List every rule: id, kind, engine, title."))
def rules_list(
    rules: Annotated[list[str] | None, typer.Option("--rules", help=N_("Extra rule directory (repeatable)."), metavar="DIR")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help=_FORMAT_HELP, metavar="FORMAT", autocompletion=_FORMATS)] = "text",
    as_json: Annotated[bool, typer.Option("--json", help=N_("JSON output."), hidden=True)] = False,
) -> int:
    if as_json:
        fmt = "json"
    if (bad := _check_format(fmt)) is not None:
        return bad
    try:
        pack = _pack(rules)
    except RulePackError as exc:
        return fail(str(exc))
    if fmt == "json":
        rows = [
            {"id": r.id, "kind": r.rule.kind, "engine": r.rule.engine, "severity": r.rule.severity,
             "title": r.rule.title, "source": r.source}
            for r in pack.rules
        ]
        print(json.dumps(rows, indent=2))
        return 0
    with use_lang(_lang()) as lang:
        head = (_("ID"), _("KIND"), _("ENGINE"), _("TITLE"))
        table = [(r.id, r.rule.kind, r.rule.engine, r.rule.title_in(lang)) for r in pack.rules]
        print("\n".join(_table([head, *table], cut=sys.stdout.isatty())))
        print(_("{rules} rules, {contexts} context rules, {phases} phase rules").format(
            rules=len(pack.rules), contexts=len(pack.contexts), phases=len(pack.phases)))
    return 0


def _table(rows: list[tuple[str, ...]], cut: bool) -> list[str]:
    """Columns padded to their widest cell (in terminal cells); on a terminal, the last column is
    cut to the terminal's width (a pipe gets every row whole, for grep)."""
    from oomdoctor.render.text import cell_len, pad_cells, terminal_width

    widths = [max(cell_len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    room = terminal_width() - sum(w + 2 for w in widths)
    for r in rows:
        last = r[-1]
        if cut and room > 10 and cell_len(last) > room:
            while cell_len(last) > room - 1:
                last = last[:-1]
            last = last.rstrip() + "…"
        lines.append("  ".join(pad_cells(c, w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + last)
    return lines


@rules_app.command(
    "show",
    help=N_("Show the rule RULE_ID as written in its TOML file (see 'oomdoctor rules list')."),
    short_help=N_("Show a rule as written in its TOML file."),
)
def rules_show(
    rule_id: Annotated[str, typer.Argument(metavar="RULE_ID", hidden=True, autocompletion=complete.rule_ids)],
    rules: Annotated[list[str] | None, typer.Option("--rules", help=N_("Extra rule directory (repeatable)."), metavar="DIR")] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help=_FORMAT_HELP, metavar="FORMAT", autocompletion=_FORMATS)] = "text",
) -> int:
    if (bad := _check_format(fmt)) is not None:
        return bad
    try:
        pack = _pack(rules)
        rule = pack.rule(rule_id)
    except RulePackError as exc:
        return fail(str(exc))
    except KeyError:
        with use_lang(_lang()):
            return fail(_("no rule with id {rule_id} (see 'oomdoctor rules list')").format(rule_id=repr(rule_id)))
    data = rule.rule.model_dump(exclude_defaults=True)
    block = None if fmt == "json" else rule_block(rule.source, rule_id)
    if block is None:  # -f json, or a rule whose TOML cannot be read back: the rule as loaded, in JSON
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    first, text = block
    print(f"# {rule.source}, line {first}")
    print(text)
    return 0


def rule_block(source: str, rule_id: str) -> tuple[int, str] | None:
    """The ``[[rule]]`` table of ``rule_id`` in the TOML file ``source`` as written (with its
    ``[[rule.match]]`` examples), and its first line's number; None when it cannot be found."""
    import re

    try:
        lines = Path(source).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    starts = [i for i, line in enumerate(lines) if line.strip() == "[[rule]]"]
    wanted = re.compile(r"^id\s*=\s*[\"']" + re.escape(rule_id) + r"[\"']\s*(#.*)?$")
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        in_string = False  # inside a multi-line string ('\'\'\'' or \"\"\"), where a line may start with "["
        for j in range(start + 1, end):  # a top-level table ends the rule's tables
            head = lines[j].strip()
            if not in_string and head.startswith("[") and not head.startswith(("[[rule.", "[rule.")):
                end = j
                break
            if (lines[j].count("\'\'\'") + lines[j].count('\"\"\"')) % 2:
                in_string = not in_string
        body = lines[start:end]
        if any(wanted.match(line.strip()) for line in body):
            while body and (not body[-1].strip() or body[-1].lstrip().startswith("#")):
                body.pop()  # blank lines and the next rule's leading comments
            text = "\n".join(body)
            try:  # what is printed is the rule, whole: else the caller prints the rule as loaded
                parsed = cache.toml_module().loads(text)
            except ValueError:
                return None
            return (start + 1, text) if parsed.get("rule", [{}])[0].get("id") == rule_id else None
    return None


@rules_app.command(
    "test",
    help=N_("Run every example of the built-in pack, or of DIR (with the built-in pack)."),
    short_help=N_("Run the rules' examples (built-in, or DIR's)."),
)
def rules_test(
    directory: Annotated[str | None, typer.Argument(metavar="DIR", hidden=True)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=N_("List every example."))] = False,
) -> int:
    from oomdoctor.rulepack.examples import check_rule

    try:
        pack = _pack([directory] if directory else None)
    except RulePackError as exc:
        return fail(str(exc))
    target = str(Path(directory).resolve()) if directory else None
    passed = failed = 0
    for rule in pack.rules:
        if target and not str(Path(rule.source).resolve()).startswith(target):
            continue
        for res in check_rule(pack, rule):
            if res.ok:
                passed += 1
                if verbose:
                    print(f"ok    {res.name}")
            else:
                failed += 1
                print(f"FAIL  {res.name} ({rule.source}): {res.problem}")
    with use_lang(_lang()):
        print(_("{passed} passed, {failed} failed").format(passed=passed, failed=failed))
    return 1 if failed else 0


def _register_optional() -> None:
    """Commands that live in their own modules register themselves here."""
    import importlib

    for name in ("oomdoctor.cli.run_cmd", "oomdoctor.cli.fit_cmd", "oomdoctor.cli.serve_cmd"):
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        mod.register(app)


_register_optional()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
