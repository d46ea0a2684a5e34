"""Fleet mode under load: 1,000 streams of mixed fixture logs into one ``oomdoctor serve``.

Starts the real server (``python -m oomdoctor serve``) on 127.0.0.1 with its Alertmanager sink
pointed at a stand-in Alertmanager in this process (it records when each alert arrives), then
plays shippers: ``--nodes`` shippers, each holding ``--streams / --nodes`` streams (containers on
its node), post NDJSON batches of ``--batch`` records (Fluent Bit's ``json_lines``), as fast as
the server answers, from ``--clients`` threads (a 429 is retried after its Retry-After).

Each stream is one fixture log (``fixtures/*/*.log``, taken in turn: failures of every engine
and healthy logs) inside ``--lines`` lines of healthy vLLM serving traffic: traffic, the fixture,
traffic. Measured:

* sustained lines/s and batches/s (all lines sent / wall time from first to last answer);
* the server's peak RSS (VmHWM) and RSS per stream held;
* OOM-line-to-alert latency: from the moment the batch holding a failure's last line was sent
  to the alert's arrival at the stand-in Alertmanager (p50, p99, max), for every stream whose
  fixture ends in an error finding; and whether every such stream alerted exactly once.

    python bench/fleet.py [--streams 1000] [--lines 300] [--nodes 100] [--batch 500] [--clients 4] [--rate 0]

``--rate N`` paces the shippers at N lines/s in all (the latency of an alert at a load the replica
sustains, rather than at saturation, where it includes the wait for a CPU).

Linux only (RSS from /proc). Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token"
TRAFFIC = [
    'INFO:     10.0.{a}.{b}:5{c}21 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "INFO 06-01 12:{m:02d}:{s:02d} [loggers.py:118] Engine 000: Avg prompt throughput: {a}.0 tokens/s, "
    "Avg generation throughput: {b}.1 tokens/s, Running: {c} reqs, Waiting: 0 reqs, GPU KV cache usage: 3.{a}%, "
    "Prefix cache hit rate: 0.0%",
    "INFO 06-01 12:{m:02d}:{s:02d} [logger.py:43] Received request chatcmpl-{a}{b}{c}: prompt: '<|user|>hello', "
    "params: SamplingParams(n=1, temperature=0.7, max_tokens={b})",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def traffic(i: int, n: int) -> list[str]:
    return [TRAFFIC[(i + k) % 3].format(a=(i + k) % 97, b=k % 89, c=k % 7, m=k // 60 % 60, s=k % 60) for k in range(n)]


def fixture_logs() -> list[tuple[str, list[str]]]:
    """(name, lines) of every UTF-8 fixture log."""
    out = []
    for path in sorted((ROOT / "fixtures").glob("*/*.log")):
        try:
            out.append((path.name, path.read_text("utf-8").splitlines()))
        except UnicodeDecodeError:
            continue
    return out


def fails(lines: list[str]) -> bool:
    """Whether the CLI finds an error in these lines (a stream's own: a bare "Killed" pasted alone
    is a failure, the same line amid serving traffic is not)."""
    from oomdoctor import diagnose

    return any(f.severity == "error" for f in diagnose(lines).findings)


class StandInAlertmanager:
    """Records the first arrival time of each stream's firing alert (and how many distinct)."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.alerts: dict[str, set[str]] = {}
        first, alerts = self.first, self.alerts
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                now = time.monotonic()
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                with lock:
                    for a in body:
                        stream = a["labels"].get("stream", "")
                        first.setdefault(stream, now)
                        alerts.setdefault(stream, set()).add(json.dumps(a["labels"], sort_keys=True))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes."""
    got = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            k, v = line.split(":")
            got[k] = int(v.split()[0]) * 1024
    return got["VmRSS"], got["VmHWM"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--lines", type=int, default=300, help="traffic lines per stream (around its fixture)")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--batch", type=int, default=500, help="records per batch")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--quiet-seconds", type=float, default=0.5)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="lines/s to send at, all clients together (0: as fast as the server answers)")
    args = ap.parse_args()

    fixtures = fixture_logs()
    am = StandInAlertmanager()
    port = free_port()
    env = {
        **os.environ, "OOMDOCTOR_API_TOKEN": TOKEN, "OOMDOCTOR_ALERTMANAGER_URL": f"http://127.0.0.1:{am.port}",
        "OOMDOCTOR_FLEET_QUIET_SECONDS": str(args.quiet_seconds), "OOMDOCTOR_MAX_BODY": "16MiB",
        "PYTHONPATH": str(ROOT),
    }
    server = subprocess.Popen([sys.executable, "-m", "oomdoctor", "serve", "--port", str(port), "--log-level", "warning"],
                              env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("server did not start")
            time.sleep(0.1)
        base_rss, _hwm = rss(server.pid)

        # the streams: traffic, a fixture, traffic; the failing ones remembered
        per_node = max(1, args.streams // args.nodes)
        streams: list[tuple[str, str, list[str], bool]] = []  # node, pod, lines, fails
        for i in range(args.streams):
            name, lines = fixtures[i % len(fixtures)]
            half = args.lines // 2
            whole = traffic(i, half) + lines + traffic(i + 1, args.lines - half)
            streams.append((f"gpu-{i // per_node:04d}", f"pod-{i:05d}-{name.removesuffix('.log')}", whole, fails(whole)))
        fail_line = {pod: half + len(fixtures[i % len(fixtures)][1]) - 1
                     for i, (_n, pod, _l, failing) in enumerate(streams) if failing}

        # each node's shipper: its streams' lines interleaved, cut into batches (pre-encoded)
        by_node: list[list[tuple[bytes, list[str]]]] = []  # per node: body, pods whose failure's last line it holds
        for n0 in range(0, len(streams), per_node):
            batches: list[tuple[bytes, list[str]]] = []
            by_node.append(batches)
            node_streams = streams[n0:n0 + per_node]
            records: list[tuple[str, int, bytes]] = []
            for node, pod, lines, _f in node_streams:
                meta = {"kubernetes": {"host": node, "pod_name": pod, "container_name": "engine"}}
                records += [(pod, k, json.dumps({"log": ln, **meta}).encode()) for k, ln in enumerate(lines)]
            records.sort(key=lambda r: r[1])  # interleaved as a node's containers print
            for b0 in range(0, len(records), args.batch):
                chunk = records[b0:b0 + args.batch]
                marks = [pod for pod, k, _r in chunk if fail_line.get(pod) == k]
                batches.append((b"\n".join(r for _p, _k, r in chunk), marks))
        total_lines = sum(len(s[2]) for s in streams)
        n_batches = sum(len(b) for b in by_node)
        # one client thread per group of nodes, their batches in turn: each node's order is kept
        sent_at: dict[str, float] = {}
        rejected = [0]
        lock = threading.Lock()

        def client(groups: list[list[tuple[bytes, list[str]]]]) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            headers = {"Content-Type": "application/x-ndjson", "Authorization": f"Bearer {TOKEN}"}
            rounds = max((len(g) for g in groups), default=0)
            start, sent = time.monotonic(), 0
            for r in range(rounds):
                for g in groups:
                    if r >= len(g):
                        continue
                    body, marks = g[r]
                    if args.rate:  # paced: this client's share of the rate
                        ahead = start + sent / (args.rate / args.clients) - time.monotonic()
                        if ahead > 0:
                            time.sleep(ahead)
                        sent += body.count(b"\n") + 1
                    while True:
                        t = time.monotonic()
                        conn.request("POST", "/v1/ingest", body=body, headers=headers)
                        resp = conn.getresponse()
                        resp.read()
                        if resp.status == 429:
                            with lock:
                                rejected[0] += 1
                            time.sleep(float(resp.getheader("Retry-After", "1")))
                            continue
                        if resp.status != 200:
                            raise SystemExit(f"ingest answered {resp.status}")
                        break
                    with lock:
                        for pod in marks:
                            sent_at[pod] = t

        groups = [by_node[k::args.clients] for k in range(args.clients)]
        threads = [threading.Thread(target=client, args=(g,)) for g in groups]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.monotonic() - t0
        rss_now, _ = rss(server.pid)

        # every failing stream's alert, waited for (bounded)
        failing = {f"{node}/{pod}/engine/-" for node, pod, _l, failed in streams if failed}
        deadline = time.monotonic() + 120
        while not failing <= set(am.first) and time.monotonic() < deadline:
            time.sleep(0.05)
        _rss, hwm = rss(server.pid)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/metrics")
        for line in c.getresponse().read().decode().splitlines():
            if line.startswith(("oomdoctor_sink_deliveries_total", "oomdoctor_ingest_analysis_seconds_sum",
                                "oomdoctor_ingest_analysis_seconds_count")):
                print(line, file=sys.stderr)
        lat = sorted(am.first[k] - sent_at[k.split("/")[1]] for k in failing if k in am.first)
        once = sum(len(am.alerts.get(k, ())) == 1 for k in failing)
        for k in sorted(failing):
            if len(am.alerts.get(k, ())) != 1:
                print(f"not alerted once: {k}: {sorted(am.alerts.get(k, ()))}", file=sys.stderr)
        q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else lat * 99

        print("| streams | lines | batches | lines/s | batches/s | 429s | peak RSS | RSS per stream | "
              "alert latency p50 / p99 / max | failing streams alerted once |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        print(f"| {args.streams} | {total_lines} | {n_batches} | {total_lines / wall:,.0f} | {n_batches / wall:,.1f} | "
              f"{rejected[0]} | {hwm / 2**20:.0f} MiB | {(rss_now - base_rss) / args.streams / 1024:.0f} KiB | "
              f"{q[49]:.2f} / {q[98]:.2f} / {lat[-1]:.2f} s | {once} of {len(failing)} |")
        return 0 if once == len(failing) else 1
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    raise SystemExit(main())
