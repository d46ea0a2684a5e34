"""The advisor: turns findings + context into ranked remedies with concrete values.

Each remedy id named by a rule maps to a calculator (``registry.remedy``) that returns a
:class:`~oomdoctor.report.Remedy` or ``None`` when its inputs are missing or it cannot help.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from oomdoctor.advisor.registry import AdviceInput, calculator
from oomdoctor.report import Context, Finding, Remedy, Report


def _rank_key(r: Remedy) -> tuple[int, int]:
    fits_order = {True: 0, None: 1, False: 2}[r.fits]
    return (fits_order, r.rank)


def remedies_for(finding: Finding, context: Context, hints: Mapping[str, str] | None = None) -> list[Remedy]:
    """Compute, rank and number the remedies of one finding."""
    from oomdoctor.rulepack import default_pack

    try:
        rule = default_pack().rule(finding.rule)
        ids = list(rule.rule.remedies)
    except KeyError:
        ids = []
    inp = AdviceInput(finding, context, dict(hints or {}))
    out: list[Remedy] = []
    seen_flags: set[tuple[tuple[str, str], ...]] = set()
    for order, rid in enumerate(ids):
        rem = calculator(rid)(inp)
        if rem is None:
            continue
        key = tuple(sorted({**rem.flags, **rem.env, **rem.settings}.items()))
        if key and key in seen_flags:
            continue
        seen_flags.add(key)
        rem.id = rid
        rem.rank = order
        out.append(rem)
    out.sort(key=_rank_key)
    for i, rem in enumerate(out, 1):
        rem.rank = i
    return out


def advise_findings(
    findings: Iterable[Finding], context: Context, hints: Mapping[str, str] | None = None
) -> None:
    """Fill ``remedies`` of each finding in place."""
    for f in findings:
        f.remedies = remedies_for(f, context, hints)


def advise(report: Report, hints: Mapping[str, str] | None = None) -> Report:
    """Fill the remedies of every finding of ``report`` (in place) and return it."""
    advise_findings(report.findings, report.context, hints)
    return report
