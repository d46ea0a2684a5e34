"""Slack: request signing, replay protection and turning a slash command or message into a log.

Signature (Slack "Verifying requests from Slack"): ``X-Slack-Signature`` is ``"v0=" +
hex(HMAC-SHA256(signing_secret, "v0:{X-Slack-Request-Timestamp}:{raw body}"))``. It is checked on
the raw body before anything is parsed, with a constant-time compare, and a request older or
newer than the replay window (5 minutes) is refused. A signature already seen inside the window is
refused too (an attacker who captured one request cannot replay it within the window either).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import re
import threading
import time
from collections import OrderedDict

from oomdoctor.i18n import N_


class SignatureError(Exception):
    """The request is not from Slack (or is stale); the message is safe to return."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class ReplayCache:
    """Signatures seen in the last ``window`` seconds (bounded; per process)."""

    def __init__(self, window: int, max_entries: int = 100_000) -> None:
        self.window = window
        self.max_entries = max_entries
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def check_and_add(self, signature: str, now: float) -> bool:
        """True when ``signature`` is new (and remember it), False when it is a replay."""
        with self._lock:
            while self._seen:
                oldest, t = next(iter(self._seen.items()))
                if now - t > 2 * self.window or len(self._seen) >= self.max_entries:
                    self._seen.pop(oldest)
                else:
                    break
            if signature in self._seen:
                return False
            self._seen[signature] = now
            return True


def check_headers(headers: dict[str, str], *, window: int = 300, now: float | None = None) -> tuple[str, str]:
    """The timestamp and signature headers, when present and fresh (checked before the body is read)."""
    ts = headers.get("x-slack-request-timestamp")
    sig = headers.get("x-slack-signature")
    if not ts or not sig:
        raise SignatureError("missing X-Slack-Signature or X-Slack-Request-Timestamp header")
    try:
        ts_int = int(ts)
    except ValueError:
        raise SignatureError("X-Slack-Request-Timestamp is not a number") from None
    now = time.time() if now is None else now
    if abs(now - ts_int) > window:
        raise SignatureError("request timestamp outside the 5-minute window (replay or clock skew)")
    return ts, sig


def verify(
    secret: str,
    headers: dict[str, str],
    body: bytes,
    replay: ReplayCache,
    *,
    window: int = 300,
    now: float | None = None,
) -> None:
    """Raise :class:`SignatureError` unless the request is signed by ``secret`` and fresh."""
    ts, sig = check_headers(headers, window=window, now=now)
    now = time.time() if now is None else now
    expected = sign(secret, ts, body)
    if not hmac.compare_digest(expected.encode(), sig.encode("utf-8", "replace")):
        raise SignatureError("invalid Slack signature")
    if not replay.check_and_add(sig, now):
        raise SignatureError("replayed request (this signature was already used)")


_MENTION = re.compile(r"^\s*<@[A-Z0-9]+(?:\|[^>]*)?>\s*")
_LINK = re.compile(r"<((?:https?|mailto|tel):[^<>|]*)(?:\|([^<>]*))?>")  # stops at the next '<': linear
_FENCE = re.compile(r"^\s*```(?:[A-Za-z0-9_+-]*[ \t]*\n)?|\n?```\s*$")


def slack_text_to_log(text: str) -> str:
    """Undo Slack's message formatting so the log reads as it was printed.

    Slack escapes ``& < >`` as entities, wraps URLs as ``<url|label>``, prefixes app mentions
    with ``<@U123>`` and users paste logs inside triple-backtick fences.
    """
    text = _MENTION.sub("", text)
    text = _LINK.sub(lambda m: m.group(2) or m.group(1), text)
    text = _FENCE.sub("", text.strip())
    # only the three entities Slack uses (html.unescape would also touch things like "&copy")
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") if "&" in text else text


def event_log_text(event: dict[str, object]) -> str:
    """The log carried by a message event: its text plus the preview of any attached snippet."""
    parts: list[str] = []
    text = event.get("text")
    if isinstance(text, str) and text.strip():
        parts.append(slack_text_to_log(text))
    files = event.get("files")
    if isinstance(files, list):
        for f in files:
            if isinstance(f, dict):
                for key in ("plain_text", "preview"):
                    v = f.get(key)
                    if isinstance(v, str) and v.strip():
                        parts.append(html.unescape(v) if key == "preview" else v)
                        break
    return "\n".join(parts)


HELP = N_(
    "Paste a crashed server's log after the command, e.g. `/oomdoctor <log lines>` "
    "(the failure and the lines before it are enough). oomdoctor answers with the diagnosis and the exact flags to change."
)
