"""oomdoctor: find GPU out-of-memory failures in logs and say exactly what to change.

Public API::

    import oomdoctor
    report = oomdoctor.diagnose(open("server.log").read())
    for finding in report.findings:
        print(finding.kind, finding.figures, finding.remedies[0].flags)

Each log is its own run: diagnose logs one by one, and join their reports with
``oomdoctor.combine_reports([...])`` (one context per source in ``report.contexts``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from oomdoctor.api import diagnose
    from oomdoctor.report import Context, Finding, Remedy, Report, SourceContext, combine_reports
    from oomdoctor.scanner import Scanner

__all__ = ["Context", "Finding", "Remedy", "Report", "Scanner", "SourceContext", "__version__", "combine_reports", "diagnose"]

#: where each public name lives; imported on first use, so that ``oomdoctor.cli`` can start
#: pipe mode's passthrough before pydantic and the rule pack are loaded
_LAZY = {
    "diagnose": "oomdoctor.api",
    "Context": "oomdoctor.report",
    "Finding": "oomdoctor.report",
    "Remedy": "oomdoctor.report",
    "Report": "oomdoctor.report",
    "Scanner": "oomdoctor.scanner",
    "SourceContext": "oomdoctor.report",
    "combine_reports": "oomdoctor.report",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'oomdoctor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
