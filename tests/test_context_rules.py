"""Every context rule's examples, through the production scanner: the Context values they set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import regex

from oomdoctor.report import Context
from oomdoctor.rulepack import default_pack
from oomdoctor.scanner import Scanner

PACK = default_pack()
CASES = [
    pytest.param(ctx.rule.id, i, ex, id=f"{ctx.rule.id}[{i}]")
    for ctx in PACK.contexts
    for i, ex in enumerate(ctx.rule.match)
]


def _context(log: str) -> Context:
    scanner = Scanner(PACK, source="<example>", advise=False)
    scanner.feed(log.encode("utf-8") + b"\n")
    return scanner.close().context


@pytest.mark.parametrize(("rule_id", "index", "example"), CASES)
def test_context_example(rule_id: str, index: int, example: dict[str, Any]) -> None:
    ctx = _context(example["log"])
    problems = []
    for key, want in example.get("values", {}).items():
        if key == "launch_args":
            got: Any = {k: ctx.launch_args.get(k) for k in want}
        elif key in Context.model_fields:
            got = getattr(ctx, key)
        else:
            got = ctx.extra.get(key)
        if got != want:
            problems.append(f"{key}: expected {want!r}, got {got!r}")
    for key in example.get("absent", []):
        if getattr(ctx, key):
            problems.append(f"{key}: expected nothing, got {getattr(ctx, key)!r}")
    assert not problems, "; ".join(problems)


def test_every_vllm_context_rule_has_an_example() -> None:
    missing = [c.rule.id for c in PACK.contexts if c.rule.engine == "vllm" and not c.rule.match]
    assert not missing


def _alone_is_a_failure(log: str) -> bool:
    scanner = Scanner(PACK, source="<example>", advise=False)
    scanner.feed(log.encode("utf-8") + b"\n")
    return any(f.severity == "error" for f in scanner.close().findings)


def test_context_rules_set_no_error() -> None:
    """Context lines of a healthy start are never findings of severity error.

    Some examples are failure lines on purpose: the product a failure message names (products.toml),
    vLLM's ValueErrors, the XLA failure whose file names jaxlib's client. Those are left out (each
    scanned alone is an error); everything else, concatenated, must raise none. Before, the failure
    examples were in the concatenation and passed only because later lines happened to read as the
    program going on (a recovered failure)."""
    examples = [(c.rule.id, ex["log"], _alone_is_a_failure(ex["log"])) for c in PACK.contexts for ex in c.rule.match]
    failures = {rid for rid, _, failing in examples if failing}
    # the products read from failure messages, V1's free-memory ValueError, jaxlib's first client's failure
    assert failures and all(
        rid.startswith("product.") or rid in ("vllm.v1-startup-memory", "jax.local-client") for rid in failures
    ), failures
    logs = "\n".join(log for _, log, failing in examples if not failing)
    scanner = Scanner(PACK, source="<healthy>", advise=False)
    scanner.feed(logs.encode("utf-8") + b"\n")
    report = scanner.close()
    assert [f.rule for f in report.findings if f.severity == "error"] == []


NO_MATCH = [
    pytest.param(ctx.rule.id, line, id=f"{ctx.rule.id}-no[{i}]")
    for ctx in PACK.contexts
    for i, line in enumerate(ctx.rule.no_match)
]


@pytest.mark.parametrize(("rule_id", "line"), NO_MATCH)
def test_context_no_match(rule_id: str, line: str) -> None:
    """A near miss sets none of the values the rule's pattern names."""
    rule = next(c for c in PACK.contexts if c.rule.id == rule_id)
    ctx = _context(line)
    names = [n for n in regex.compile(rule.rule.pattern).groupindex if n != "args"]
    if rule.rule.product and not names:
        # a rule that only names a product: the line does not match, and names no such product
        # (a vote that needs an engine the line lacks would pass the second check alone)
        assert not regex.compile(rule.rule.pattern).search(line), line
        assert ctx.product != rule.rule.product, ctx.product
        return
    assert names
    set_ = {n: ctx.extra.get(n, getattr(ctx, n, None)) for n in names if n not in ("extra", "launch_args")}
    assert not any(v is not None for v in set_.values()), set_


@pytest.mark.parametrize(("pattern", "why"), [
    ("args=(?P<args>.*)", "group 'args' depends on the lines before"),
    (r"vLLM version (?P<engine_version>\S+)", "group 'engine_version'"),
])
def test_a_periodic_context_rules_groups_may_only_set_values(tmp_path: Path, pattern: str, why: str) -> None:
    from oomdoctor.rulepack import RulePackError, load_pack

    rule = f'[[context]]\nid = "mine.batch"\nperiodic = true\ntriggers = ["batch"]\npattern = {pattern!r}\n'
    (tmp_path / "mine.toml").write_text(rule.replace("pattern = '", "pattern = '''").replace("'\n", "'''\n"), "utf-8")
    with pytest.raises(RulePackError, match=rf'mine\.toml: context "mine\.batch": periodic: .*{why}'):
        load_pack([tmp_path])
