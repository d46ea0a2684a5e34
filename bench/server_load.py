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

Lockout scenarios (issue 36), each while one authorized client posts a small log in a loop, its
throughput compared with the same client's on the idle server (``idle``):

* ``slack-bodies-64``: 64 clients sending 4 MiB bodies to ``/slack/commands`` without a signature, and
  64 with a fresh timestamp and a bogus one, over and over;
* ``trickle-1010``: 1 010 connections that send a forged Slack request's headers and ``text=a``, then
  a byte now and then of a body that never ends;
* ``repeat-4mib``: 2 authorized clients posting 4 MiB of ``CUDA out of memory`` (a run of one line),
  and ``limit``: one posting 4 MiB of distinct candidate lines, which the time limit must stop
  within a tenth of itself (the server runs with ``--limit`` seconds, default 5);
* ``combined``: the lockout attacks at once (Slack bodies, the trickling connections, bogus-token
  4 MiB posts to ``/v1/diagnose``); the server's RSS sampled every 0.1 s during it, and again
  35 s after it, once what it left has met the body timeout (back near the baseline?).

Each lockout row also gives the server's CPU share and the bytes per second the attackers got
through: on a small machine a refused client's upload still costs the host its CPU.

Reported per scenario: requests, p50/p99 latency, responses by status (``conn`` = connection closed
without an answer, which is what a shed slow client gets), ``/healthz`` p99 during the scenario;
and the server's peak RSS (VmHWM) at the end. Targets (issue 16): no 5xx except 503 "busy",
``/healthz`` p99 < 0.5 s throughout, peak RSS < 512 MiB.

    python bench/server_load.py [--scale 1.0] [--scenario-seconds 60] [--only idle,trickle-1010,...]

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


def forged_slack_head(length: int, signed: bool) -> bytes:
    """A /slack/commands request's headers: no signature, or a fresh timestamp and a bogus one."""
    head = (f"POST /slack/commands HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {length}\r\n")
    if signed:
        head += f"X-Slack-Request-Timestamp: {int(time.time())}\r\nX-Slack-Signature: v0={'0' * 64}\r\n"
    return (head + "\r\n").encode()


async def send_raw(head: bytes, body: bytes, stats: Stats, until: float, hold: bool = False) -> None:
    """Send ``head`` and ``body`` in 64 KiB pieces, stopping when the server answers or closes;
    ``hold``: all but the body's last byte, then wait (a client holding its upload open)."""
    t0 = time.perf_counter()
    status = "conn"
    left = lambda: max(0.1, until - time.monotonic())  # noqa: E731
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port_of[0]), left())
    except (OSError, asyncio.TimeoutError):
        stats.add("conn-refused", time.perf_counter() - t0)
        return
    try:
        writer.write(head)
        sent = memoryview(body)[: len(body) - 1 if hold else len(body)]  # (slices without copies)
        for i in range(0, len(sent), 64 << 10):
            writer.write(sent[i : i + (64 << 10)])
            await asyncio.wait_for(writer.drain(), left())
            attack_bytes[0] += min(64 << 10, len(sent) - i)
        line = await asyncio.wait_for(reader.readline(), left())
        parts = line.split()
        status = parts[1].decode() if len(parts) >= 2 else "conn"
    except asyncio.TimeoutError:
        status = "held"
    except (ConnectionError, OSError):
        status = "conn"
    finally:
        writer.close()
    stats.add(status, time.perf_counter() - t0)


port_of = [0]
attack_bytes = [0]  # bytes the attackers' uploads got through (what a refused client still costs the host)
#: seconds a refused attacker waits before it comes back (the Retry-After the server gives): without
#: a pause each one is a loopback bandwidth flood that costs the host's CPUs, not a lockout
RETRY = 2.0


async def slack_bodies(clients: int, body: bytes, until: float, stats: Stats) -> None:
    """``clients`` unsigned and ``clients`` bogus-signed Slack uploads of ``body``, each held open
    before its last byte; refused, the client comes back :data:`RETRY` seconds later."""
    async def one(signed: bool) -> None:
        while time.monotonic() < until:
            await send_raw(forged_slack_head(len(body), signed), body, stats, until, hold=True)
            await asyncio.sleep(RETRY)

    await asyncio.gather(*(one(i % 2 == 1) for i in range(2 * clients)))


