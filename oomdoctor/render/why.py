"""The "Why:" line every human-readable renderer prints before the remedies."""

from __future__ import annotations

from oomdoctor.i18n import _
from oomdoctor.report import Finding


def why_line(f: Finding) -> str | None:
    """``Why: <the cause in words, with its numbers>`` (None when the finding has no cause to tell)."""
    if f.cause is None or (f.cause.id == "unknown" and not f.remedies):
        return None
    return labelled_text(why_label(), f.cause.summary)


def labelled_text(label: str, text: str) -> str:
    """``Why: text``; after a full-width colon (Japanese) no space: ``原因：text``."""
    return f"{label}{'' if label.endswith('：') else ' '}{text}"


def why_label() -> str:
    """``Why:`` in the language in force."""
    return _("Why:")
