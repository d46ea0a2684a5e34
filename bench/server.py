"""Benchmark ``oomdoctor serve``: requests/s and p50/p99 latency at 1, 8 and 32 concurrent clients.

Runs the real server (``python -m oomdoctor serve``) in a subprocess on 127.0.0.1 and measures, in
one run, ``GET /healthz`` (the baseline: HTTP + framework cost only) and ``POST /v1/diagnose`` with a
~100 KB real-looking vLLM log (healthy start-up lines taken from fixtures/, then the failure of
fixtures/vllm/vllm-054.log). Prints a Markdown table.

    python bench/server.py [--seconds 3] [--workers 1] [--size 100000]

The load generator is one asyncio process speaking plain keep-alive HTTP/1.1 on asyncio streams
(an httpx client costs more per request than the server's /healthz); on a small machine it shares
the CPUs with the server, so /healthz rows are a lower bound.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token"
NOISE = ("error", "Error", "ERROR", "WARN", "out of memory", "OOM", "Traceback", 'File "', "memory", "Killed",
         "exhausted", "alloc")


def build_log(size: int) -> bytes:
    """Healthy lines from the real fixtures, repeated up to ``size`` bytes, then a real vLLM failure."""
    from oomdoctor import diagnose

    tail = (ROOT / "fixtures/vllm/vllm-054.log").read_bytes()
    healthy: list[bytes] = []
    for p in sorted((ROOT / "fixtures").glob("*/*.log")):
        if p.name.startswith("synthetic"):
            continue
        for line in p.read_bytes().splitlines(keepends=True):
            text = line.decode("utf-8", "replace")
            if text.strip() and not any(n in text for n in NOISE):
                healthy.append(line)
    while True:  # drop any line that still makes a finding on its own: the log must fail only once
        found = diagnose(b"".join(healthy)).findings
        if not found:
            break
        bad = {n for f in found for n in range(f.location.line, f.location.end_line + 1)}
        healthy = [line for i, line in enumerate(healthy, 1) if i not in bad]
    out = bytearray()
    i = 0
    while len(out) + len(tail) < size:
        out += healthy[i % len(healthy)]
        i += 1
    return bytes(out) + tail


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Conn:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams (httpx's own overhead would dominate)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: bytes | None) -> int:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        if body is not None:
            head += f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        await self.writer.drain()
        status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return int(status_line.split()[1])

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def run_load(port: int, concurrency: int, seconds: float, method: str, path: str, body: bytes | None) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    errors = 0
    conns = [Conn("127.0.0.1", port) for _ in range(concurrency)]
    await asyncio.gather(*[c.open() for c in conns])
    await asyncio.gather(*[c.request(method, path, body) for c in conns])  # warm-up
    stop = time.perf_counter() + seconds

    async def worker(conn: Conn) -> None:
        nonlocal errors
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            status = await conn.request(method, path, body)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*[worker(c) for c in conns])
    elapsed = time.perf_counter() - t0
    await asyncio.gather(*[c.close() for c in conns])
    return elapsed, latencies, errors


def pct(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="measuring time per row")
    ap.add_argument("--workers", type=int, default=1, help="server worker processes")
    ap.add_argument("--size", type=int, default=100_000, help="log size in bytes")
    ap.add_argument("--concurrency", default="1,8,32")
    args = ap.parse_args()

    log = build_log(args.size)
    port = free_port()
    env = {**os.environ, "OOMDOCTOR_API_TOKEN": TOKEN}
    cmd = [sys.executable, "-m", "oomdoctor", "serve", "--port", str(port), "--workers", str(args.workers),
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                print("server did not start", file=sys.stderr)
                return 1
            time.sleep(0.1)
        check = httpx.post(base + "/v1/diagnose", content=log, timeout=60,
                           headers={"Authorization": f"Bearer {TOKEN}", "content-type": "text/plain"}).json()
        kinds = [f["kind"] for f in check["findings"]]
        flags = check["findings"][0]["remedies"][0]["flags"] if check["findings"] else {}
        lines = log.count(b"\n")
        print(f"log: {len(log):,} bytes, {lines:,} lines; findings {kinds}; first remedy {flags}")
        print(f"server: {args.workers} worker(s); client: one asyncio process (keep-alive HTTP/1.1); {args.seconds:g} s per row; "
              f"{os.cpu_count()} CPUs\n")
        print("| endpoint | clients | requests/s | p50 ms | p99 ms | requests | errors |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for label, method, path, body in (
            ("GET /healthz (baseline)", "GET", "/healthz", None),
            (f"POST /v1/diagnose ({len(log) // 1000} KB log)", "POST", "/v1/diagnose", log),
        ):
            for c in (int(x) for x in args.concurrency.split(",")):
                elapsed, lat, errors = asyncio.run(run_load(port, c, args.seconds, method, path, body))
                print(f"| {label} | {c} | {len(lat) / elapsed:,.0f} | {pct(lat, 50) * 1000:.2f} | "
                      f"{pct(lat, 99) * 1000:.2f} | {len(lat):,} | {errors} |", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