async def bogus_token_posts(clients: int, body: bytes, until: float, stats: Stats) -> None:
    """Uploads to /v1/diagnose with a wrong token, held open before the last byte."""
    head = (f"POST /v1/diagnose HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer wrong\r\n"
            f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n").encode()

    async def one() -> None:
        while time.monotonic() < until:
            await send_raw(head, body, stats, until, hold=True)
            await asyncio.sleep(RETRY)

    await asyncio.gather(*(one() for _ in range(clients)))


async def trickling(clients: int, until: float, stats: Stats) -> None:
    """Forged Slack requests whose body never ends: ``text=a`` then a byte every second."""
    async def one() -> None:
        t0 = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection(HOST, port_of[0])
        except OSError:
            stats.add("conn-refused", time.perf_counter() - t0)
            return
        status = "held"
        try:
            writer.write(forged_slack_head(100_000, True) + b"text=a")
            while time.monotonic() < until:
                try:
                    data = await asyncio.wait_for(reader.read(1024), 1.0)
                    status = data.split()[1].decode() if data.startswith(b"HTTP/") else "conn"
                    break
                except asyncio.TimeoutError:
                    writer.write(b"a")
                    await writer.drain()
        except (ConnectionError, OSError):
            status = "conn"
        finally:
            writer.close()
        stats.add(status, time.perf_counter() - t0)

    await asyncio.gather(*(one() for _ in range(clients)))


async def authorized(port: int, until: float, body: bytes, stats: Stats) -> None:
    """One authorized client posting ``body`` in a loop: its throughput is the measure."""
    while time.monotonic() < until:
        await timed(stats, http(port, "POST", "/v1/diagnose", AUTH, body, timeout=30.0))


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int, field: str = "VmRSS:") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


async def sample_rss(pid: int, stop: asyncio.Event, out: list[float]) -> None:
    while not stop.is_set():
        out.append(rss_mib(pid))
        await asyncio.sleep(0.1)


