"""Redaction, pattern by pattern (detect-secrets style: each secret shape beside its near misses),
its linear running time, and a property: a generated secret never survives in any output format of
the CLI, the Python API or the server."""

from __future__ import annotations

import contextlib
import io
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oomdoctor
from oomdoctor.redaction import MASK, PATTERN_NAMES, redact, redact_report
from oomdoctor.render import FORMATS, renderer

# (pattern, text with a secret, the text redacted, near misses that must stay as they are)
TABLE: list[tuple[str, str, str, list[str]]] = [
    (
        "key-value",
        "HUGGING_FACE_HUB_TOKEN=hf-like-Secret9 x",
        "HUGGING_FACE_HUB_TOKEN=[REDACTED] x",
        ["max_num_batched_tokens=8192", "'tokenizer': 'meta/llama'", "kv_cache_tokens: 5",
         "hf_token=None", "api_key: null", "bytes_per_token: 131072", "token=abc"],
    ),
    (
        "key-value",
        "{'model': 'm', 'api_key': 'Zx9-secret-Q'}",
        "{'model': 'm', 'api_key': '[REDACTED]'}",
        ["{'api_key': None}", "{'max_tokens': 'Zx9-secret-Q'}"],
    ),
    (
        "flag",
        "--api-key Zx9secretQ --max-num-batched-tokens 8192",
        "--api-key [REDACTED] --max-num-batched-tokens 8192",
        ["--max-num-batched-tokens 8192", "--api-key --port 8000", "--tokenizer meta/llama",
         "--api-key-file /etc/key", "x--api-key Zx9secretQ"],
    ),
    ("flag", "--hf-token='Zx9secretQ'", "--hf-token='[REDACTED]'", ["--hf-tokenizer Zx9secretQ"]),
    (
        "bearer",
        "Authorization: Bearer abc.DEF_ghi-123",
        "Authorization: Bearer [REDACTED]",
        ["bearer of bad news", "Bearer short"],
    ),
    (
        "authorization",
        "authorization: basic dXNlcjpwYXNz",
        "authorization: basic [REDACTED]",
        ["authorization: basic ok", "authorization required"],
    ),
    (
        "jwt",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U x",
        "jwt [REDACTED] x",
        ["eyJhbGciOiJIUzI1NiJ9 alone", "eyJ.eyJ.x", "xeyJhbGciOiJIUzI1NiJ9.abcdefghij.kl"],
    ),
    (
        "huggingface",
        "token hf_abcdefghijklmnopqrstu",
        "token hf_[REDACTED]",
        ["hf_short", "self.hf_config_path", "hf_transfer enabled"],
    ),
    (
        "openai",
        "using sk-proj-Z9y8Z9y8Z9y8Z9y8Z9y8 now",
        "using sk-[REDACTED] now",
        ["sk-short", "disk-cache-size-in-bytes", "task-queue"],
    ),
    ("stripe", "sk_live_abcdefghijklmnop1234", "sk_live_[REDACTED]", ["sk_live_short"]),
    (
        "aws-key-id",
        "id AKIAIOSFODNN7EXAMPLE",
        "id AKIA[REDACTED]",
        ["AKIA short", "AKIAIOSFODNN7EXAMPLEX"],
    ),
    (
        "aws-secret",
        "aws_creds: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_creds: [REDACTED]",
        ["aws_region = us-east-1", "aws_creds: wJalrXUtnFEMI/K7MDENG"],
    ),
    (  # not random-looking enough for the bare form: found by its key
        "aws-secret",
        "aws_creds: abcdefghijklmnopqrstuvwxyz0123456789abcd",
        "aws_creds: [REDACTED]",
        [],
    ),
    (
        "key-value",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key = [REDACTED]",
        ["aws_secret_access_key = abc"],
    ),
    ("google", "key AIzaSyA1234567890abcdefghijklmnopqrstuv", "key AIza[REDACTED]", ["AIza short"]),
    ("slack", "xoxb-1234567890-abcdefghij", "xox-[REDACTED]", ["xoxb-123", "xox-prefix"]),
    (
        "slack-webhook",
        "https://hooks.slack.com/services/T000/B000/XXXXabcd",
        "https://hooks.slack.com/services/[REDACTED]",
        ["https://hooks.slack.com/commands/1234", "hooks.slack.com/services/"],
    ),
    ("github", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "gh_[REDACTED]", ["ghp_short", "ghost_user"]),
    ("gitlab", "glpat-abcdefghijklmnopqrst", "glpat-[REDACTED]", ["glpat-short"]),
    (
        "url-credentials",
        "postgres://admin:Pa55w0rd@db:5432/x and redis://u:p@ss:w0rd@cache/0",
        "postgres://admin:[REDACTED]@db:5432/x and redis://u:[REDACTED]@cache/0",
        ["https://example.com:8080/path", "http://localhost:8000/v1", "user@host:22", "s3://bucket/key:v@1",
         "https://example.com:8080/a@b", "http://:8080/x"],
    ),
    # issue 36: the six forms that leaked
    ("url-credentials", "redis://:hunter2pass@cache:6379/0", "redis://:[REDACTED]@cache:6379/0", ["redis://cache:6379/0"]),
    ("url-credentials", "postgres://app:pa/ss@db:5432/x", "postgres://app:[REDACTED]@db:5432/x", ["http://h:80/a/b"]),
    (
        "github-fine-grained",
        "GH github_pat_11ABCDEFG0abcdefghij_KLMNOPQRSTuvwxyz0123456789 x",
        "GH github_pat_[REDACTED] x",
        ["github_pat_short", "my_github_pat_file"],
    ),
    (
        "key-value-quoted",
        'password="correct horse battery staple" next',
        'password="[REDACTED]" next',
        ['password=""', "password='None'", 'max_tokens="a b c d"', 'password: "x"'],
    ),
    (
        "private-key",
        '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n"}',
        '{"private_key": "[REDACTED]"}',
        ["-----BEGIN PUBLIC KEY-----", "-----BEGIN CERTIFICATE-----", "PRIVATE KEY"],
    ),
    (
        "private-key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END RSA PRIVATE KEY-----\nINFO next",
        "-----BEGIN RSA PRIVATE KEY-----[REDACTED]\nINFO next",
        [],
    ),
    ("key-value", "MYSQL_PWD=s3cr3tPass! next", "MYSQL_PWD=[REDACTED] next", ["PWD=/home/user", "OLDPWD=/tmp/x"]),
    (
        "aws-secret-bare",
        "key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY end",
        "key [REDACTED] end",
        ["sha 0123456789abcdef0123456789abcdef01234567", "AAAAAAAAAAAAAAAAAAAAaaaaaaaaaaaaaaaaaaa1",
         "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEYX", "/usr/lib/python3/site-packages/torch/cuda/x"],
    ),
]


