"""Every example of every rule, through the production pipeline, won by its own rule."""

from __future__ import annotations

import pytest

from oomdoctor.rulepack import default_pack
from oomdoctor.rulepack.examples import check_rule

PACK = default_pack()


@pytest.mark.parametrize("rule_id", [r.id for r in PACK.rules])
def test_rule_examples(rule_id: str) -> None:
    rule = PACK.rule(rule_id)
    failures = [f"{r.name}: {r.problem}" for r in check_rule(PACK, rule) if not r.ok]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("rule_id", [r.id for r in PACK.rules])
def test_rule_has_examples_and_references(rule_id: str) -> None:
    rule = PACK.rule(rule_id).rule
    assert rule.match, "a rule needs match examples"
    assert rule.no_match, "a rule needs no_match near misses"
    assert rule.references, "a rule cites the upstream source it was read from"


def test_every_builtin_regex_compiles() -> None:
    """The built-in pack compiles lazily (LazyPattern); this compiles every pattern once."""
    import regex

    from oomdoctor.rulepack.loader import LazyPattern

    patterns = []
    for r in PACK.rules:
        patterns += [r.pattern, *r.extract.values(), *r.extract_all.values()]
    for c in PACK.contexts:
        patterns.append(c.pattern)
    for p in PACK.phases:
        patterns += [*p.markers, *p.progress]
    assert patterns
    for pat in patterns:
        compiled = pat.compiled() if isinstance(pat, LazyPattern) else pat
        assert isinstance(compiled, regex.Pattern)