def repeat_body(line: bytes, size: int = 4 << 20) -> bytes:
    return line * (size // len(line))


def distinct_body(size: int = 4 << 20) -> bytes:
    out = bytearray()
    i = 0
    while len(out) < size:
        out += b"torch.OutOfMemoryError: CUDA out of memory on request %d\n" % i
        i += 1
    return bytes(out)


async def probe(port: int, stop: asyncio.Event, samples: list[float], failed: Stats | None = None) -> None:
    """``GET /healthz`` every 50 ms: its latency, or 5 s for an answer that is not 200 (counted in ``failed``)."""
    while not stop.is_set():
        t0 = time.perf_counter()
        status = await http(port, "GET", "/healthz", {}, timeout=5.0)
        samples.append(time.perf_counter() - t0 if status == "200" else 5.0)
        if failed is not None and status != "200":
            failed.add(status, 5.0)
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
    if args.only and "load" not in args.only:
        scenarios = []
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


class Lockout:
    """One lockout scenario's measures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.attack, self.auth, self.heavy, self.health_failed = Stats(), Stats(), Stats(), Stats()
        self.health: list[float] = []
        self.rss: list[float] = []
        self.seconds = 0.0
        self.server_cpu = 0.0
        self.attack_mib = 0.0


async def lockout(args: argparse.Namespace, port: int, pid: int) -> tuple[list[Lockout], float, float]:
    """The lockout scenarios; returns them, the RSS before them and some seconds after the last."""
    s = args.scale
    n = lambda x: max(1, round(x * s))  # noqa: E731
    port_of[0] = port
    big = b"a" * ((4 << 20) - 1024)
    repeated = repeat_body(b"CUDA out of memory\n", (4 << 20) - 1024)
    distinct = distinct_body((4 << 20) - 1024)
    secs = args.lockout_seconds

    def attacks(name: str, until: float, lo: Lockout) -> list[Awaitable[None]]:
        if name == "slack-bodies-64":
            return [slack_bodies(n(64), big, until, lo.attack)]
        if name == "trickle-1010":
            return [trickling(n(1010), until, lo.attack)]
        if name == "repeat-4mib":
            return [authorized(port, until, repeated, lo.heavy), authorized(port, until, repeated, lo.heavy)]
        if name == "limit":
            return [authorized(port, until, distinct, lo.heavy)]
        if name == "combined":
            return [slack_bodies(n(64), big, until, lo.attack), trickling(n(1010), until, lo.attack),
                    bogus_token_posts(n(16), big, until, lo.attack)]
        return []

    names = ["idle", "slack-bodies-64", "trickle-1010", "combined", "repeat-4mib", "limit"]
    if args.only:
        names = [x for x in names if x in args.only or x == "idle"]
    await asyncio.sleep(2)
    before = rss_mib(pid)
    out: list[Lockout] = []
    after = float("nan")
    for name in names:
        lo = Lockout(name)
        stop = asyncio.Event()
        bg = [asyncio.ensure_future(sample_rss(pid, stop, lo.rss))]
        t0 = time.monotonic()
        until = t0 + secs
        cpu0, sent0 = cpu_seconds(pid), attack_bytes[0]
        # the authorized client and the /healthz prober in a process of their own: the attackers'
        # event loop here must not slow the measure down
        measure = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--measure", f"{port},{secs}", stdout=subprocess.PIPE)
        jobs = [*attacks(name, until, lo), measure.communicate()]
        try:
            got = await asyncio.wait_for(asyncio.gather(*jobs), secs + 60)
            measured = json.loads(got[-1][0])
            lo.auth.latencies, lo.auth.statuses = measured["auth"], collections.Counter(measured["statuses"])
            lo.health = measured["health"]
            lo.health_failed.statuses = collections.Counter(measured["health_failed"])
            lo.seconds = measured["seconds"]
        except asyncio.TimeoutError:
            lo.attack.statuses["scenario-timeout"] += 1
            measure.kill()
        lo.server_cpu = (cpu_seconds(pid) - cpu0) / max(lo.seconds, 1e-9)
        lo.attack_mib = (attack_bytes[0] - sent0) / (1 << 20)
        stop.set()
        await asyncio.gather(*bg)
        out.append(lo)
        print(f"{name}: done, RSS now {rss_mib(pid):.0f} MiB", file=sys.stderr)
        await asyncio.sleep(3)  # the server's timeouts close what the attack left
        if name == "combined":  # once the uploads it left have met the body timeout (30 s)
            await asyncio.sleep(32)
            after = rss_mib(pid)
    return out, before, after


def report_lockout(rows: list[Lockout], before: float, after: float, limit: float) -> None:
    idle = next((r for r in rows if r.name == "idle"), None)
    base = len(idle.auth.latencies) / idle.seconds if idle and idle.seconds else float("nan")
    print(f"\nlockout (issue 36): the authorized client on the idle server: {base:.1f} requests/s; "
          f"server RSS before {before:.0f} MiB, 35 s after the combined attack {after:.0f} MiB\n")
    print("| scenario | attack responses | authorized req/s (% of idle) | authorized statuses | "
          "/healthz max s | /healthz p99 s | peak RSS MiB | server CPU | attack MiB/s | heavy posts: statuses, p50 / max s |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---|")
    ok_tp, ok_h, ok_rss = True, True, True
    for r in rows:
        rate = len(r.auth.latencies) / r.seconds if r.seconds else 0.0
        share = 100 * rate / base if base == base and base else float("nan")
        hmax = max(r.health, default=float("nan"))
        peak = max(r.rss, default=float("nan"))
        heavy = "" if not r.heavy.latencies else (
            ", ".join(f"{k}: {v}" for k, v in sorted(r.heavy.statuses.items()))
            + f"; {statistics.median(r.heavy.latencies):.2f} / {max(r.heavy.latencies):.2f}")
        att = ", ".join(f"{k}: {v}" for k, v in sorted(r.attack.statuses.items()))
        auth = ", ".join(f"{k}: {v}" for k, v in sorted(r.auth.statuses.items()))
        if r.health_failed.statuses:
            auth += "; /healthz not 200: " + ", ".join(f"{k}: {v}" for k, v in sorted(r.health_failed.statuses.items()))
        print(f"| {r.name} | {att} | {rate:.1f} ({share:.0f} %) | {auth} | {hmax:.3f} | {pct(r.health, 0.99):.3f} "
              f"| {peak:.0f} | {100 * r.server_cpu:.0f} % | {r.attack_mib / max(r.seconds, 1e-9):.0f} | {heavy} |")
        if r.name in ("slack-bodies-64", "trickle-1010", "combined"):
            ok_tp &= share >= 90
            ok_h &= hmax < 0.5
        if r.name == "combined":
            ok_rss = peak <= 300
    print()
    lim = next((r for r in rows if r.name == "limit"), None)
    held = lim is not None and bool(lim.heavy.latencies) and max(lim.heavy.latencies) <= limit * 1.1
    print(f"targets: authorized >= 90 % of idle throughput under the lockout attacks: {'yes' if ok_tp else 'NO'}; "
          f"/healthz < 0.5 s throughout them: {'yes' if ok_h else 'NO'}; peak RSS under the combined attack "
          f"<= 300 MiB: {'yes' if ok_rss else 'NO'}; the {limit:g} s limit held within 10 %: "
          f"{'yes' if held else 'NO' if lim else 'not run'}")


def measure(port: int, seconds: float) -> None:
    """``--measure``: one authorized client posting a small log in a loop and the /healthz prober,
    for ``seconds``; prints what they saw as JSON."""
    small = (ROOT / "fixtures/vllm/vllm-054.log").read_bytes()
    auth, failed, health = Stats(), Stats(), []

    async def go() -> float:
        stop = asyncio.Event()
        prober = asyncio.ensure_future(probe(port, stop, health, failed))
        t0 = time.monotonic()
        await authorized(port, t0 + seconds, small, auth)
        stop.set()
        await prober
        return time.monotonic() - t0

    took = asyncio.run(go())
    print(json.dumps({"auth": auth.latencies, "statuses": auth.statuses, "health": health,
                      "health_failed": failed.statuses, "seconds": took}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the clients of each scenario")
    ap.add_argument("--scenario-seconds", type=float, default=60.0, help="time limit of each scenario")
    ap.add_argument("--lockout-seconds", type=float, default=20.0, help="length of each lockout scenario")
    ap.add_argument("--limit", type=float, default=5.0, help="the server's analysis time limit, seconds")
    ap.add_argument("--only", type=lambda v: set(v.split(",")), default=set(),
                    help="scenarios to run: 'load' (the five above) and lockout names; default all")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # PORT,SECONDS: see measure()
    args = ap.parse_args()
    if args.measure:
        port_text, seconds_text = args.measure.split(",")
        measure(int(port_text), float(seconds_text))
        return
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))  # the clients' sockets
    except (ImportError, ValueError, OSError):
        pass
    port = free_port()
    env = {**os.environ, "OOMDOCTOR_API_TOKEN": TOKEN, "OOMDOCTOR_SLACK_SIGNING_SECRET": SLACK_SECRET,
           "OOMDOCTOR_MAX_BODY": str(4 << 20), "OOMDOCTOR_ANALYSIS_TIMEOUT": str(args.limit),
           "PYTHONPATH": str(ROOT)}
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
        async def both() -> tuple[list[tuple[str, Stats, list[float]]], tuple[list[Lockout], float, float]]:
            first = await main_async(args, port, server.pid)
            return first, await lockout(args, port, server.pid)

        results, (rows, before, after) = asyncio.run(both())
        rss = peak_rss_mib(server.pid)
        wall = time.monotonic() - t0
    finally:
        server.terminate()
        try:
            _, err = server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            _, err = server.communicate()
    log = err.decode(errors="replace")
    tracebacks = log.count("Traceback")
    backstop = log.count("Exceeded concurrency limit")  # uvicorn's own plain 503s
    print(f"\nscale {args.scale:g}, {os.cpu_count()} CPUs, {wall:.0f} s; server peak RSS {rss:.0f} MiB; "
          f"tracebacks in the server's log: {tracebacks}; uvicorn's backstop 503s: {backstop}\n")
    if results:
        print("| scenario | requests | p50 s | p99 s | responses by status | /healthz p99 s |")
        print("|---|---:|---:|---:|---|---:|")
        worst = 0.0
        bad: list[str] = []
        for name, st, samples in results:
            by = ", ".join(f"{k}: {v}" for k, v in sorted(st.statuses.items()))
            h99 = pct(samples, 0.99)
            worst = max(worst, h99)
            bad += [f"{name} {k}" for k in st.statuses if k.startswith("5") and k != "503"]
            print(f"| {name} | {len(st.latencies)} | {statistics.median(st.latencies):.3f} "
                  f"| {pct(st.latencies, 0.99):.3f} | {by} | {h99:.3f} |")
        print()
        print(f"targets: no 5xx but 503 busy: {'yes' if not bad else 'NO ' + str(bad)}; "
              f"/healthz p99 < 0.5 s: {'yes' if worst < 0.5 else 'NO'} ({worst:.3f}); "
              f"peak RSS < 512 MiB: {'yes' if rss < 512 else 'NO'} ({rss:.0f})")
    report_lockout(rows, before, after, args.limit)

if __name__ == "__main__":
    main()
