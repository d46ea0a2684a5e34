"""Issue 36 item 4: no finding is silently lost.

Multi-member gzip bodies and stacked Content-Encodings are read whole (or refused 415); a closed or
failing stdout gives an exit status that says what is known; ``-o`` is written whole or not at all;
a file truncated while read is reported. Asserts are statuses, exit codes and bytes."""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from oomdoctor.inputs import read_blocks
from oomdoctor.server.limits import LimitError, content_codings, gunzip

ROOT = Path(__file__).resolve().parent.parent
KV_LOG = (ROOT / "fixtures" / "vllm" / "vllm-054.log").read_bytes()  # vllm.v1.kv-cache.max-len-exceeds
ENV = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
QUIET = b"INFO 01-28 00:18:00 [api_server.py:100] handled request in 12 ms\n"
INCOMPLETE = "oomdoctor: output closed; analysis incomplete\n"


# -- the server: every gzip member, every coding ------------------------------------------------------


def test_gunzip_reads_every_member_and_ignores_zero_padding() -> None:
    a, b = gzip.compress(b"first\n"), gzip.compress(b"second\n")
    assert gunzip([a + b], 100) == b"first\nsecond\n"
    assert gunzip([a[:7], a[7:] + b[:3], b[3:] + b"\0" * 512], 100) == b"first\nsecond\n"
    with pytest.raises(LimitError) as exc:  # the cap covers all members together
        gunzip([a + b], 10)
    assert exc.value.status == 413
    with pytest.raises(LimitError) as exc:  # a second member cut short is not silently dropped
        gunzip([a + b[:-6]], 100)
    assert exc.value.status == 400


def test_deflate_is_zlib_or_raw() -> None:
    raw = zlib.compressobj(wbits=-15)
    assert gunzip([zlib.compress(b"zlib\n")], 100, coding="deflate") == b"zlib\n"
    assert gunzip([raw.compress(b"raw\n") + raw.flush()], 100, coding="deflate") == b"raw\n"


@pytest.mark.parametrize(
    ("header", "codings"),
    [("", []), ("identity", []), ("gzip", ["gzip"]), ("x-gzip", ["gzip"]), ("Deflate", ["deflate"]),
     ("gzip, gzip", ["gzip", "gzip"]), ("deflate, identity, gzip", ["deflate", "gzip"])],
)
def test_supported_content_encodings(header: str, codings: list[str]) -> None:
    assert content_codings(header) == codings


@pytest.mark.parametrize("header", ["br", "zstd", "gzip, br", "compress", "gzip, gzip, gzip"])
def test_unsupported_content_encodings_are_415(header: str) -> None:
    with pytest.raises(LimitError) as exc:
        content_codings(header)
    assert exc.value.status == 415


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    pytest.importorskip("fastapi")
    from tests.test_server import Receiver, base_config, running

    receiver = Receiver()
    try:
        with running(base_config(receiver)) as url:
            yield url
    finally:
        receiver.close()


def _post(url: str, body: bytes, ctype: str, encoding: str | None) -> tuple[int, dict[str, object]]:
    httpx = pytest.importorskip("httpx")
    from tests.test_server import AUTH

    headers = {**AUTH, "content-type": ctype}
    if encoding is not None:
        headers["content-encoding"] = encoding
    r = httpx.post(url + "/v1/diagnose", content=body, headers=headers, timeout=60)
    return r.status_code, r.json()


def _kinds(report: dict[str, object]) -> list[str]:
    return [f["rule"] for f in report["findings"]]  # type: ignore[index, union-attr]


def test_every_gzip_member_and_every_coding_is_analysed(server: str) -> None:
    expected = _kinds(_post(server, KV_LOG, "text/plain", None)[1])
    assert expected  # the OOM, found in the plain body
    two_members = gzip.compress(QUIET * 50) + gzip.compress(KV_LOG)  # the OOM only in the second member
    deflated = zlib.compress(QUIET * 50 + KV_LOG)
    for body, ctype, encoding in (
        (two_members, "text/plain", "gzip"),
        (two_members, "application/gzip", None),
        (deflated, "text/plain", "deflate"),
        (gzip.compress(two_members), "text/plain", "gzip, gzip"),
        (gzip.compress(deflated), "text/plain", "deflate, gzip"),
        (gzip.compress(two_members), "application/gzip", "gzip"),  # a .gz file sent gzip-encoded
    ):
        status, report = _post(server, body, ctype, encoding)
        assert status == 200, (ctype, encoding, report)
        assert _kinds(report) == expected, (ctype, encoding)


def test_an_unsupported_coding_is_415_before_the_body_is_read(server: str) -> None:
    from tests.test_server import AUTH
    from tests.test_server_hardening import PATIENCE, connect

    for encoding in (b"br", b"gzip, zstd"):
        s = connect(server)
        s.sendall(b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n"
                  + f"Authorization: {AUTH['Authorization']}\r\n".encode() + b"Content-Encoding: " + encoding + b"\r\n\r\n")
        s.settimeout(PATIENCE)  # the answer comes without the body (never sent)
        assert s.recv(65536).startswith(b"HTTP/1.1 415")
        s.close()


