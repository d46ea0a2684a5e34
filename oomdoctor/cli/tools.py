"""Subcommands: ``rules list|show|test``, ``run``, ``fit``, ``serve``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

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


@rules_app.command("list", help=N_("List every rule: id, kind, engine, title."))
def rules_list(
    rules: Annotated[list[str] | None, typer.Option("--rules", help=N_("Extra rule directory (repeatable)."), metavar="DIR")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=N_("JSON output."))] = False,
) -> int:
    try:
        pack = _pack(rules)
    except RulePackError as exc:
        return fail(str(exc))
    if as_json:
        rows = [
            {"id": r.id, "kind": r.rule.kind, "engine": r.rule.engine, "severity": r.rule.severity,
             "title": r.rule.title, "source": r.source}
            for r in pack.rules
        ]
        print(json.dumps(rows, indent=2))
        return 0
    width = max((len(r.id) for r in pack.rules), default=10)
    kw = max((len(r.rule.kind) for r in pack.rules), default=10)
    with use_lang(_lang()) as lang:
        for r in pack.rules:
            print(f"{r.id:<{width}}  {r.rule.kind:<{kw}}  {r.rule.engine:<10}  {r.rule.title_in(lang)}")
        print(_("{rules} rules, {contexts} context rules, {phases} phase rules").format(
            rules=len(pack.rules), contexts=len(pack.contexts), phases=len(pack.phases)))
    return 0


@rules_app.command("show", help=N_("Show the rule RULE_ID in full (see 'oomdoctor rules list')."))
def rules_show(
    rule_id: Annotated[str, typer.Argument(metavar="RULE_ID", hidden=True)],
    rules: Annotated[list[str] | None, typer.Option("--rules", help=N_("Extra rule directory (repeatable)."), metavar="DIR")] = None,
) -> int:
    try:
        pack = _pack(rules)
        rule = pack.rule(rule_id)
    except RulePackError as exc:
        return fail(str(exc))
    except KeyError:
        with use_lang(_lang()):
            return fail(_("no rule with id {rule_id} (see 'oomdoctor rules list')").format(rule_id=repr(rule_id)))
    data = rule.rule.model_dump(exclude_defaults=True)
    print(f"# {rule.source}")
    print(json.dumps(data, indent=2, ensure_ascii=False))
    return 0


@rules_app.command("test", help=N_("Run every example of the built-in pack, or of DIR (with the built-in pack)."))
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
