"""CPU time per durable write and per replayed event, in-process.

    python -m tools.bench_cpu [--writes N] [--events N] [--imports N] [--tail N [--data F]] [--rounds R]

Wall-clock benchmarks on shared cores swing by ±20% from run to run; CPU time
(``time.process_time``) swings less, and its minimum over a few rounds is the
least disturbed by other work.  Used to compare two versions of the code back
to back (run it in each checkout, alternating).  The replay runs in one
process (``IndexConfig(second_process=False)``), so that its CPU time is all
of its work; so does ``--imports N``, an import of N chat-sized messages
(``tools.bench_import``'s transcripts, written before the clock starts,
read in the importing process).  ``--tail N`` gives the spread of the CPU
time of single writes: the thread CPU (``time.thread_time``) of each of N
sequential ``write_message`` calls of LoCoMo turns (``tools.bench_mcp``'s),
in one process, the heap frozen after start-up as the server does — its
median, p99, p99.9 and maximum (the slowest are the writes that merge
pending index records).  Output: one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import tempfile
import time

from eventstore.events import Metadata
from projections.index import IndexConfig
from server.service import MemoryService

from .bench_store import DEFAULT_DATA, fill, messages_of


def write_cpu(path: str, n: int) -> float:
    """Milliseconds of CPU per ``write_message`` (each a durable commit)."""
    svc = MemoryService(path)
    texts = messages_of(DEFAULT_DATA)
    try:
        start = time.process_time()
        for i in range(n):
            svc.write_message(f"s{i % 20}", "user", next(texts), Metadata())
        return 1e3 * (time.process_time() - start) / n
    finally:
        svc.close()


def write_tail(path: str, n: int, data: str = DEFAULT_DATA) -> dict[str, float]:
    """Milliseconds of thread CPU of single ``write_message`` calls: p50, p99, p99.9, max."""
    from .bench_mcp import turns
    calls = list(turns(data, n))
    svc = MemoryService(path, index_config=IndexConfig(second_process=False))
    try:
        gc.collect()
        gc.freeze()
        cpu = []
        for c in calls:
            start = time.thread_time()
            svc.write_message(c["session_id"], c["role"], c["content"], Metadata())
            cpu.append(1e3 * (time.thread_time() - start))
    finally:
        svc.close()
        gc.unfreeze()
    cpu.sort()
    return {name: round(cpu[min(int(q * n), n - 1)], 2)
            for name, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0))}


def replay_cpu(path: str, events: int) -> float:
    """Microseconds of CPU per event of a full replay, in one process."""
    fill(path, messages_of(DEFAULT_DATA), events, 200)
    svc = MemoryService(path, index_config=IndexConfig(second_process=False))
    try:
        start = time.process_time()
        svc.store.rebuild_projections()
        return 1e6 * (time.process_time() - start) / events
    finally:
        svc.close()


def import_cpu(work: str, n: int) -> float:
    """Microseconds of CPU per message of an import, all of it in one process."""
    from eventstore.store import EventStore
    from projections.registry import Projector
    from server.importers import Options, run_import

    from . import bench_import, search_scale
    turns, _ = search_scale.load(search_scale.DEFAULT_DATA)
    folder = os.path.join(work, "transcripts")
    bench_import.write_transcripts(folder, turns, n, 500)
    with EventStore(os.path.join(work, "i"), Projector(IndexConfig(second_process=False))) as store:
        start = time.process_time()
        run_import("", "claude-code", [folder], Options(progress=False, apart=False), store=store)
        return 1e6 * (time.process_time() - start) / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--writes", type=int, default=2000, help="durable writes per round (default 2000)")
    p.add_argument("--events", type=int, default=20000, help="events in the replayed store (default 20000)")
    p.add_argument("--imports", type=int, default=0, help="messages imported in one process (default 0: none)")
    p.add_argument("--tail", type=int, default=0,
                   help="single writes whose thread CPU is spread into percentiles (default 0: none)")
    p.add_argument("--data", default=DEFAULT_DATA, help="the LoCoMo file --tail writes the turns of")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each (default 3)")
    args = p.parse_args(argv)
    writes, replays, imports, tails = [], [], [], []
    for _ in range(args.rounds):
        work = tempfile.mkdtemp(prefix="convmem-cpu-")
        try:
            if args.writes:
                writes.append(round(write_cpu(os.path.join(work, "w"), args.writes), 3))
            if args.events:
                replays.append(round(replay_cpu(os.path.join(work, "r"), args.events), 1))
            if args.imports:
                imports.append(round(import_cpu(work, args.imports), 1))
            if args.tail:
                tails.append(write_tail(os.path.join(work, "t"), args.tail, args.data))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    record: dict = {"benchmark": "bench_cpu"}
    for name, least, values in (("write_cpu_ms", "write_cpu_ms_min", writes),
                                ("replay_cpu_us_per_event", "replay_cpu_us_min", replays),
                                ("import_cpu_us_per_message", "import_cpu_us_min", imports)):
        if values:
            record[name], record[least] = values, min(values)
    if tails:
        record["write_tail_cpu_ms"] = tails
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
