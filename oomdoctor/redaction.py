"""Redact secrets from the text oomdoctor echoes back: matched log lines, launch args, commands.

Pasted server logs routinely carry Hugging Face tokens, OpenAI-style keys, bearer tokens, JWTs
and AWS credentials (``HUGGING_FACE_HUB_TOKEN=hf_...`` in an env dump, ``--api-key sk-...`` in
argv, ``postgres://user:password@host`` in a URL). Every report the CLI prints, the Python API
returns (unless ``diagnose(..., redact=False)``) and the server answers goes through
:func:`redact_report` once, before any renderer sees it, so no output format (text, json, jsonl,
markdown, slack) can echo one.

The patterns are data ported from maintained catalogs, each row citing its source: Yelp's
detect-secrets plugins (``detect_secrets/plugins/*.py``, 1.5.0) and gitleaks' default rule set
(``config/gitleaks.toml``, rule ids). They are ported rather than imported (no dependency) and
rewritten to the linear form below; ``SOURCES`` maps each pattern to its citation.

Linear time: every pattern starts at a fixed literal or at the start of a run of its characters
(a look-behind refuses starts inside the run), and its repetitions are possessive, so no input
makes a pattern rescan text it has already passed; a test times 1 MiB adversarial inputs against
one plain read of the same text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import regex
from pydantic import BaseModel

from oomdoctor import regex_cache

MASK = "[REDACTED]"

#: words that make a key (``HF_TOKEN=``, ``"api_key":``) or a flag (``--api-key``) name a secret
#: (detect-secrets KeywordDetector's DENYLIST, narrowed: ``pwd`` only after ``_``/``-`` as in
#: ``MYSQL_PWD``, since the shell's ``PWD``/``OLDPWD`` hold the working directory)
_WORDS = (
    r"(?:token|secret|password|passwd|passphrase|(?<=[_-])pwd|api[_-]?key|access[_-]?key|secret[_-]?key"
    r"|private[_-]?key|auth[_-]?key|client[_-]?key|db[_-]?pass)"
)

#: values that say a secret is absent rather than carry one
_ABSENT = frozenset({"", "none", "null", "true", "false", "nil", "<none>", "***", MASK.lower()})

Repl = str | Callable[["regex.Match[str]"], str]


def _url_credentials(m: regex.Match[str]) -> str:
    """``scheme://user:password@host``: the password runs to the last '@' before the host's path
    (a password may hold '@' or '/'); no '@' at all, or only digits before it: a host and port."""
    keep, rest = m.group("keep"), m.group("rest")
    first = rest.find("@")
    if first < 0:
        return m.group(0)
    end = rest.find("/", first)
    at = rest.rfind("@", 0, len(rest) if end < 0 else end)
    password = rest[:at]
    if at <= 0 or password.isdigit() or ("/" in password and password.split("/", 1)[0].isdigit()):
        return m.group(0)
    return keep + MASK + rest[at:]


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character (detect-secrets' ``calculate_shannon_entropy``)."""
    import math
    from collections import Counter

    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def _bare_aws_secret(m: regex.Match[str]) -> str:
    """A 40-character base64 run: an AWS secret access key when it mixes cases and digits and is as
    random as one (detect-secrets' Base64HighEntropyString test, limit 4.5 bits per character would
    miss short keys; 4.0 on exactly 40 characters), never a hex digest (no upper case)."""
    v = m.group(0)
    mixed = any(c.islower() for c in v) and any(c.isupper() for c in v) and any(c.isdigit() for c in v)
    return MASK if mixed and _entropy(v) >= 4.0 else v


#: a PEM private key block: the BEGIN line, its base64 body (real newlines or ``\n`` escapes, as
#: in a JSON string) and its END line when present
_PEM = (  # (the label's repetition is bounded, so its backtracking is too)
    r"(?P<keep>-----BEGIN[ A-Z0-9_]{0,40}PRIVATE KEY(?: BLOCK)?-----)"
    r"(?:[A-Za-z0-9+/=\s]|\\[nr])++(?:-----END[ A-Z0-9_]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"
)


