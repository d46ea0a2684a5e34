"""Load and abuse test of ``oomdoctor serve``: does any request, connection or input stall it or blow its memory?

Starts the real server (``python -m oomdoctor serve``) on 127.0.0.1 in a subprocess, runs the
scenarios below one after another while a prober asks ``GET /healthz`` every 50 ms, then stops the
server and prints one Markdown table. Everything is bounded: loopback only, a fixed number of
clients and requests per scenario, a time limit per scenario, and the server is killed at the end.

* ``light-50`` / ``light-200``: 50 and 200 concurrent clients posting a 1 MB log (healthy lines, one failure);
* ``dense-50``: 50 clients posting a 1 MB log made of trigger lines (every line a candidate);
* ``slow-2000``: 2 000 clients that connect and trickle their headers without ever finishing them;
* ``abuse``: gzip bombs, deeply nested JSON, 1 MiB headers, a 60 000-character launch argument, a
  16 000-character Slack app_mention, and Slack replays (one signed request sent 20 times).

Reported per scenario: requests, p50/p99 latency, responses by status (``conn`` = connection closed
without an answer, which is what a shed slow client gets), ``/healthz`` p99 during the scenario;
and the server's peak RSS (VmHWM) at the end. Targets (issue 16): no 5xx except 503 "busy",
``/healthz`` p99 < 0.5 s throughout, peak RSS < 512 MiB.

    python bench/server_load.py [--scale 1.0] [--scenario-seconds 60]

``--scale 0.25`` runs a quarter of the clients (for a shared or small machine). Linux only (peak
RSS from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "load-token"
SLACK_SECRET = "load-slack-secret"
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def light_log(size: int) -> bytes:
    tail = (ROOT / "fixtures/vllm/vllm-054.log").read_bytes()
    line = b"INFO 01-01 12:00:00 [engine.py:100] handled request id=%d in 12 ms\n"
    out = bytearray()
    i = 0
    while len(out) < size - len(tail):
        out += line % i
        i += 1
    return bytes(out) + tail


def dense_log(size: int) -> bytes:
    line = (
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
        b"of 79.19 GiB of which 1.00 MiB is free.\n"
    )
    return (line * (size // len(line) + 1))[:size]


class Stats:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: collections.Counter[str] = collections.Counter()

    def add(self, status: str, latency: float) -> None:
        self.statuses[status] += 1
        self.latencies.append(latency)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))]


async def http(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes = b"", timeout: float = 60.0
) -> str:
    """One request on its own connection; the status as text, or 'conn' / 'timeout'."""

    async def go() -> str:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
            writer.write(head.encode() + body)
            await writer.drain()
            line = await reader.readline()
            await reader.read()
            parts = line.split()
            return parts[1].decode() if len(parts) >= 2 else "conn"
        finally:
            writer.close()

    try:
        return await asyncio.wait_for(go(), timeout)
    except asyncio.TimeoutError:
        return "timeout"
    except (ConnectionError, OSError):
        return "conn"


async def timed(stats: Stats, coro: Awaitable[str]) -> None:
    t0 = time.perf_counter()
    status = await coro
    stats.add(status, time.perf_counter() - t0)


AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "text/plain"}


async def posting(port: int, clients: int, body: bytes, per_client: int, stats: Stats) -> None:
    async def client() -> None:
        for _ in range(per_client):
            await timed(stats, http(port, "POST", "/v1/diagnose", AUTH, body))

    await asyncio.gather(*(client() for _ in range(clients)))


async def slow_clients(port: int, clients: int, hold: float, stats: Stats) -> None:
    """Connect, send half a request line and a header byte now and then; never finish."""

    async def one() -> None:
        t0 = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
        except OSError:
            stats.add("conn-refused", time.perf_counter() - t0)
            return
        status = "held"
        try:
            writer.write(b"POST /v1/diagnose HTTP/1.1\r\nHost: x\r\n")
            end = time.monotonic() + hold
            while time.monotonic() < end:
                try:
                    data = await asyncio.wait_for(reader.read(1024), 1.0)
                    if not data:
                        status = "conn"
                        break
                    status = data.split()[1].decode() if data.startswith(b"HTTP/") else "conn"
                    break
                except asyncio.TimeoutError:
                    writer.write(b"X")
                    await writer.drain()
        except (ConnectionError, OSError):
            status = "conn"
        finally:
            writer.close()
        stats.add(status, time.perf_counter() - t0)

    await asyncio.gather(*(one() for _ in range(clients)))


def slack_headers(body: bytes, ts: str | None = None) -> dict[str, str]:
    sys.path.insert(0, str(ROOT))
    from oomdoctor.server.slack import sign

    ts = ts or str(int(time.time()))
    return {"Content-Type": "application/json", "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": sign(SLACK_SECRET, ts, body)}


def abusive_bodies() -> dict[str, bytes]:
    """Built before the scenario starts: compressing 256 MiB would stall the load generator's own loop."""
    deep = b"[" * 500_000 + b"]" * 500_000
    return {"bomb": gzip.compress(b"\0" * (256 << 20)), "deep": deep, "deep.gz": gzip.compress(deep)}