# -- the CLI: a closed or failing stdout ---------------------------------------------------------------


def _run_into_closed_pipe(args: list[str], stdin: Path | None = None) -> tuple[int, str]:
    """Run oomdoctor with a stdout whose reader has gone before the first byte is written."""
    r, w = os.pipe()
    os.close(r)
    try:
        with open(stdin or os.devnull, "rb") as inp:
            p = subprocess.run([sys.executable, "-m", "oomdoctor", *args], stdin=inp, stdout=w,
                               stderr=subprocess.PIPE, env=ENV, timeout=120)
    finally:
        os.close(w)
    return p.returncode, p.stderr.decode()


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_file_mode_into_a_closed_pipe_still_says_an_oom_was_found(tmp_path: Path, fmt: str) -> None:
    log = tmp_path / "crash.log"
    log.write_bytes(KV_LOG)
    assert _run_into_closed_pipe([str(log), "-f", fmt]) == (1, "")
    quiet = tmp_path / "quiet.log"
    quiet.write_bytes(QUIET * 10)  # analysed whole, nothing found: that is known
    assert _run_into_closed_pipe([str(quiet), "-f", fmt]) == (0, "")


def test_pipe_mode_into_a_closed_pipe_says_found_or_incomplete(tmp_path: Path) -> None:
    early = tmp_path / "early.log"
    early.write_bytes(KV_LOG + QUIET * 10)  # the OOM in the first block read
    code, err = _run_into_closed_pipe([], early)
    assert code == 1 and "out-of-memory failure" in err and INCOMPLETE not in err
    late = tmp_path / "late.log"
    late.write_bytes(QUIET * 40_000 + KV_LOG)  # 2.6 MB: the OOM after the first block, never read
    code, err = _run_into_closed_pipe([], late)
    assert (code, err) == (2, INCOMPLETE)


def test_pipe_mode_write_failure_does_not_claim_nothing_was_found(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    late = tmp_path / "late.log"
    late.write_bytes(QUIET * 40_000 + KV_LOG)
    with open(late, "rb") as inp, open("/dev/full", "wb") as out:
        p = subprocess.run([sys.executable, "-m", "oomdoctor"], stdin=inp, stdout=out, stderr=subprocess.PIPE,
                           env=ENV, timeout=120)
    err = p.stderr.decode()
    assert p.returncode == 2
    assert "no out-of-memory failure" not in err and err.endswith(INCOMPLETE), err


# -- -o: whole or not at all ---------------------------------------------------------------------------


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))  # EFBIG past 2000 bytes (SIGXFSZ: ignored)


def test_output_file_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    log = tmp_path / "crash.log"
    log.write_bytes(KV_LOG)
    out = tmp_path / "report.json"
    out.write_text('{"old": "report"}')
    p = subprocess.run([sys.executable, "-m", "oomdoctor", str(log), "-f", "json", "-o", str(out)],
                       stderr=subprocess.PIPE, env={**ENV, "OOMDOCTOR_CACHE_DIR": str(tmp_path / "cache")},
                       timeout=120, preexec_fn=_limit_file_size)
    assert p.returncode == 2, p.stderr
    assert out.read_text() == '{"old": "report"}'  # the old file stands; no half-written report
    assert sorted(x.name for x in tmp_path.iterdir() if x.name != "cache") == ["crash.log", "report.json"]
    p = subprocess.run([sys.executable, "-m", "oomdoctor", str(log), "-f", "json", "-o", str(out)],
                       stderr=subprocess.PIPE, env=ENV, timeout=120)
    assert p.returncode == 1
    assert json.loads(out.read_text())["summary"]["errors"] == 1
    assert sorted(x.name for x in tmp_path.iterdir() if x.name != "cache") == ["crash.log", "report.json"]


# -- a file truncated while read -----------------------------------------------------------------------


def test_a_file_truncated_while_read_is_reported(tmp_path: Path) -> None:
    log = tmp_path / "rotated.log"
    log.write_bytes(QUIET * 1000)
    warnings: list[str] = []
    read = 0
    for i, block in enumerate(read_blocks(str(log), block=4096, warn=warnings.append)):
        read += len(block)
        if i == 0:
            os.truncate(log, 10_000)  # copytruncate rotation, mid-read
    assert read == 10_000
    assert warnings == [f"{log} shrank from {len(QUIET) * 1000} to 10000 bytes while being read (truncated or "
                        "rotated?); the report covers what was read"]
    warnings.clear()
    assert b"".join(read_blocks(str(log), block=4096, warn=warnings.append)) == (QUIET * 1000)[:10_000]
    assert warnings == []  # read whole: nothing to say
