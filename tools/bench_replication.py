"""Replication benchmarks against their targets, on a 3-server JetStream cluster on loopback
(``sync_interval: always``, R=3) started and stopped here:

* ``write`` — replicated ``write_message`` through a real ``convmem serve
  --replicate`` over stdio: latency percentiles (target p50 ≤ 3 ms), and the
  same through a plain ``convmem serve`` for comparison;
* ``catchup`` — a fresh node catching up on a stream of N events: events/s
  (target ≥ 20,000), beside a local replay of the same store at the same moment
  (the ceiling: the same projectors), and the CPU an event cost the node's
  writer thread and its NATS link's thread (less noisy than events/s on a
  shared machine: the two take turns at the interpreter, so their sum bounds
  the speed);
* ``failover`` — sequential writes while the stream's leader is SIGKILLed:
  the longest write (the stall; target ≤ 10 s) and the acknowledged writes
  missing or doubled afterwards (target: none).

    python -m tools.bench_replication [--writes 500] [--events 20000] [--failovers 3]
    python -m tools.bench_replication --only catchup [--repeat 3]

Numbers go to stdout; they are noisy on a shared machine (say so with them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time

from eventstore.errors import StoreIOError
from eventstore.events import Message, Metadata
from eventstore.store import EventStore
from projections.registry import Projector
from server.replication import Settings, committer_factory
from server.service import MemoryService
from tools._nats import Cluster, served_replicated
from tools.mcp_client import ok, served

STREAM = "BENCH"
THREADS = {"convmem-writer": "writer", "convmem-nats": "link"}     # a replicated node's two threads


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000
    return {"p50_ms": round(pick(0.5), 2), "p90_ms": round(pick(0.9), 2), "p99_ms": round(pick(0.99), 2),
            "max_ms": round(s[-1] * 1000, 2)}


async def _writes(client, n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        await ok(client, "write_message", {"session_id": "bench", "role": "user", "content": f"message {i} " * 8})
        out.append(time.perf_counter() - t)
    return out


async def bench_write(cluster: Cluster, work: str, n: int) -> dict:
    async with served_replicated(os.path.join(work, "w-repl"), work, cluster.urls, STREAM + "W") as (client, _):
        await _writes(client, 20)                       # warm up: connection, stream creation
        replicated = percentiles(await _writes(client, n))
    async with served(os.path.join(work, "w-local"), work) as (client, _):
        await _writes(client, 20)
        local = percentiles(await _writes(client, n))
    return {"replicated_write": replicated, "local_write": local, "writes": n}


def node(cluster: Cluster, path: str, stream: str) -> MemoryService:
    config = Settings(tuple(cluster.urls.split(",")), stream, 3)
    return MemoryService(path, committer=committer_factory(config))


def thread_cpu(before: set[int | None]) -> dict[str, float]:
    """CPU seconds so far of each of a node's :data:`THREADS` that was not running at ``before`` (Linux)."""
    out = dict.fromkeys(THREADS.values(), 0.0)
    for t in threading.enumerate():
        if t.name in THREADS and t.ident is not None and t.ident not in before:
            out[THREADS[t.name]] += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return out


def bench_catchup(cluster: Cluster, work: str, events: int, run: int = 0) -> dict:
    stream, here = f"{STREAM}C{run}", os.path.join(work, f"c{run}")
    writer = node(cluster, os.path.join(here, "writer"), stream)
    try:
        for start in range(0, events, 2000):
            batch = [Message(f"01J{i:023d}", f"s{i % 50}", "user", f"bulk message {i} " + "text " * 20,
                             1_720_000_000_000 + i, 1_720_000_000_000 + i)
                     for i in range(start, min(events, start + 2000))]
            writer.restore_messages(batch)
    finally:
        writer.close()
    before = {t.ident for t in threading.enumerate()}
    t = time.perf_counter()
    fresh = node(cluster, os.path.join(here, "fresh"), stream)
    try:
        assert fresh.replicated is not None
        fresh.replicated.sync(timeout=600)
        elapsed = time.perf_counter() - t
        cpu = thread_cpu(before)
        applied = fresh.health()["replication"]["applied_sequence"]
    finally:
        fresh.close()
    with EventStore(os.path.join(here, "fresh"), Projector()) as store:    # the same machine, the same moment
        t = time.perf_counter()
        replayed = store.rebuild_projections()
        replay_rate = replayed / (time.perf_counter() - t)
    return {"catchup_events": applied, "catchup_seconds": round(elapsed, 2),
            "catchup_events_per_s": round(applied / elapsed), "local_replay_events_per_s": round(replay_rate),
            **{f"{name}_cpu_us_per_event": round(seconds / applied * 1e6, 1) for name, seconds in cpu.items()}}


def bench_failover(cluster: Cluster, work: str, run: int, writes: int = 600, kill_at: int = 200) -> dict:
    stream = f"{STREAM}F{run}"
    svc = node(cluster, os.path.join(work, f"f{run}"), stream)
    acked, failed, longest = [], 0, 0.0
    killed: int | None = None
    try:
        for i in range(writes):
            if i == kill_at:
                killed = cluster.stream_leader(f"{stream}-g1")
                assert killed is not None
                cluster.kill(killed)
            t = time.perf_counter()
            try:
                acked.append(svc.write_message("f", "user", f"w{i}", Metadata())["message"]["message_id"])
            except StoreIOError:
                failed += 1
            longest = max(longest, time.perf_counter() - t)
        assert killed is not None
        cluster.start(killed)
        cluster.wait_ready()
        assert svc.replicated is not None
        svc.replicated.sync(timeout=120)
        found = [m["message_id"] for m in svc.history("f", 10**5, None)["history"]]
    finally:
        svc.close()
    missing = len(set(acked) - set(found))
    return {"stall_s": round(longest, 2), "acked": len(acked), "io_errors": failed, "missing": missing,
            "doubled": len(found) - len(set(found))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writes", type=int, default=500)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--failovers", type=int, default=3)
    p.add_argument("--only", choices=("write", "catchup", "failover"), help="run only this part")
    p.add_argument("--repeat", type=int, default=1, help="catch-up runs (each on a stream of its own)")
    args = p.parse_args(argv)
    wanted = lambda part: args.only in (None, part)
    with tempfile.TemporaryDirectory(prefix="convmem-bench-repl-") as work, \
            Cluster(os.path.join(work, "nats"), size=3) as cluster:
        if wanted("write"):
            print("write:", asyncio.run(bench_write(cluster, work, args.writes)), flush=True)
        for run in range(args.repeat if wanted("catchup") else 0):
            print("catch-up:", bench_catchup(cluster, work, args.events, run), flush=True)
        for run in range(args.failovers if wanted("failover") else 0):
            print(f"failover {run + 1}:", bench_failover(cluster, work, run), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
