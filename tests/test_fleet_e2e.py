"""Fleet mode end to end with the real systems (issue 35): syslog-ng tails fixture logs written
line by line and ships them to ``oomdoctor serve`` (a subprocess); Prometheus scrapes
``/metrics``; Alertmanager receives the alerts and routes them to a webhook receiver of this
test. The server is killed (SIGKILL) and restarted while a stream is written, then Alertmanager
is: no finding is lost or told twice.

Needs ``syslog-ng`` (with ``syslog-ng-mod-http``), ``prometheus`` and ``prometheus-alertmanager``
(Debian packages; ``.ci/run`` installs them when it runs as root) and is skipped without them.
Nothing is timed: every wait polls with an upper bound against a hang (120 s), never asserted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SYSLOG_NG = shutil.which("syslog-ng")
PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
HTTP_MODULE = any(Path(p).is_dir() and any(Path(p).rglob("libhttp.so")) for p in ("/usr/lib/syslog-ng", "/usr/lib64/syslog-ng"))

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not (SYSLOG_NG and HTTP_MODULE and PROMETHEUS and ALERTMANAGER),
        reason="end-to-end fleet test needs syslog-ng with its http module, prometheus and alertmanager "
        "(apt-get install syslog-ng-core syslog-ng-mod-http prometheus prometheus-alertmanager)",
    ),
]
pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

TOKEN = "e2e-token"
#: upper bound of every wait, against a hang only (never the thing asserted)
HANG = 120.0
#: three streams, one fixture each (each ends in one error finding)
FIXTURES = {"a.log": "vllm/vllm-054.log", "b.log": "pytorch/synthetic-memory-summary.log", "c.log": "jax/other-038.log"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, probe: Callable[[], Any], procs: list[subprocess.Popen[bytes]] | None = None) -> Any:
    """Poll ``probe`` until it returns something truthy (an exception counts as not yet)."""
    deadline = time.monotonic() + HANG
    last: object = None
    while True:
        try:
            got = probe()
            if got:
                return got
            last = got
        except Exception as exc:  # not up yet
            last = exc
        for p in procs or []:
            assert p.poll() is None, f"{p.args[0]} exited with {p.returncode} while waiting for {what}"
        assert time.monotonic() < deadline, f"gave up waiting for {what} (last: {last!r})"
        time.sleep(0.1)


def get_json(url: str, token: str | None = None) -> Any:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


class Receiver:
    """Alertmanager's webhook receiver: records every notification."""

    def __init__(self) -> None:
        self.notifications: list[dict[str, Any]] = []
        received = self.notifications

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def firing(self) -> dict[str, dict[str, str]]:
        """Distinct alerts Alertmanager routed as firing, by their label set."""
        out = {}
        for n in list(self.notifications):
            for a in n.get("alerts", []):
                if a.get("status") == "firing":
                    out[json.dumps(a["labels"], sort_keys=True)] = a["labels"]
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Stack:
    """The processes, each restartable, all killed at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.receiver = Receiver()
        self.port = free_port()
        self.am_port = free_port()
        self.prom_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.am_url = f"http://127.0.0.1:{self.am_port}"
        self.prom_url = f"http://127.0.0.1:{self.prom_port}"

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        log = open(self.tmp / f"{name}.out", "ab")  # noqa: SIM115 (closed with the process)
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd or self.tmp,
            start_new_session=True,
        )
        log.close()

    def kill(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(HANG)

    def terminate(self, name: str) -> int:
        """SIGTERM (as Kubernetes stops a pod) and wait for the exit; its status."""
        p = self.procs.pop(name)
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(HANG)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(HANG)
            raise AssertionError(f"{name} did not stop on SIGTERM") from None

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)
        self.receiver.close()

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return list(self.procs.values())

    def output(self, name: str) -> str:
        path = self.tmp / f"{name}.out"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    # -- the systems ---------------------------------------------------------------------------

    def start_alertmanager(self) -> None:
        cfg = self.tmp / "alertmanager.yml"
        cfg.write_text(
            "route:\n  receiver: test\n  group_by: [alertname, stream, kind]\n  group_wait: 0s\n"
            "  group_interval: 1s\n  repeat_interval: 1h\n"
            f"receivers:\n- name: test\n  webhook_configs:\n  - url: http://127.0.0.1:{self.receiver.port}/\n"
            "    send_resolved: true\n"
        )
        (self.tmp / "am-data").mkdir(exist_ok=True)
        self._start("alertmanager", [
            str(ALERTMANAGER), f"--config.file={cfg}", f"--storage.path={self.tmp / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{self.am_port}", "--cluster.listen-address=",
        ])
        wait_for("alertmanager ready", lambda: urllib.request.urlopen(self.am_url + "/-/ready", timeout=5).status == 200,
                 self.alive())

    def start_server(self) -> None:
        env = {
            "OOMDOCTOR_API_TOKEN": TOKEN, "OOMDOCTOR_ALERTMANAGER_URL": self.am_url,
            "OOMDOCTOR_FLEET_STATE_FILE": str(self.tmp / "fleet-state.json"),
            "OOMDOCTOR_FLEET_QUIET_SECONDS": "2", "OOMDOCTOR_FLEET_RESEND_SECONDS": "1",
            "OOMDOCTOR_FLEET_RETRY_MIN": "0.2", "OOMDOCTOR_FLEET_RETRY_MAX": "1",
            "OOMDOCTOR_CACHE_DIR": str(self.tmp / "cache"), "PYTHONPATH": str(ROOT),
        }
        self._start("server", [sys.executable, "-m", "oomdoctor", "serve", "--port", str(self.port),
                               "--log-level", "warning"], env, cwd=ROOT)
        wait_for("oomdoctor serve up", lambda: get_json(self.url + "/healthz")["status"] == "ok", self.alive())

    def start_prometheus(self) -> None:
        cfg = self.tmp / "prometheus.yml"
        cfg.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n- job_name: oomdoctor\n  static_configs:\n  - targets: ['127.0.0.1:{self.port}']\n"
        )
        self._start("prometheus", [
            str(PROMETHEUS), f"--config.file={cfg}", f"--storage.tsdb.path={self.tmp / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{self.prom_port}",
        ])
        wait_for("prometheus ready", lambda: urllib.request.urlopen(self.prom_url + "/-/ready", timeout=5).status == 200,
                 self.alive())

    def start_syslog_ng(self) -> None:
        sources = "".join(
            f'source s_{i} {{ file("{self.tmp / name}" follow-freq(0.1) flags(no-parse)); }};\n'
            for i, name in enumerate(FIXTURES)
        )
        logs = "".join(f"log {{ source(s_{i}); destination(d_oomdoctor); }};\n" for i in range(len(FIXTURES)))
        cfg = self.tmp / "syslog-ng.conf"
        cfg.write_text(
            "@version: 3.38\n"
            "options { keep-hostname(yes); stats-freq(0); };\n"
            + sources
            + "destination d_oomdoctor {\n"
            f'  http(url("{self.url}/v1/ingest") method("POST")\n'
            f'    headers("Content-Type: application/x-ndjson", "Authorization: Bearer {TOKEN}")\n'
            '    body("$(format-json --scope none MESSAGE=$MESSAGE HOST=$HOST FILE_NAME=$FILE_NAME)")\n'
            '    batch-lines(50) batch-timeout(100) time-reopen(1) retries(1000)\n'
            "  );\n};\n"
            + logs
        )
        for name in FIXTURES:
            (self.tmp / name).touch()
        self._start("syslog-ng", [
            str(SYSLOG_NG), "-F", "-e", "--no-caps", f"--cfgfile={cfg}", f"--persist-file={self.tmp / 'sng.persist'}",
            f"--pidfile={self.tmp / 'sng.pid'}", f"--control={self.tmp / 'sng.ctl'}",
        ])
        wait_for("syslog-ng started", lambda: (self.tmp / "sng.pid").exists(), self.alive())

    # -- what the test writes and reads --------------------------------------------------------

    def write_lines(self, name: str, lines: slice = slice(None)) -> int:
        """Append the fixture's ``lines`` to the stream's file line by line, as a program prints;
        returns how many."""
        data = (ROOT / "fixtures" / FIXTURES[name]).read_bytes().splitlines(keepends=True)[lines]
        with open(self.tmp / name, "ab", buffering=0) as fh:
            for line in data:
                fh.write(line)
        return len(data)

    def streams(self) -> dict[str, dict[str, Any]]:
        return {s["key"].rsplit("/", 1)[-1]: s for s in get_json(self.url + "/v1/streams", TOKEN)["streams"]}

    def findings(self, name: str) -> list[dict[str, Any]]:
        key = next(k for k in (s["key"] for s in get_json(self.url + "/v1/streams", TOKEN)["streams"])
                   if k.endswith("/" + name))
        return list(get_json(self.url + "/v1/streams/" + urllib.parse.quote(key, safe="") + "/findings", TOKEN)["findings"])

    def prom(self, query: str) -> list[Any]:
        got = get_json(self.prom_url + "/api/v1/query?query=" + urllib.parse.quote(query))
        return list(got["data"]["result"])


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        yield s
    finally:
        s.close()


def expected_alert(name: str) -> tuple[str, str, str]:
    """(kind, cause, product) of the fixture's one error finding, as the CLI diagnoses it."""
    from oomdoctor import diagnose

    report = diagnose((ROOT / "fixtures" / FIXTURES[name]).read_bytes())
    (f,) = [f for f in report.findings if f.severity == "error"]
    return f.kind, f.cause.id if f.cause else "unknown", f.product or f.engine