@pytest.mark.parametrize(("name", "text", "expected", "near"), TABLE, ids=[f"{r[0]}-{i}" for i, r in enumerate(TABLE)])
def test_each_secret_shape_and_its_near_misses(name: str, text: str, expected: str, near: list[str]) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected  # idempotent
    for miss in near:
        assert redact(miss) == miss, (name, miss)


def test_every_pattern_has_a_row() -> None:
    assert {row[0] for row in TABLE} == set(PATTERN_NAMES)


@pytest.mark.parametrize("name", PATTERN_NAMES)
def test_each_pattern_is_needed_by_its_rows(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping any one pattern (a mutation) breaks at least one row of the table."""
    import oomdoctor.redaction as red

    monkeypatch.setattr(red, "_PATTERNS", [p for p in red._PATTERNS if p[0] != name])
    rows = [row for row in TABLE if row[0] == name]
    assert any(red.redact(text) != expected for _, text, expected, _ in rows)


def test_structured_values_are_redacted_by_their_key_or_flag() -> None:
    report = oomdoctor.diagnose(
        "non-default args: {'model': 'm', 'api_key': 'plainvalue99'}\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n",
        redact=False,
    )
    ctx = report.context.model_copy(
        update={"command": ["vllm", "serve", "m", "--api-key", "plainvalue99", "--port", "8000"],
                "launch_args": {"api_key": "plainvalue99", "hf_token": "None", "port": "8000"}}
    )
    red = redact_report(report.model_copy(update={"context": ctx}))
    assert red.context.command == ["vllm", "serve", "m", "--api-key", MASK, "--port", "8000"]
    assert red.context.launch_args == {"api_key": MASK, "hf_token": "None", "port": "8000"}
    assert red.findings[0].figures == report.findings[0].figures  # numbers untouched


# -- linear time -----------------------------------------------------------------------------------------

ADVERSARIAL = [
    "a.", "-", "--a", "--api-key", "token", "token ", "token=", "sk-", "hf_", "eyJ", "eyJa.", "://a:", "a:/",
    "aws ", "bearer ", "a@", "http://x:", "hooks.slack.com/services/", "x",
    # issue 36's patterns
    "password=\"a ", "password=\"", "://:", "://:a@/", "-----BEGIN PRIVATE KEY-----", "-----BEGIN ", "A1b/",
    "github_pat_", "_pwd=",
]
#: input grows x16 between the two sizes measured: linear time grows about x16, quadratic x256
GROWTH_LIMIT = 64


def _cpu(fn: Callable[[], object]) -> float:
    """CPU seconds of this thread in ``fn``: unlike the wall clock, not stretched by other
    processes taking the cores (the test runs on loaded 2-core CI machines)."""
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def _growth(unit: str, small: int, rounds: int = 5) -> float:
    """The least ratio, over ``rounds`` rounds, of the CPU time of redacting 16 x ``small``
    characters of ``unit`` repeated to that of ``small`` characters: the two sizes are measured
    alternately, the same way, so whatever slows one round slows both of its measurements."""

    def text(n: int) -> str:
        return (unit * (n // len(unit) + 1))[:n]

    little, big = text(small), text(16 * small)
    best = float("inf")
    for _ in range(rounds):
        t_little = _cpu(lambda: redact(little))
        t_big = _cpu(lambda: redact(big))
        best = min(best, t_big / max(t_little, 1e-6))
        if best < GROWTH_LIMIT:
            break  # linear: no need for more rounds
    return best


@pytest.mark.parametrize("unit", ADVERSARIAL)
def test_redaction_is_linear_on_adversarial_input(unit: str) -> None:
    """One pattern's prefix, repeated: the quadratic patterns took 132 s on 60 000 characters.

    By growth, not by a time limit: 128 KiB costs about 16 times what 8 KiB costs (a quadratic
    pattern: 256 times). What redacting costs against one plain read of the text is a figure
    for ``bench/redaction.py``, not an assert."""
    growth = _growth(unit, 8 << 10)
    assert growth < GROWTH_LIMIT, f"redaction grows x{growth:.1f} for x16 input on {unit!r}"


@pytest.mark.slow
@pytest.mark.parametrize("unit", ADVERSARIAL)
def test_redaction_is_linear_on_megabytes_of_adversarial_input(unit: str) -> None:
    growth = _growth(unit, 64 << 10)
    assert growth < GROWTH_LIMIT, f"redaction grows x{growth:.1f} from 64 KiB to 1 MiB on {unit!r}"


# -- a generated secret never survives in any output --------------------------------------------------------

_ALNUM = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def _token(min_size: int, max_size: int, alphabet: str = _ALNUM) -> st.SearchStrategy[str]:
    return st.text(alphabet, min_size=min_size, max_size=max_size).filter(
        lambda v: any(c.isdigit() for c in v) and any(c.isalpha() for c in v)
    )


# (how the secret is written in the log, the secret itself)
SECRETS = st.one_of(
    _token(16, 40).map(lambda v: (f"hf_{v}", f"hf_{v}")),
    _token(20, 48).map(lambda v: (f"sk-proj-{v}", v)),
    st.text("ABCDEFGHJKLMNPQRSTUVWXYZ234567", min_size=16, max_size=16).map(lambda v: ("AKIA" + v, "AKIA" + v)),
    _token(36, 36).map(lambda v: (f"ghp_{v}", v)),
    _token(20, 30).map(lambda v: (f"glpat-{v}", v)),
    _token(12, 30).map(lambda v: (f"xoxb-12345-{v}", v)),
    st.tuples(_token(10, 30), _token(10, 30), _token(20, 40)).map(
        lambda t: (f"eyJ{t[0]}.eyJ{t[1]}.{t[2]}", f"eyJ{t[0]}.eyJ{t[1]}")
    ),
    _token(12, 30).map(lambda v: (f"--api-key {v}", v)),
    _token(12, 30).map(lambda v: (f"--hf-token={v}", v)),
    _token(12, 30).map(lambda v: (f"HF_TOKEN={v}", v)),
    _token(12, 30).map(lambda v: (f"'api_key': '{v}'", v)),
    _token(12, 30).map(lambda v: (f"Authorization: Bearer {v}", v)),
    _token(12, 30).map(lambda v: (f"postgres://admin:{v}@db.internal:5432/x", v)),
    # issue 36's six forms
    _token(12, 30).map(lambda v: (f"redis://:{v}@cache:6379/0", v)),
    st.tuples(_token(6, 15), _token(6, 15)).map(lambda t: (f"mysql://app:{t[0]}/{t[1]}@db/x", f"{t[0]}/{t[1]}")),
    _token(40, 60).map(lambda v: (f"github_pat_{v}", v)),
    st.lists(_token(5, 9), min_size=3, max_size=5).map(lambda w: (f'password="{" ".join(w)}"', " ".join(w))),
    _token(40, 64).map(
        lambda v: (f'"private_key": "-----BEGIN PRIVATE KEY-----\\n{v}\\n-----END PRIVATE KEY-----\\n"', v)
    ),
    _token(12, 30).map(lambda v: (f"MYSQL_PWD={v}", v)),
    st.just(("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")),
)

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
    "of 79.19 GiB of which 1.00 MiB is free. Including non-PyTorch memory, this process has 79.18 GiB memory "
    "in use. Of the allocated memory 78.00 GiB is allocated by PyTorch, and 500.00 MiB is reserved by PyTorch "
    "but unallocated. {secret}\n"
)


def make_log(written: str) -> str:
    return f"INFO 01-01 00:00:00 [api_server.py:1] non-default args: {{'model': 'm', 'x': '{written}'}}\n" + OOM.format(
        secret=written
    )


_FRAME = re.compile(r"[\s│╭╮╰╯─┃━…\\]+")


def assert_absent(secret: str, output: str, where: str) -> None:
    """Absent as written, and absent once line wrapping and box drawing are taken out."""
    assert secret not in output, where
    assert _FRAME.sub("", secret) not in _FRAME.sub("", output), where


def cli_outputs(log: str) -> dict[str, str]:
    from oomdoctor.cli import main

    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "server.log"
        path.write_text(log, encoding="utf-8")
        for fmt in FORMATS:
            buf, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
                main([str(path), "-f", fmt])
            out[f"cli {fmt}"] = buf.getvalue() + err.getvalue()
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(secret=SECRETS)
def test_a_generated_secret_never_survives_cli_or_api(secret: tuple[str, str]) -> None:
    written, value = secret
    log = make_log(written)
    raw = oomdoctor.diagnose(log, redact=False)
    assert value in raw.model_dump_json()  # the report would echo it
    report = oomdoctor.diagnose(log)
    outputs = {"api json": report.model_dump_json()}
    outputs.update({f"api {fmt}": renderer(fmt)(report, color=False) for fmt in FORMATS})
    outputs.update(cli_outputs(log))
    for where, text in outputs.items():
        assert_absent(value, text, where)
    assert MASK in outputs["api json"]


@pytest.fixture(scope="module")
def http_server() -> object:
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from tests.test_server import AUTH, Receiver, base_config, running

    receiver = Receiver()
    try:
        with running(base_config(receiver)) as url, httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
            yield c
    finally:
        receiver.close()


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(secret=SECRETS)
def test_a_generated_secret_never_survives_the_server(http_server: object, secret: tuple[str, str]) -> None:
    written, value = secret
    log = make_log(written)
    for fmt in ("json", "markdown", "text", "slack"):
        r = http_server.post("/v1/diagnose", json={"log": log, "format": fmt})  # type: ignore[attr-defined]
        assert r.status_code == 200, r.text
        assert_absent(value, r.text, f"server {fmt}")
    from tests.test_server import MM_TOKEN

    r = http_server.post(  # type: ignore[attr-defined]
        "/mattermost/commands", data={"text": log, "token": MM_TOKEN, "command": "/oomdoctor"}
    )
    assert r.status_code == 200, r.text
    assert_absent(value, r.text, "server mattermost")


SECRET_LOG = make_log("--api-key Zx9plainSecret7 hf_a1B2a1B2a1B2a1B2a1B2a1B2")


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("mode", ["pipe", "run"])
def test_live_modes_never_echo_a_secret(tmp_path: Path, mode: str, fmt: str) -> None:
    """Pipe and run modes print live findings and the summary on stderr (stdout is the log itself)."""
    import subprocess
    import sys

    log = tmp_path / "server.log"
    log.write_text(SECRET_LOG)
    if mode == "pipe":
        args, stdin = [sys.executable, "-m", "oomdoctor", "-f", fmt], log.read_bytes()
    else:
        args, stdin = [sys.executable, "-m", "oomdoctor", "run", "-f", fmt, "--", "cat", str(log)], None
    proc = subprocess.run(args, input=stdin, capture_output=True, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr  # run: the exit code is issue 15's to decide
    assert proc.stdout == log.read_bytes()  # passthrough is byte-exact: the log as it was
    err = proc.stderr.decode()
    assert "out of memory" in err.lower() or "cuda-oom" in err
    for secret in ("Zx9plainSecret7", "hf_a1B2a1B2a1B2a1B2a1B2a1B2"):
        assert_absent(secret, err, f"{mode} {fmt}")


# -- issue 36: the six forms that leaked, each through every output ---------------------------------------

SIX_FORMS: list[tuple[str, str, str]] = [  # (id, how it is written in the log, the secret)
    ("redis-empty-user", "redis://:Hunter2Redis9x@cache:6379/0", "Hunter2Redis9x"),
    ("url-password-slash", "mysql://app:pa55/w0rd9Q@db:3306/x", "pa55/w0rd9Q"),
    ("github-fine-grained", "github_pat_11ABCDEFG0aBcDeFgHiJ_KLMNOPQRSTuvwxyz0123456789", "11ABCDEFG0aBcDeFgHiJ"),
    ("quoted-password", 'password="correct horse battery staple"', "correct horse battery staple"),
    (
        "pem-private-key",
        '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n"',
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    ),
    ("mysql-pwd", "MYSQL_PWD=s3cr3tMysqlPw9", "s3cr3tMysqlPw9"),
    ("aws-secret-bare", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
]


@pytest.mark.parametrize(("written", "secret"), [f[1:] for f in SIX_FORMS], ids=[f[0] for f in SIX_FORMS])
def test_each_promised_form_is_redacted_by_the_cli_and_the_api(written: str, secret: str) -> None:
    log = make_log(written)
    assert secret in oomdoctor.diagnose(log, redact=False).model_dump_json()  # the report would echo it
    report = oomdoctor.diagnose(log)
    outputs = {"api json": report.model_dump_json()}
    outputs.update({f"api {fmt}": renderer(fmt)(report, color=False) for fmt in FORMATS})
    outputs.update(cli_outputs(log))
    assert {f"cli {fmt}" for fmt in ("text", "json", "jsonl", "markdown", "slack")} <= set(outputs)
    for where, text in outputs.items():
        assert_absent(secret, text, where)


@pytest.mark.parametrize(("written", "secret"), [f[1:] for f in SIX_FORMS], ids=[f[0] for f in SIX_FORMS])
def test_each_promised_form_is_redacted_by_the_server(http_server: object, written: str, secret: str) -> None:
    from tests.test_server import MM_TOKEN, command_body, slack_escape, slack_post

    log = make_log(written)
    for fmt in ("json", "markdown", "text", "slack"):
        r = http_server.post("/v1/diagnose", json={"log": log, "format": fmt})  # type: ignore[attr-defined]
        assert r.status_code == 200, r.text
        assert_absent(secret, r.text, f"server {fmt}")
    r = http_server.post(  # type: ignore[attr-defined]
        "/mattermost/commands", data={"text": log, "token": MM_TOKEN, "command": "/oomdoctor"}
    )
    assert r.status_code == 200, r.text
    assert_absent(secret, r.text, "server mattermost")
    r = slack_post(str(http_server.base_url), "/slack/commands", command_body(slack_escape(log)))  # type: ignore[attr-defined]
    assert r.status_code == 200, r.text
    assert r.json()["blocks"]
    assert_absent(secret, r.text, "server slack command")
    # 422s name the client's own hint keys: redacted too
    r = http_server.post("/v1/diagnose", json={"log": "x", "hints": {written: 1}})  # type: ignore[attr-defined]
    assert r.status_code == 422
    assert_absent(secret, r.text, "server 422")


@pytest.mark.parametrize("mode", ["pipe", "run"])
def test_each_promised_form_is_redacted_in_live_modes(tmp_path: Path, mode: str) -> None:
    import subprocess
    import sys

    log = tmp_path / "server.log"
    log.write_text("".join(make_log(written) for _, written, _ in SIX_FORMS))
    if mode == "pipe":
        args, stdin = [sys.executable, "-m", "oomdoctor", "-f", "json"], log.read_bytes()
    else:
        args, stdin = [sys.executable, "-m", "oomdoctor", "run", "-f", "text", "--", "cat", str(log)], None
    proc = subprocess.run(args, input=stdin, capture_output=True, timeout=60)
    err = proc.stderr.decode()
    assert "out of memory" in err.lower() or "cuda-oom" in err
    for _, _, secret in SIX_FORMS:
        assert_absent(secret, err, f"{mode} {secret}")


def test_every_pattern_cites_the_catalog_it_comes_from() -> None:
    """Issue 36 item 2: the patterns come from maintained catalogs (detect-secrets' plugins,
    gitleaks' rules), each naming its source; a pattern added without one fails here."""
    from oomdoctor.redaction import PATTERN_NAMES, SOURCES

    assert len(set(PATTERN_NAMES)) == len(PATTERN_NAMES)
    assert set(SOURCES) == set(PATTERN_NAMES)
    for name, source in SOURCES.items():
        assert "detect-secrets" in source or "gitleaks" in source, name
