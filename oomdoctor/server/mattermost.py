"""Mattermost slash commands: token check and the Markdown answer.

Mattermost sends ``Authorization: Token <token>`` and the same token as the ``token`` form field;
either is accepted, compared in constant time. Posts are limited to 16383 characters.
"""

from __future__ import annotations

import hmac

MAX_POST = 16383


def token_ok(expected: str, authorization: str | None, form_token: str | None) -> bool:
    candidates: list[str] = []
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "token" and value.strip():
            candidates.append(value.strip())
    if form_token:
        candidates.append(form_token)
    ok = False
    for c in candidates:  # evaluate every candidate: no early exit on a match
        ok |= hmac.compare_digest(expected.encode(), c.encode("utf-8", "replace"))
    return ok


def answer(text: str, response_type: str) -> dict[str, str]:
    return {"response_type": response_type, "text": text}
