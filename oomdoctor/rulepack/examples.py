"""Run the examples every rule carries, through the same pipeline as production."""

from __future__ import annotations

from dataclasses import dataclass

from oomdoctor.rulepack.loader import CompiledRule, RulePack


@dataclass
class ExampleResult:
    rule: str
    kind: str  # "match" or "no_match"
    index: int
    ok: bool
    problem: str = ""

    @property
    def name(self) -> str:
        return f"{self.rule}:{self.kind}[{self.index}]"


def _run(pack: RulePack, log: str):
    from oomdoctor.scanner import Scanner

    scanner = Scanner(pack, source="<example>")
    scanner.feed(log.encode("utf-8"))
    return scanner.close()


def check_rule(pack: RulePack, rule: CompiledRule) -> list[ExampleResult]:
    results: list[ExampleResult] = []
    for i, ex in enumerate(rule.rule.match):
        report = _run(pack, ex.log)
        problem = ""
        mine = [f for f in report.findings if f.rule == (ex.named_by or rule.id)]
        if not mine:
            winners = ", ".join(sorted({f.rule for f in report.findings})) or "nothing"
            problem = f"not matched by this rule (won by {winners})"
        else:
            f = mine[0]
            others = [g.rule for g in report.findings if g.rule not in (rule.id, f.rule) and g.location.line == f.location.line]
            if others:
                problem = f"also matched by {', '.join(others)}"
            elif ex.figures != f.figures:
                diffs = []
                for k in sorted(set(ex.figures) | set(f.figures)):
                    if ex.figures.get(k) != f.figures.get(k):
                        diffs.append(f"{k}: expected {ex.figures.get(k)!r}, got {f.figures.get(k)!r}")
                problem = "figures differ: " + "; ".join(diffs)
            elif ex.phase and f.phase != ex.phase:
                problem = f"phase: expected {ex.phase}, got {f.phase}"
            elif ex.remedies is not None:
                got = [r.id for r in f.remedies]
                if got[: len(ex.remedies)] != ex.remedies:
                    problem = f"remedies: expected {ex.remedies} first, got {got}"
            if not problem and ex.flags is not None:
                got_flags = f.remedies[0].flags if f.remedies else {}
                if got_flags != ex.flags:
                    problem = f"first remedy flags: expected {ex.flags}, got {got_flags}"
        results.append(ExampleResult(rule.id, "match", i, not problem, problem))
    for i, nx in enumerate(rule.rule.no_match):
        report = _run(pack, nx.log)
        hit = [f for f in report.findings if f.rule == rule.id]
        problem = f"matched: {hit[0].message[:120]!r}" if hit else ""
        results.append(ExampleResult(rule.id, "no_match", i, not problem, problem))
    return results


def check_pack(pack: RulePack) -> list[ExampleResult]:
    out: list[ExampleResult] = []
    for rule in pack.rules:
        out.extend(check_rule(pack, rule))
    return out
