"""Node mode: ``oomdoctor --follow GLOB`` follows every matching file (CRI, docker json-file or
plain lines; new files, rotation, truncation) as streams of the fleet, posting to its sinks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from oomdoctor.fleet.config import FleetConfig
from oomdoctor.fleet.node import GlobFollower, _Lines, stream_of
from oomdoctor.fleet.streams import StreamTable

ROOT = Path(__file__).resolve().parent.parent
OOM = (ROOT / "fixtures/vllm/vllm-054.log").read_bytes()
POD_LOG = "vllm-0_serving_engine-" + "ab" * 32 + ".log"


def cri(text: bytes, split_long: bool = False) -> bytes:
    """``text`` as the kubelet writes it (a long line in two partial pieces when asked)."""
    out = []
    for line in text.splitlines():
        if split_long and len(line) > 100:
            out.append(b"2026-01-01T00:00:00.000000001Z stderr P " + line[:100])
            line = line[100:]
        out.append(b"2026-01-01T00:00:00.000000001Z stderr F " + line)
    return b"\n".join(out) + b"\n"


def test_lines_of_each_format_give_their_message() -> None:
    lines = _Lines()
    assert lines.message(b"2026-01-01T00:00:00Z stdout F hello") == b"hello"
    assert lines.message(b"2026-01-01T00:00:00Z stderr P abc") is None
    assert lines.message(b"2026-01-01T00:00:00Z stderr F def") == b"abcdef"
    assert lines.message(b'{"log":"from docker\\n","stream":"stderr","time":"t"}') == b"from docker"
    assert lines.message(b"a plain line") == b"a plain line"


def test_a_kubernetes_log_name_gives_pod_and_container() -> None:
    sid = stream_of("/var/log/containers/" + POD_LOG, "gpu-7")
    assert dict(sid.labels) == {"node": "gpu-7", "pod": "vllm-0", "container": "engine",
                                "file": "/var/log/containers/" + POD_LOG}
    assert dict(stream_of("/logs/job.log", "gpu-7").labels) == {"node": "gpu-7", "file": "/logs/job.log"}


def kinds(table: StreamTable, key_end: str) -> list[str]:
    table.flush_all()
    (key,) = [s["key"] for s in table.streams() if s["key"].endswith(key_end)]
    return [f["labels"]["kind"] for f in table.findings(key) or []]


def test_new_files_rotation_and_truncation(tmp_path: Path) -> None:
    table = StreamTable(FleetConfig())
    follower = GlobFollower(str(tmp_path / "*.log"), table, "gpu-1")
    pod = tmp_path / POD_LOG
    half = len(OOM.splitlines()) // 2
    head, tail = b"\n".join(OOM.splitlines()[:half]) + b"\n", b"\n".join(OOM.splitlines()[half:]) + b"\n"
    pod.write_bytes(cri(head, split_long=True))
    follower.poll()
    # rotation: the file renamed away, the rest of the failure in a new file at the same path
    pod.rename(tmp_path / (POD_LOG + ".1"))
    pod.write_bytes(cri(tail, split_long=True))
    while follower.poll():
        pass
    follower.poll()
    assert kinds(table, POD_LOG) == ["vllm.kv-cache.max-len-exceeds"]
    # a new file is picked up; truncated, it is read again from its start
    other = tmp_path / "train.log"
    other.write_bytes(b"starting\n" * 50)
    follower.poll()
    other.write_bytes(b"")
    follower.poll()
    other.write_bytes((ROOT / "fixtures/pytorch/synthetic-memory-summary.log").read_bytes())
    while follower.poll():
        pass
    assert kinds(table, "/train.log") == ["torch.cuda-oom"]
    follower.close()


class Hook:
    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                got.append(json.loads(self.rfile.read(int(self.headers.get("content-length", 0)))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def test_follow_glob_posts_to_the_webhook_and_prints_each_event(tmp_path: Path) -> None:
    hook = Hook()
    env = {**os.environ, "OOMDOCTOR_WEBHOOK_URL": hook.url, "NODE_NAME": "gpu-3", "PYTHONPATH": str(ROOT),
           "OOMDOCTOR_FLEET_QUIET_SECONDS": "0.2"}
    proc = subprocess.Popen([sys.executable, "-m", "oomdoctor", "--follow", str(tmp_path / "*.log"), "-f", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    try:
        (tmp_path / POD_LOG).write_bytes(cri(OOM))
        deadline = time.monotonic() + 60  # against a hang only
        while not hook.got:
            assert time.monotonic() < deadline and proc.poll() is None, "no webhook post"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)
        hook.server.shutdown()
    (posted,) = hook.got
    assert (posted["status"], posted["labels"]["kind"], posted["labels"]["node"], posted["labels"]["pod"]) == (
        "firing", "vllm.kv-cache.max-len-exceeds", "gpu-3", "vllm-0")
    assert posted["annotations"]["command"] == "--max-model-len 81392"
    (printed,) = [json.loads(line) for line in out.decode().splitlines()]
    assert printed == posted
    assert proc.returncode == 143
