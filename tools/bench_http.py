"""Benchmark ``convmem serve --http``: acknowledged durable writes through the
SDK's HTTP client, 1 and 16 concurrent clients (each its own process).

    python -m tools.bench_http [--seconds 10] [--clients 1,16] [--store DIR]

Reports per run: writes/s (acknowledged), latency p50/p95/max, server CPU per
write (from /proc), and events per group commit (the store's own counters:
logical writes / flushes).  Numbers, not assertions: nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from tools._proc import python, start
from tools.mcp_client import connect_http, http_server, ok


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _client(url: str, token: str, seconds: float, name: str) -> list[float]:
    """Write for ``seconds`` after a warm-up; each acknowledged write's latency in ms."""
    async with connect_http(url, token) as client:
        for _ in range(20):
            await ok(client, "write_message", {"session_id": name, "role": "user", "content": "warm-up"})
        latencies, end, i = [], time.monotonic() + seconds, 0
        while time.monotonic() < end:
            t0 = time.perf_counter()
            await ok(client, "write_message", {"session_id": name, "role": "user",
                                               "content": f"benchmark message {i} from {name}"})
            latencies.append((time.perf_counter() - t0) * 1000)
            i += 1
        return latencies


async def _io(url: str, token: str) -> dict:
    async with connect_http(url, token) as client:
        return (await ok(client, "get_system_health"))["io"]


def _run(store: str, clients: int, seconds: float) -> dict:
    with http_server(store, log_level="WARNING") as server:
        io0 = asyncio.run(_io(server.url, server.token))
        procs = [start([*python("-m", "tools.bench_http", "--client", server.url, str(seconds), f"c{i}")],
                       stdout=subprocess.PIPE, text=True, env={"CONVMEM_BENCH_TOKEN": server.token})
                 for i in range(clients)]
        cpu0, t0 = _cpu_seconds(server.pid), time.monotonic()
        results = [json.loads(p.communicate()[0]) for p in procs]
        cpu1, wall = _cpu_seconds(server.pid), time.monotonic() - t0
        io1 = asyncio.run(_io(server.url, server.token))
    latencies = sorted(x for r in results for x in r)
    writes = io1["write_calls"] - io0["write_calls"]
    flushes = io1["flush_calls"] - io0["flush_calls"]
    q = statistics.quantiles(latencies, n=100)
    return {"clients": clients, "acknowledged_writes": len(latencies),
            "writes_per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(q[49], 2), "p95_ms": round(q[94], 2), "max_ms": round(latencies[-1], 2),
            "server_cpu_ms_per_write": round((cpu1 - cpu0) * 1000 / max(writes, 1), 3),
            "events_per_group_commit": round(writes / max(flushes, 1), 2), "wall_s": round(wall, 1)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--client":
        url, seconds, name = args[1], float(args[2]), args[3]
        print(json.dumps(asyncio.run(_client(url, os.environ["CONVMEM_BENCH_TOKEN"], seconds, name))))
        return 0
    p = argparse.ArgumentParser(prog="python -m tools.bench_http", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--clients", default="1,16")
    p.add_argument("--store", default=None, help="store directory (default: a fresh temporary one per run)")
    opts = p.parse_args(args)
    for n in (int(c) for c in opts.clients.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
            print(json.dumps(_run(opts.store or os.path.join(tmp, "store"), n, opts.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
