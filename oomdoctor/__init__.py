"""oomdoctor: find GPU out-of-memory failures in logs and say exactly what to change.

Public API::

    import oomdoctor
    report = oomdoctor.diagnose(open("server.log").read())
    for finding in report.findings:
        print(finding.kind, finding.figures, finding.remedies[0].flags)
"""

__version__ = "0.1.0"

from oomdoctor.api import diagnose
from oomdoctor.report import Context, Finding, Remedy, Report
from oomdoctor.scanner import Scanner

__all__ = ["Context", "Finding", "Remedy", "Report", "Scanner", "__version__", "diagnose"]
