"""The advisor: turns findings + context into ranked remedies with concrete values.

It works as an expert does, in three steps: the *account* of the failing device
(:mod:`~oomdoctor.advisor.account`), the *cause* it shows (:mod:`~oomdoctor.advisor.cause`), and the
*prescription*: the remedies the cause calls for in this engine and phase
(``rules/advice/causes.toml``, :mod:`~oomdoctor.advisor.prescription`), then the rule's own list,
less the remedies the cause withholds and any flag the detected version lacks
(:func:`~oomdoctor.advisor.versions.flag_exists`, the one version gate, which the command
checker uses too).

Each remedy id named by a rule maps to a calculator (``registry.remedy``) that returns a
:class:`~oomdoctor.report.Remedy` or ``None`` when its inputs are missing or it cannot help.

Ranking: remedies that fit alone first; among those, surer ones first, then the cheapest
trade-off (``cost`` in ``rules/advice/remedies.toml``). When none fits alone, the smallest set of compatible remedies
whose savings cover the shortage is offered as one combined remedy, first. Remedies that cannot
help (``fits`` False) go last with the reason in ``why``. The top remedy gets the corrected
command when the launch command is known.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oomdoctor.advisor.ranking import (
        advise,
        advise_findings,
        diagnose_finding,
        prescription_ids,
        rank_remedies,
        remedies_for,
    )

__all__ = ["advise", "advise_findings", "diagnose_finding", "prescription_ids", "rank_remedies", "remedies_for"]


def __getattr__(name: str) -> Any:
    """The entry points, from :mod:`oomdoctor.advisor.ranking` on first use: importing the package
    (for :mod:`~oomdoctor.advisor.registry`, which the rule loader asks for remedy ids) does not
    import the account, cause and prescription modules, which a log without findings never needs."""
    if name in __all__:
        from oomdoctor.advisor import ranking

        value = getattr(ranking, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