def test_syslog_ng_to_oomdoctor_to_alertmanager_and_prometheus_through_restarts(stack: Stack) -> None:
    try:
        _scenario(stack)
    except AssertionError:
        for name in ("server", "syslog-ng", "alertmanager", "prometheus"):
            print(f"--- {name} ---\n{stack.output(name)}")
        raise


def _scenario(stack: Stack) -> None:
    stack.start_alertmanager()
    stack.start_server()
    stack.start_prometheus()
    stack.start_syslog_ng()
    want = {name: expected_alert(name) for name in FIXTURES}

    def found(name: str) -> Callable[[], bool]:
        return lambda: len(stack.findings(name)) >= 1

    def routed(name: str) -> Callable[[], bool]:
        return lambda: any(lab.get("file", "").endswith("/" + name) for lab in stack.receiver.firing().values())

    # 1. a stream with a failure: a finding, an alert routed by Alertmanager, a metric scraped
    stack.write_lines("a.log")
    wait_for("a.log's alert at the receiver", routed("a.log"), stack.alive())
    wait_for("prometheus scraped the finding",
             lambda: any(float(r["value"][1]) == 1 for r in stack.prom(
                 f'oomdoctor_findings_total{{kind="{want["a.log"][0]}",severity="error"}}')), stack.alive())

    # 2. the server stopped (SIGTERM, as Kubernetes does) in the middle of a failure (its error
    # line received, its memory summary not yet), the rest written while it is down, restarted
    sent = stack.write_lines("b.log", slice(0, 6))
    wait_for("b.log's first lines at the server", lambda: stack.streams().get("b.log", {}).get("lines") == sent,
             stack.alive())
    stack.terminate("server")  # (uvicorn exits with the signal's status after a graceful shutdown)
    state = json.loads((stack.tmp / "fleet-state.json").read_text())
    assert sorted(e["key"].rsplit("/", 1)[-1] for e in state["streams"] if e["tail"]) == ["a.log", "b.log"]  # kept
    stack.write_lines("b.log", slice(6, None))
    stack.start_server()
    wait_for("b.log's finding after the restart", found("b.log"), stack.alive())
    wait_for("b.log's alert at the receiver", routed("b.log"), stack.alive())

    # 3. the server killed (SIGKILL) and Alertmanager too; a stream written while both are down;
    # the server restarted first (it finds the failure, its sink retries), then Alertmanager
    stack.kill("server")
    stack.kill("alertmanager")
    stack.write_lines("c.log")
    stack.start_server()
    wait_for("c.log's finding", found("c.log"), stack.alive())
    stack.start_alertmanager()
    wait_for("c.log's alert at the receiver", routed("c.log"), stack.alive())
    wait_for("three active alerts at Alertmanager",
             lambda: len([a for a in get_json(stack.am_url + "/api/v2/alerts") if a["status"]["state"] == "active"]) == 3,
             stack.alive())
    wait_for("prometheus sees three active alerts",
             lambda: any(float(r["value"][1]) == 3 for r in stack.prom("oomdoctor_alerts_active")), stack.alive())

    # nothing lost, nothing told twice: one finding per stream, one alert each, with the right labels
    for name in FIXTURES:
        (f,) = stack.findings(name)
        assert (f["labels"]["kind"], f["labels"]["cause"], f["labels"]["product"]) == want[name], name
        assert f["active"] is True and f["finding"]["severity"] == "error"
    alerts = get_json(stack.am_url + "/api/v2/alerts")
    by_file = {a["labels"]["file"].rsplit("/", 1)[-1]: a for a in alerts}
    assert sorted(by_file) == sorted(FIXTURES)
    for name, a in by_file.items():
        lab = a["labels"]
        assert (lab["alertname"], lab["kind"], lab["cause"], lab["product"], lab["severity"]) == (
            "OOMDoctorFinding", *want[name], "error")
        assert lab["node"] and a["annotations"]["summary"]
    routed_alerts = stack.receiver.firing()
    assert sorted(lab["file"].rsplit("/", 1)[-1] for lab in routed_alerts.values()) == sorted(FIXTURES)
