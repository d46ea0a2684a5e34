"""Redact secrets from text the service echoes back (matched log lines, launch args, commands).

Pasted server logs routinely carry Hugging Face tokens, OpenAI-style keys, bearer tokens and AWS
credentials (``HUGGING_FACE_HUB_TOKEN=hf_...`` in an env dump, ``--api-key sk-...`` in argv).
Everything the service returns about a log goes through :func:`redact_report` first.
"""

from __future__ import annotations

import re
from typing import Any

from oomdoctor.report import Report

MASK = "[REDACTED]"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # key=value / key: value where the key names a secret (keep the key, drop the value)
    (
        re.compile(
            r"(?i)(?P<keep>\b[\w.-]*?(?:token|secret|password|passwd|api[_-]?key|access[_-]?key|private[_-]?key)"
            r"['\"]?\s*[:=]\s*['\"]?)(?!(?:None|null|true|false)\b)(?P<secret>[^\s'\",}]{4,})"
        ),
        r"\g<keep>" + MASK,
    ),
    # command-line flags naming a secret: --api-key X, --hf-token X, --token X
    (
        re.compile(r"(?i)(?P<keep>--(?:[\w-]*-)?(?:token|secret|password|api-key|apikey)[ =]['\"]?)(?P<secret>[^\s'\"]{4,})"),
        r"\g<keep>" + MASK,
    ),
    # Authorization headers and bearer tokens
    (re.compile(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\g<keep>" + MASK),
    (re.compile(r"(?i)(?P<keep>\bauthorization\s*[:=]\s*(?:token|basic)\s+)\S{4,}"), r"\g<keep>" + MASK),
    # Hugging Face tokens
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), "hf_" + MASK),
    # OpenAI / Anthropic style keys (sk-..., sk-proj-..., sk-ant-...)
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK),
    # AWS access key ids and secret keys
    (re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{16}\b"), "AKIA" + MASK),
    (re.compile(r"(?i)(?P<keep>aws.{0,20}?['\"]?\s*[:=]\s*['\"]?)[A-Za-z0-9/+=]{40}\b"), r"\g<keep>" + MASK),
    # Slack, GitHub, GitLab tokens
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "xox-" + MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), "gh_" + MASK),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), "glpat-" + MASK),
    # credentials in URLs: scheme://user:password@host
    (re.compile(r"(?P<keep>\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+(?=@)"), r"\g<keep>" + MASK),
]


def redact(text: str) -> str:
    """Replace every secret-looking substring of ``text`` with ``[REDACTED]`` (keeping its key/prefix)."""
    if not text:
        return text
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_walk(v) for v in value]
    if isinstance(value, dict):
        return {(redact(k) if isinstance(k, str) else k): _walk(v) for k, v in value.items()}
    return value


def redact_report(report: Report) -> Report:
    """A copy of ``report`` with every string (messages, context, commands, remedies) redacted."""
    return Report.model_validate(_walk(report.model_dump(mode="json")))
