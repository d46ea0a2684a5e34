"""``oomdoctor --follow FILE``: like tail -F, across rotation and truncation; SIGINT summarises."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
KV_LOG = (ROOT / "fixtures" / "vllm" / "vllm-054.log").read_bytes()  # KV cache too small, max_seq_len 202752
TORCH_LOG = (ROOT / "fixtures" / "vllm" / "vllm-033.log").read_bytes()  # CUDA OOM, 96 MiB requested
TITLE_KV = b"KV cache cannot hold one request"


class Follow:
    def __init__(self, path: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oomdoctor", "--follow", str(path), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, stdin=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.out = b""

    def wait_for(self, needle: bytes, count: int = 1, timeout: float = 60) -> None:  # against a hang only
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while self.out.count(needle) < count and time.monotonic() < deadline:
            try:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                time.sleep(0.05)
                continue
            if not chunk:
                break
            self.out += chunk
        assert self.out.count(needle) >= count, self.out.decode(errors="replace")

    def stop(self, sig: int = signal.SIGINT) -> tuple[int, bytes, bytes]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, self.out + out, err


def test_follow_across_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"INFO starting\n")
    f = Follow(log)
    time.sleep(0.3)
    with log.open("ab") as fh:  # lines arriving
        fh.write(KV_LOG)
    f.wait_for(TITLE_KV)
    log.rename(tmp_path / "server.log.1")  # rotation: a new file at the same name
    # longer than what follows the truncation: the file is then shorter than the position read
    # to whenever the follower looks, so it sees the truncation however late it looks
    log.write_bytes(b"INFO restarted\n" * (len(KV_LOG) // 15 + 1) + TORCH_LOG)
    f.wait_for(b"CUDA out of memory")
    with log.open("wb") as fh:  # truncation (> server.log), then a new failure
        fh.write(b"")
    with log.open("ab") as fh:
        fh.write(KV_LOG)
    f.wait_for(TITLE_KV, count=2)
    code, out, err = f.stop(signal.SIGINT)
    assert code == 130  # stopped by Ctrl-C: as the pipe and tail -F (the findings are in the report)
    assert b"oomdoctor: 3 out-of-memory failures, 0 warnings." in out
    assert b"Traceback" not in err


def test_follow_waits_for_a_missing_file_and_stops_cleanly(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    f = Follow(log)
    assert f.proc.stderr is not None
    waiting = f.proc.stderr.readline()  # also proves it is up (signal handlers installed)
    # as tail -F: it says it cannot open the file, and keeps trying
    assert waiting.decode() == f"oomdoctor: cannot open {log}: No such file or directory; waiting for it to appear\n"
    log.write_bytes(b"INFO hello\n")
    time.sleep(0.5)
    code, out, err = f.stop(signal.SIGTERM)
    assert code == 143
    assert err == b""
    assert out.endswith(b"oomdoctor: no out-of-memory failure found.\n")


def test_follow_a_directory_is_an_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "-F", str(tmp_path)], capture_output=True, env=ENV, timeout=30
    )
    assert proc.returncode == 2
    assert proc.stderr.decode() == f"oomdoctor: error: {tmp_path}: is a directory\n"


def test_follow_with_other_files_is_a_usage_error(tmp_path: Path) -> None:
    # each file is its own run: the others were silently left unread before
    other = tmp_path / "other.log"
    other.write_text("hello\n")
    proc = subprocess.run(
        [sys.executable, "-m", "oomdoctor", "-F", str(tmp_path / "a.log"), str(other)],
        capture_output=True, env=ENV, timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stderr.decode() == (
        f"oomdoctor: error: --follow follows one file; {other} would not be read: run one oomdoctor --follow per file\n"
    )


def test_follow_jsonl_streams_each_finding_when_final(tmp_path: Path) -> None:
    import json

    log = tmp_path / "server.log"
    log.write_bytes(KV_LOG)
    f = Follow(log, "-f", "jsonl")
    f.wait_for(b"\n")  # the finding's record, while the file is still being followed
    first = json.loads(f.out.splitlines()[0])
    assert first["type"] == "finding" and first["title"].startswith("KV cache cannot hold one request")
    code, out, err = f.stop(signal.SIGINT)
    assert code == 130 and err == b""
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["type"] for r in records] == ["finding", "summary"]
    assert records[1]["summary"] == {"errors": 1, "warnings": 0, "cut_lines": 0}


def test_follow_json_writes_the_report_so_far_on_each_final_finding(tmp_path: Path) -> None:
    import json

    log = tmp_path / "server.log"
    log.write_bytes(KV_LOG)
    f = Follow(log, "-f", "json")
    f.wait_for(b"\n}\n")  # one whole document while following: jq reads it at once
    assert json.loads(f.out)["summary"] == {"errors": 1, "warnings": 0, "cut_lines": 0}
    code, out, err = f.stop(signal.SIGINT)
    assert code == 130 and err == b""
    docs = list(json.JSONDecoder().raw_decode(out.decode(), i)[0] for i in _starts(out.decode()))
    assert len(docs) == 2  # the one per change, then the final report
    assert docs[-1]["summary"] == {"errors": 1, "warnings": 0, "cut_lines": 0}
    assert docs[0]["findings"][0]["title"] == docs[-1]["findings"][0]["title"]


def _starts(text: str) -> list[int]:
    """Where each top-level JSON document of ``render_json``'s output begins."""
    return [0] + [i + 2 for i in range(len(text) - 2) if text[i : i + 3] == "}\n{"]
