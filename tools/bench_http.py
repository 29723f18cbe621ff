"""Benchmark ``convmem serve --http``: acknowledged durable writes through the
SDK's HTTP client, 1 and 16 concurrent clients (each its own process).

    python -m tools.bench_http [--seconds 10] [--clients 1,16] [--processes 1] [--starts N] [--store DIR]

Reports per run: writes/s (acknowledged), latency p50/p95/max, server CPU per
write (from /proc, summed over the server processes), and events per group
commit (the store's own counters: logical writes / flushes).  With
``--processes K`` K servers share one store and client i talks to server
i mod K.  Each client process freezes its own heap after connecting
(``gc.freeze()``), so a full collection in the *client* (the SDK client's
~90,000 objects: a 70 ms pause measured) is not counted as server latency.
Numbers, not assertions: nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
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
        gc.collect()
        gc.freeze()
        print("ready", flush=True)               # then wait for every client to be ready: all start at once
        await asyncio.to_thread(sys.stdin.readline)
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


def _run(store: str, clients: int, seconds: float, processes: int = 1) -> dict:
    token = "bench-token-" + os.urandom(16).hex()
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(http_server(store, token=token, log_level="WARNING")) for _ in range(processes)]
        procs = [start([*python("-m", "tools.bench_http", "--client", servers[i % processes].url, str(seconds),
                                f"c{i}")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                       env={"CONVMEM_BENCH_TOKEN": token})
                 for i in range(clients)]
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a benchmark client did not start")
        io0 = asyncio.run(_io(servers[0].url, token))
        cpu0, t0 = sum(_cpu_seconds(s.pid) for s in servers), time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(p.communicate()[0]) for p in procs]
        cpu1, wall = sum(_cpu_seconds(s.pid) for s in servers), time.monotonic() - t0
        io1 = asyncio.run(_io(servers[0].url, token))
    latencies = sorted(x for r in results for x in r)
    writes = io1["write_calls"] - io0["write_calls"]
    flushes = io1["flush_calls"] - io0["flush_calls"]
    q = statistics.quantiles(latencies, n=100)
    return {"clients": clients, "processes": processes, "acknowledged_writes": len(latencies),
            "writes_per_s": round(len(latencies) / seconds, 1),
            "p50_ms": round(q[49], 2), "p95_ms": round(q[94], 2), "p99_ms": round(q[98], 2),
            "max_ms": round(latencies[-1], 2),
            "server_cpu_ms_per_write": round((cpu1 - cpu0) * 1000 / max(writes, 1), 3),
            "events_per_group_commit": round(writes / max(flushes, 1), 2), "wall_s": round(wall, 1),
            "load_avg": round(os.getloadavg()[0], 2)}


def time_to_initialize(store: str) -> float:
    """Milliseconds from spawning ``convmem serve --http 127.0.0.1:0`` to its answer to an
    ``initialize`` request (the bound port is read from its stderr line)."""
    import re

    import httpx2
    token = "bench-token-" + os.urandom(16).hex()
    t0 = time.perf_counter()
    proc = start([*python("-m", "server.cli", "--log-level", "WARNING", "serve", "--store", store, "--http",
                          "127.0.0.1:0")], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.PIPE, text=True, env={"CONVMEM_TOKEN": token})
    try:
        for line in proc.stderr:
            match = re.search(r"streamable HTTP at (\S+)", line)
            if match:
                break
        else:
            raise RuntimeError("the server did not start")
        answer = httpx2.post(match.group(1), headers={"Authorization": f"Bearer {token}",
                                                      "Accept": "application/json, text/event-stream"},
                             json={"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                   "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                              "clientInfo": {"name": "bench", "version": "0"}}}, timeout=60)
        elapsed = (time.perf_counter() - t0) * 1000
        if answer.status_code != 200 or "result" not in answer.json():
            raise RuntimeError(f"initialize answered {answer.status_code}")
        return elapsed
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--client":
        url, seconds, name = args[1], float(args[2]), args[3]
        print(json.dumps(asyncio.run(_client(url, os.environ["CONVMEM_BENCH_TOKEN"], seconds, name))))
        return 0
    p = argparse.ArgumentParser(prog="python -m tools.bench_http", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--clients", default="1,16")
    p.add_argument("--starts", type=int, default=0, help="also time start-up to an answered initialize N times")
    p.add_argument("--processes", type=int, default=1, help="server processes sharing the store (default 1)")
    p.add_argument("--store", default=None, help="store directory (default: a fresh temporary one per run)")
    opts = p.parse_args(args)
    if opts.starts:
        with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
            times = sorted(time_to_initialize(os.path.join(tmp, "store")) for _ in range(opts.starts))
        print(json.dumps({"start_to_initialize_ms": [round(t) for t in times],
                          "median_ms": round(statistics.median(times))}), flush=True)
    for n in (int(c) for c in opts.clients.split(",") if c):
        with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
            print(json.dumps(_run(opts.store or os.path.join(tmp, "store"), n, opts.seconds, opts.processes)),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