async def abuse(port: int, rounds: int, bodies: dict[str, bytes], stats: Stats) -> None:
    bomb, deep = bodies["bomb"], bodies["deep"]
    long_arg = (
        "INFO non-default args: {'model': 'm', 'served_model_name': '" + "a-" * 30_000 + "'}\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. --api-key " + "-a" * 30_000 + "\n"
    )
    mention = json.dumps({
        "type": "event_callback", "event_id": "Ev1",
        "event": {"type": "app_mention", "text": "<@U1> " + "token." * 2700, "channel": "C1", "ts": "1.0"},
    }).encode()
    jobs: list[Callable[[], Awaitable[str]]] = [
        lambda: http(port, "POST", "/v1/diagnose", {**AUTH, "Content-Type": "application/gzip"}, bomb),
        lambda: http(port, "POST", "/v1/diagnose", {**AUTH, "Content-Type": "application/json"}, deep),
        lambda: http(port, "POST", "/v1/diagnose", {**AUTH, "Content-Type": "application/json",
                                                    "Content-Encoding": "gzip"}, bodies["deep.gz"]),
        lambda: http(port, "GET", "/healthz", {"X-Big": "a" * (1 << 20)}),
        lambda: http(port, "POST", "/v1/diagnose", AUTH, long_arg.encode()),
        lambda: http(port, "POST", "/slack/events", slack_headers(mention), mention),
    ]
    for _ in range(rounds):
        await asyncio.gather(*(timed(stats, job()) for job in jobs))
    replay = json.dumps({"type": "url_verification", "challenge": "x"}).encode()
    headers = slack_headers(replay)
    await asyncio.gather(*(timed(stats, http(port, "POST", "/slack/events", headers, replay)) for _ in range(20)))


async def probe(port: int, stop: asyncio.Event, samples: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        status = await http(port, "GET", "/healthz", {}, timeout=5.0)
        samples.append(time.perf_counter() - t0 if status == "200" else 5.0)
        await asyncio.sleep(0.05)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def main_async(args: argparse.Namespace, port: int, pid: int) -> list[tuple[str, Stats, list[float]]]:
    s = args.scale
    n = lambda x: max(1, round(x * s))  # noqa: E731
    light, dense, bodies = light_log(1 << 20), dense_log(1 << 20), abusive_bodies()
    scenarios: list[tuple[str, Callable[[Stats], Awaitable[None]]]] = [
        (f"light-{n(50)}", lambda st: posting(port, n(50), light, 2, st)),
        (f"light-{n(200)}", lambda st: posting(port, n(200), light, 1, st)),
        (f"dense-{n(50)}", lambda st: posting(port, n(50), dense, 1, st)),
        (f"slow-{n(2000)}", lambda st: slow_clients(port, n(2000), min(20.0, args.scenario_seconds), st)),
        ("abuse", lambda st: abuse(port, 2, bodies, st)),
    ]
    results = []
    for name, run in scenarios:
        stats, samples, stop = Stats(), [], asyncio.Event()
        prober = asyncio.ensure_future(probe(port, stop, samples))
        try:
            await asyncio.wait_for(run(stats), args.scenario_seconds)
        except asyncio.TimeoutError:
            stats.statuses["scenario-timeout"] += 1
        stop.set()
        await prober
        results.append((name, stats, samples))
        print(f"{name}: done, peak RSS so far {peak_rss_mib(pid):.0f} MiB", file=sys.stderr)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the clients of each scenario")
    ap.add_argument("--scenario-seconds", type=float, default=60.0, help="time limit of each scenario")
    args = ap.parse_args()
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))  # the clients' sockets
    except (ImportError, ValueError, OSError):
        pass
    port = free_port()
    env = {**os.environ, "OOMDOCTOR_API_TOKEN": TOKEN, "OOMDOCTOR_SLACK_SIGNING_SECRET": SLACK_SECRET,
           "OOMDOCTOR_MAX_BODY": str(4 << 20), "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "oomdoctor", "serve", "--port", str(port), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection((HOST, port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.1)
        t0 = time.monotonic()
        results = asyncio.run(main_async(args, port, server.pid))
        rss = peak_rss_mib(server.pid)
        wall = time.monotonic() - t0
    finally:
        server.terminate()
        try:
            _, err = server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    tracebacks = err.decode(errors="replace").count("Traceback")
    print(f"\nscale {args.scale:g}, {os.cpu_count()} CPUs, {wall:.0f} s; server peak RSS {rss:.0f} MiB; "
          f"tracebacks in the server's log: {tracebacks}\n")
    print("| scenario | requests | p50 s | p99 s | responses by status | /healthz p99 s |")
    print("|---|---:|---:|---:|---|---:|")
    worst = 0.0
    bad: list[str] = []
    for name, st, samples in results:
        by = ", ".join(f"{k}: {v}" for k, v in sorted(st.statuses.items()))
        h99 = pct(samples, 0.99)
        worst = max(worst, h99)
        bad += [f"{name} {k}" for k in st.statuses if k.startswith("5") and k != "503"]
        print(f"| {name} | {len(st.latencies)} | {statistics.median(st.latencies):.3f} | {pct(st.latencies, 0.99):.3f} "
              f"| {by} | {h99:.3f} |")
    print()
    print(f"targets: no 5xx but 503 busy: {'yes' if not bad else 'NO ' + str(bad)}; "
          f"/healthz p99 < 0.5 s: {'yes' if worst < 0.5 else 'NO'} ({worst:.3f}); "
          f"peak RSS < 512 MiB: {'yes' if rss < 512 else 'NO'} ({rss:.0f})")


if __name__ == "__main__":
    main()
