"""Logs saved as UTF-16 or UTF-32 (PowerShell 5's ``> log.txt``) or with a UTF-8 byte-order mark
read as the UTF-8 log they hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import oomdoctor
from oomdoctor.inputs import read_blocks

ROOT = Path(__file__).resolve().parent.parent
LOG = (ROOT / "fixtures" / "vllm" / "vllm-054.log").read_text(encoding="utf-8")  # max-len-exceeds at line 4
TEXT = LOG + "naïve ✓ 🚀 end\n"  # beyond Latin-1, and a character UTF-16 writes as a surrogate pair

ENCODINGS: dict[str, Callable[[str], bytes]] = {
    "utf-16 (little-endian, BOM)": lambda t: t.encode("utf-16"),
    "utf-16-be with BOM": lambda t: b"\xfe\xff" + t.encode("utf-16-be"),
    "utf-32 (BOM)": lambda t: t.encode("utf-32"),
}


@pytest.mark.parametrize("encode", ENCODINGS.values(), ids=list(ENCODINGS))
@pytest.mark.parametrize("block", [3, 1 << 20])
def test_a_byte_order_mark_says_how_to_read_the_file(encode: Callable[[str], bytes], block: int, tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(encode(TEXT))
    assert b"".join(read_blocks(str(path), block)) == TEXT.encode("utf-8")


def test_an_invalid_code_unit_reads_as_a_replacement_character(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes("a\n".encode("utf-16") + b"\x00\xd8" + "\nb\n".encode("utf-16-le"))  # a lone surrogate
    assert b"".join(read_blocks(str(path))) == "a\n\ufffd\nb\n".encode()


def test_a_powershell_log_is_diagnosed_like_the_log(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_bytes(LOG.replace("\n", "\r\n").encode("utf-16"))
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "-f", "json", "server.log"],
        cwd=tmp_path, capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    found = json.loads(proc.stdout)["findings"]
    assert [(f["rule"], f["location"]["line"], f["figures"]["max_seq_len"]) for f in found] == [
        ("vllm.v1.kv-cache.max-len-exceeds", 4, 202752)
    ]


def test_the_api_reads_bytes_with_a_byte_order_mark() -> None:
    want = [(f.rule, f.location.line, f.figures) for f in oomdoctor.diagnose(LOG).findings]
    assert want and want[0][1] == 4
    for encode in ENCODINGS.values():
        assert [(f.rule, f.location.line, f.figures) for f in oomdoctor.diagnose(encode(LOG)).findings] == want


def test_a_utf8_byte_order_mark_is_dropped() -> None:
    # a file's own mark, and one that `cat a.log b.log` put at the start of a line mid-stream
    lines = LOG.splitlines(keepends=True)
    lines[3] = "\ufeff" + lines[3]
    log = "\ufeff" + "".join(lines)
    [f] = oomdoctor.diagnose(log.encode("utf-8")).findings
    assert (f.rule, f.location.line, f.figures["max_seq_len"]) == ("vllm.v1.kv-cache.max-len-exceeds", 4, 202752)
    assert not f.message.startswith("\ufeff")
