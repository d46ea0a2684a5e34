"""One-line errors on stderr, exit code 2."""

from __future__ import annotations

import os
import sys


def fail(message: str, code: int = 2) -> int:
    """Print ``oomdoctor: error: MESSAGE`` on one line and return ``code``."""
    line = " ".join(str(message).split())
    try:
        sys.stderr.write(f"oomdoctor: error: {line}\n")
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass
    return code


def color_for(stream: object) -> bool:
    """Colour when the target stream is a TTY, unless NO_COLOR; FORCE_COLOR forces it."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):
        return False


def warn(message: str) -> None:
    """Print ``oomdoctor: warning: MESSAGE`` on one line of stderr."""
    line = " ".join(str(message).split())
    try:
        sys.stderr.write(f"oomdoctor: warning: {line}\n")
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass
