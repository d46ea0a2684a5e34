"""Property-based fuzzing of the HTTP service: no request may produce a 5xx.

schemathesis generates requests from the service's own /openapi.json (with the bearer token, so
the analysis runs); hypothesis sends signed Slack commands and Mattermost commands with arbitrary
text, which the schema-driven fuzzer cannot sign.
"""

from __future__ import annotations

import gzip
import json
import time
import urllib.parse
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from oomdoctor.server.slack import sign  # noqa: E402
from tests.test_server import AUTH, MM_TOKEN, SLACK_SECRET, Receiver, base_config, running  # noqa: E402


@pytest.fixture(scope="session")
def fuzz_server() -> Iterator[str]:
    receiver = Receiver()
    try:
        with running(base_config(receiver)) as url:
            yield url
    finally:
        receiver.close()


@pytest.fixture(scope="session")
def http(fuzz_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fuzz_server, timeout=30) as c:
        yield c


def operations(url: str) -> list:  # type: ignore[type-arg]
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    return [result.ok() for result in schema.get_all_operations()]


def test_openapi_fuzz_no_server_error(fuzz_server: str) -> None:
    """Every operation of /openapi.json, fuzzed from its schema (bodies, query, headers): no 5xx."""
    ops = operations(fuzz_server)
    labels = {op.label for op in ops}
    assert {"POST /v1/diagnose", "GET /v1/rules", "POST /slack/commands", "POST /mattermost/commands"} <= labels
    import requests

    session = requests.Session()
    statuses: dict[str, set[int]] = {}
    for op in ops:

        @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=op.as_strategy())
        def check(case) -> None:  # type: ignore[no-untyped-def]
            r = case.call_and_validate(session=session, headers=AUTH, checks=[not_a_server_error], timeout=30)
            statuses.setdefault(case.operation.label, set()).add(r.status_code)

        check()
    session.close()
    # the fuzzer got past validation into the analysis, and its malformed cases were refused cleanly
    assert 200 in statuses["POST /v1/diagnose"] and statuses["POST /v1/diagnose"] - {200}
    assert statuses["POST /slack/commands"] == {401}  # unsigned


# text that looks like logs: log-ish words, sizes, Slack entities and odd unicode
LOG_TEXT = st.lists(
    st.one_of(
        st.sampled_from([
            "CUDA out of memory. Tried to allocate 2.00 GiB",
            "ValueError: To serve at least one request with the model's max seq len (4096)",
            "&lt;module&gt;", "<https://x.y|x.y>", "```", "\r", "\x1b[31m", "Traceback (most recent call last):",
            "GPU 0 has a total capacity of 79.19 GiB of which 1.00 MiB is free.",
        ]),
        st.text(max_size=80),
    ),
    max_size=12,
).map("\n".join)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=LOG_TEXT, extra=st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=3))
def test_signed_chat_commands_never_5xx(http: httpx.Client, text: str, extra: dict[str, str]) -> None:
    fields = {**extra, "text": text, "command": "/oomdoctor", "response_url": "https://hooks.slack.com/x"}
    body = urllib.parse.urlencode(fields).encode()
    ts = str(int(time.time()))
    r = http.post(
        "/slack/commands",
        content=body,
        headers={"content-type": "application/x-www-form-urlencoded", "x-slack-request-timestamp": ts,
                 "x-slack-signature": sign(SLACK_SECRET, ts, body)},
    )
    # 401 only when hypothesis repeats an identical body within a second (a replay)
    assert r.status_code in (200, 401), r.text
    assert "blocks" in r.json() or "text" in r.json() or "error" in r.json()
    r = http.post(
        "/mattermost/commands",
        content=urllib.parse.urlencode({**fields, "token": MM_TOKEN}).encode(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["text"]) <= 16383


# -- /v1/diagnose: arbitrary bodies under arbitrary content types, encodings and extra headers ------------

_HEADER_NAME = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12).filter(
    lambda n: n.strip("-") and n not in ("content-length", "host", "transfer-encoding", "authorization", "connection",
                                         "content-type", "content-encoding", "expect", "upgrade")
)
_HEADER_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(str.strip)


def _nested(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"log": "x", "hints": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"


BODIES = st.one_of(
    st.binary(max_size=2000),
    LOG_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.builds(lambda t, f: json.dumps({"log": t, "format": f}).encode(), LOG_TEXT,
              st.sampled_from(["json", "markdown", "slack", "text", "pdf"])),
    st.builds(_nested, st.integers(1, 20_000), st.sampled_from(["list", "hints"])),
    LOG_TEXT.map(lambda t: gzip.compress(t.encode("utf-8", "surrogatepass"))),
    st.builds(lambda t, cut: gzip.compress(t.encode("utf-8", "surrogatepass"))[:cut], LOG_TEXT, st.integers(0, 40)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    body=BODIES,
    ctype=st.one_of(
        st.sampled_from(["application/json", "text/plain", "application/gzip", "application/octet-stream", "",
                         "application/json; charset=utf-8", "multipart/form-data", "text/plain; charset=latin-1"]),
        _HEADER_VALUE,
    ),
    encoding=st.sampled_from(["", "gzip", "x-gzip", "deflate", "br", "identity"]),
    extra=st.dictionaries(_HEADER_NAME, _HEADER_VALUE, max_size=4),
    fmt=st.sampled_from([None, "json", "markdown", "slack", "text", "pdf"]),
)
def test_diagnose_bodies_and_headers_never_5xx(
    http: httpx.Client, body: bytes, ctype: str, encoding: str, extra: dict[str, str], fmt: str | None
) -> None:
    headers = {**extra, **AUTH, "content-type": ctype}
    if encoding:
        headers["content-encoding"] = encoding
    r = http.post("/v1/diagnose", content=body, headers=headers, params={"format": fmt} if fmt else None)
    assert r.status_code < 500 or r.status_code == 503, r.text
    if r.status_code >= 400:
        assert set(r.json()) == {"error"} and "\n" not in r.json()["error"]