_PATTERNS: list[tuple[str, regex.Pattern[str], Repl]] = [
    # before key-value, which would take only the first word of the body or the phrase
    ("private-key", regex_cache.compile(_PEM), r"\g<keep>" + MASK),
    (
        # a quoted value with spaces: password="correct horse battery staple" (keep key and quotes)
        "key-value-quoted",
        regex_cache.compile(
            r"(?i)(?P<keep>" + _WORDS + r"['\"]?+\s*+[:=]\s*+(?P<q>['\"]))"
            r"(?!(?:None|null|true|false)(?P=q))(?=[^'\"\n]*+(?P=q))[^'\"\n]{4,}+"
        ),
        r"\g<keep>" + MASK,
    ),
    (
        # key=value / key: value / "key": "value" where the key names a secret (keep the key)
        "key-value",
        regex_cache.compile(
            r"(?i)(?P<keep>" + _WORDS + r"['\"]?\s*+[:=]\s*+['\"]?)"
            r"(?!(?:None|null|true|false)\b|[\d.]++(?:[\s'\",}]|$))[^\s'\",}]{4,}+"
        ),
        r"\g<keep>" + MASK,
    ),
    (
        # command-line flags naming a secret: --api-key X, --hf-token=X, --token 'X'
        "flag",
        regex_cache.compile(
            r"(?i)(?<![\w-])(?P<keep>--[\w-]*+(?<=[-_]" + _WORDS + r")(?:\s*+=\s*+|\s++)['\"]?)"
            r"(?!-)[^\s'\"]{4,}+"
        ),
        r"\g<keep>" + MASK,
    ),
    ("bearer", regex_cache.compile(r"(?i)(?P<keep>\bbearer\s++)[A-Za-z0-9._~+/=-]{8,}+"), r"\g<keep>" + MASK),
    (
        "authorization",
        regex_cache.compile(r"(?i)(?P<keep>\bauthorization\s*+[:=]\s*+(?:token|basic)\s++)\S{4,}+"),
        r"\g<keep>" + MASK,
    ),
    ("jwt", regex_cache.compile(r"(?<![\w-])eyJ[\w-]{8,}+\.eyJ[\w-]{8,}+\.[\w-]*+"), MASK),
    ("huggingface", regex_cache.compile(r"\bhf_[A-Za-z0-9]{16,}+"), "hf_" + MASK),
    ("openai", regex_cache.compile(r"\bsk-[A-Za-z0-9_-]{16,}+"), "sk-" + MASK),
    ("stripe", regex_cache.compile(r"\b(?P<keep>[rs]k_(?:live|test)_)[A-Za-z0-9]{16,}+"), r"\g<keep>" + MASK),
    ("aws-key-id", regex_cache.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|ABIA|ACCA)[A-Z0-9]{16}\b"), "AKIA" + MASK),
    (
        "aws-secret",
        regex_cache.compile(r"(?i)(?P<keep>\baws[\w.-]{0,30}+['\"]?\s*+[:=]\s*+['\"]?)[A-Za-z0-9/+=]{40}\b"),
        r"\g<keep>" + MASK,
    ),
    # a bare one, without a key that names it: a 40-character base64 run of a key's randomness
    ("aws-secret-bare", regex_cache.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), _bare_aws_secret),
    ("google", regex_cache.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), "AIza" + MASK),
    ("slack", regex_cache.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}+"), "xox-" + MASK),
    (
        "slack-webhook",
        regex_cache.compile(r"(?P<keep>hooks\.slack\.com/services/)[A-Za-z0-9]++/[A-Za-z0-9]++/[A-Za-z0-9]++"),
        r"\g<keep>" + MASK,
    ),
    ("github", regex_cache.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}+"), "gh_" + MASK),
    ("github-fine-grained", regex_cache.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}+"), "github_pat_" + MASK),
    ("gitlab", regex_cache.compile(r"\bglpat-[A-Za-z0-9_-]{20,}+"), "glpat-" + MASK),
    # credentials in URLs: scheme://user:password@host, the user possibly empty (redis://:pw@host);
    # starts at "://", so never inside a run
    (
        "url-credentials",
        regex_cache.compile(r"(?<=[A-Za-z0-9+.-])(?P<keep>://[^\s:/@]*+:)(?P<rest>[^\s'\"<>]++)"),
        _url_credentials,
    ),
]

#: where each pattern comes from: the detect-secrets plugin (``detect_secrets/plugins/``, 1.5.0)
#: and/or the gitleaks rule id (``config/gitleaks.toml``) it ports; "oomdoctor" for our own
SOURCES: dict[str, str] = {
    "private-key": "detect-secrets PrivateKeyDetector; gitleaks private-key",
    "key-value-quoted": "detect-secrets KeywordDetector (quoted-value forms); gitleaks generic-api-key",
    "key-value": "detect-secrets KeywordDetector; gitleaks generic-api-key",
    "flag": "detect-secrets KeywordDetector, as command-line flags (oomdoctor)",
    "bearer": "gitleaks generic-api-key (Authorization: Bearer); oomdoctor",
    "authorization": "detect-secrets BasicAuthDetector (header form); oomdoctor",
    "jwt": "detect-secrets JwtTokenDetector; gitleaks jwt",
    "huggingface": "gitleaks huggingface-access-token",
    "openai": "detect-secrets OpenAIDetector; gitleaks openai-api-key",
    "stripe": "detect-secrets StripeDetector; gitleaks stripe-access-token",
    "aws-key-id": "detect-secrets AWSKeyDetector; gitleaks aws-access-token",
    "aws-secret": "detect-secrets AWSKeyDetector (secret key by its variable name)",
    "aws-secret-bare": "detect-secrets Base64HighEntropyString, on AWS secret keys' 40 characters",
    "google": "gitleaks gcp-api-key",
    "slack": "detect-secrets SlackDetector; gitleaks slack-bot-token, slack-user-token",
    "slack-webhook": "detect-secrets SlackDetector; gitleaks slack-webhook-url",
    "github": "detect-secrets GitHubTokenDetector; gitleaks github-pat, github-oauth, github-app-token",
    "github-fine-grained": "gitleaks github-fine-grained-pat",
    "gitlab": "detect-secrets GitLabTokenDetector; gitleaks gitlab-pat",
    "url-credentials": "detect-secrets BasicAuthDetector",
}

