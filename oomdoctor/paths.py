"""Where the shipped rule pack lives. The rule loader, the advisor's tables and the prefilter all read
files from it; it sits below all three, so none imports another for the path."""

from __future__ import annotations

from pathlib import Path


def builtin_rules_dir() -> Path:
    """The shipped pack: ``oomdoctor/rules`` in a wheel, else the checkout's ``rules/``."""
    here = Path(__file__).resolve().parent
    packaged = here / "rules"
    if packaged.is_dir():
        return packaged
    return here.parent / "rules"