#: the names of the patterns, in the order they apply (tests walk them)
PATTERN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _PATTERNS)

#: a dict key or an argv element that names a secret: ``api_key``, ``HF_TOKEN``, ``--api-key``
_SECRET_NAME = regex_cache.compile(r"(?i)(?:^|[-_.])(?<!per[-_.])" + _WORDS + r"$")
_SECRET_FLAG = regex_cache.compile(r"(?i)^--[\w-]*+(?<=[-_]" + _WORDS + r")$")


def redact(text: str) -> str:
    """Replace every secret-looking substring of ``text`` with ``[REDACTED]`` (keeping its key or prefix).

    Runs in time linear in ``len(text)``."""
    if not text:
        return text
    for _, pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


#: a secret flag's environment variable where the engine reads one (else the flag's name, upper case)
_FLAG_ENV = {("vllm", "--api-key"): "VLLM_API_KEY", ("", "--hf-token"): "HF_TOKEN"}
_ENV_ASSIGNMENT = regex_cache.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*+)=(?P<value>.*+)$")


def _env_for(flag: str, argv: list[str]) -> str:
    """``--api-key`` of ``vllm serve`` -> ``VLLM_API_KEY``; ``--hf-token`` -> ``HF_TOKEN``;
    another secret flag -> its name in upper case (``--api-key`` -> ``API_KEY``)."""
    name = flag.split("=", 1)[0]
    engine = "vllm" if any("vllm" in a for a in argv[:4]) else ""
    return _FLAG_ENV.get((engine, name)) or _FLAG_ENV.get(("", name)) or name.lstrip("-").replace("-", "_").upper()


def redact_command(text: str) -> str:
    """A shell command line (a remedy's corrected command) with each secret replaced by a reference
    to an environment variable, so that it still runs where that variable is set:
    ``vllm serve m --api-key sk-...`` -> ``vllm serve m --api-key "$VLLM_API_KEY"``,
    ``HF_TOKEN=hf_... cmd`` -> ``HF_TOKEN="$HF_TOKEN" cmd``. What is not a secret flag's or a secret
    variable's value is redacted as any text (:func:`redact`); a line that is no shell words too."""
    import shlex

    try:
        argv = shlex.split(text)
    except ValueError:
        return redact(text)
    refs: dict[int, str] = {}  # token index -> what replaces it, unquoted
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        if eq and name.startswith("--") and _SECRET_FLAG.match(name) and not _absent(value):
            refs[i] = f'{name}="${_env_for(name, argv)}"'
        elif i and _SECRET_FLAG.match(argv[i - 1]) and not token.startswith("-") and not _absent(token):
            refs[i] = f'"${_env_for(argv[i - 1], argv)}"'
        elif (m := _ENV_ASSIGNMENT.match(token)) and _SECRET_NAME.search(m.group("name")) and not _absent(m.group("value")):
            refs[i] = f'{m.group("name")}="${m.group("name")}"'
    if not refs:
        return redact(text)
    return " ".join(refs[i] if i in refs else shlex.quote(redact(t)) for i, t in enumerate(argv))


def _absent(value: str) -> bool:
    """A value that cannot be a secret: empty, None-like, or a number (``bytes_per_token: 131072``)."""
    v = value.strip().strip("'\"")
    return v.lower() in _ABSENT or v.replace(".", "", 1).isdigit()


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        out = [_walk(v) for v in value]
        # argv as a list: the element after a secret flag is the secret ("--api-key", "abc123")
        for i in range(len(out) - 1):
            flag, nxt = value[i], out[i + 1]
            if (
                isinstance(flag, str)
                and isinstance(nxt, str)
                and _SECRET_FLAG.match(flag)
                and not nxt.startswith("-")
                and not _absent(nxt)
                and MASK not in nxt
            ):
                out[i + 1] = MASK
        return out
    if isinstance(value, dict):
        result: dict[Any, Any] = {}
        for k, v in value.items():
            w = redact_command(v) if k == "command" and isinstance(v, str) else _walk(v)
            if isinstance(k, str) and isinstance(w, str) and _SECRET_NAME.search(k) and MASK not in w and not _absent(w):
                w = MASK
            result[redact(k) if isinstance(k, str) else k] = w
        return result
    return value


M = TypeVar("M", bound=BaseModel)


def redact_model(model: M) -> M:
    """A copy of ``model`` (a report, a finding) with every string redacted, and every value whose
    key or preceding flag names a secret replaced by ``[REDACTED]``. Numbers are untouched."""
    return type(model).model_validate(_walk(model.model_dump(mode="json")))


def redact_report(report: M) -> M:
    """A copy of ``report`` with every string (messages, context, commands, remedies) redacted."""
    return redact_model(report)


def redact_findings(findings: list[M]) -> list[M]:
    """:func:`redact_model` over a list of findings (the live output of pipe and follow modes)."""
    return [redact_model(f) for f in findings]
