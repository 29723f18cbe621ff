"""Bulk import speed: Claude Code transcripts of chat-sized messages into an empty store, in-process.

    python -m tools.bench_import                          100,000 messages, temporary store
    python -m tools.bench_import --messages 1000000 --store DIR --serve --search
    python -m tools.bench_import --through-service        the import through a service's committer
    python -m tools.bench_import --into-node --no-rerun --no-memory     into a served node's store

The transcripts are the LoCoMo dev conversations (``--data``, default
``../shared/data``) replicated until there are ``--messages`` turns, written
as Claude Code session files of ``--per-session`` lines each (user and
assistant text lines, ``"{speaker}: {text}"``, 120 bytes on average), then
imported with :func:`server.importers.run_import` — parsing, mapping, the
re-run check and the bulk writer (``--batch`` messages per durable
transaction), as ``convmem import claude-code`` runs it.  Writing the files
is not timed.  A second import of the same files is timed too (everything is
already there: the cost of a re-run), and so is a replay of the store built
(``rebuild_projections``: the same index work without parsing or encoding —
on a shared machine the ratio of the two says more than either alone, and
so does the CPU time a message: in all, this process's and its ended
children's, and this process's alone — the writing process, which the
others keep up with when there are CPUs enough).

Then, reported apart and labelled as such, **the bulk writer alone**: the
same turns built in memory beforehand (as the Claude Code reader maps those
lines: no files, no JSON, no mapping) written by
:class:`server.importers.writer.Writer` into another empty store — ids,
encoding, the log, every projector, the index's second process, the commits.
It is the rate of the writing path for chat-sized messages, not of an import
(``--no-memory`` skips it).

``--into-node`` imports with ``convmem import claude-code`` (a process of its
own) into the store of a replicated node that this process serves, on a
3-server loopback cluster (``tools._nats``): through the node's stream, as
docs/import.md describes; the CPU times are then this process's (the node
applying its own store's stream) and not the import's.

``--serve`` times ``convmem serve`` from start to its first answer (the MCP
``initialize`` and a ``get_system_health`` call); ``--search`` runs the LoCoMo questions
through :meth:`MemoryService.search` (``tools.search_scale``'s timing: one
warm-up pass, one timed).  Output: a table and one JSON record on stdout;
progress on stderr.  Timings are measurements, never assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from server.commands._common import paused_collector
from server.importers import Options, run_import
from server.importers.turns import Report, Turn
from server.importers.writer import Writer
from server.service import MemoryService

from . import search_scale
from ._workdir import workdir

SID = "00000000-0000-4000-8000-{:012d}"


def write_transcripts(folder: str, turns: list[tuple[str, str, str, str]], total: int, per_session: int) -> int:
    """``total`` lines over session files of ``per_session`` lines; returns their bytes of content."""
    project = os.path.join(folder, "-bench-project")
    os.makedirs(project, exist_ok=True)
    content_bytes, base = 0, 1_700_000_000_000
    for first in range(0, total, per_session):
        sid = SID.format(first // per_session)
        with open(os.path.join(project, f"{sid}.jsonl"), "w", encoding="utf-8") as fh:
            parent = None
            for i in range(first, min(first + per_session, total)):
                _, _, role, content = turns[i % len(turns)]
                uuid = f"{sid[:-12]}{i:012d}"
                ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((base + i * 1000) // 1000)) + ".000Z"
                line = {"parentUuid": parent, "isSidechain": False, "sessionId": sid, "type": role,
                        "message": {"role": role, "content": content if role == "user"
                                    else [{"type": "text", "text": content}]},
                        "uuid": uuid, "timestamp": ts}
                fh.write(json.dumps(line) + "\n")
                parent = uuid
                content_bytes += len(content.encode("utf-8"))
    return content_bytes


def cpu_seconds(children: bool = True) -> float:
    """CPU time of this process and (``children``) of its ended children (the
    index's second process, the source's reading process)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + (kids.ru_utime + kids.ru_stime if children else 0.0)


def timed_import(store: str, folder: str, batch: int, service: bool = False,
                 node: bool = False) -> tuple[float, float, float, dict]:
    """(seconds, CPU seconds in all, CPU seconds of this process alone, the summary).
    ``service``: through an open :class:`MemoryService`'s committer, as into a served store
    (the collector on); ``node``: ``convmem import`` into the store of a replicated node
    served here; else as ``convmem import`` runs (the collector paused for the command)."""
    if node:
        return _into_node(store, folder, batch)
    start, cpu, own = time.perf_counter(), cpu_seconds(), cpu_seconds(children=False)
    options = Options(batch=batch, progress=sys.stderr.isatty())
    if service:
        svc = MemoryService(store)
        try:
            summary = run_import("", "claude-code", [folder], options, store=svc.store, committer=svc)
        finally:
            svc.close()
    else:
        with paused_collector():
            summary = run_import(store, "claude-code", [folder], options)
    return time.perf_counter() - start, cpu_seconds() - cpu, cpu_seconds(children=False) - own, summary


def _into_node(store: str, folder: str, batch: int) -> tuple[float, float, float, dict]:
    from server.replication import Settings, committer_factory

    from ._nats import Cluster
    with tempfile.TemporaryDirectory(prefix="convmem-nats-") as nats, Cluster(nats, size=3) as cluster:
        svc = MemoryService(store, committer=committer_factory(Settings(tuple(cluster.urls.split(",")))))
        try:
            start, cpu, own = time.perf_counter(), cpu_seconds(), cpu_seconds(children=False)
            out = subprocess.run([sys.executable, "-m", "server.cli", "import", "claude-code", folder, "--store",
                                  store, "--batch", str(batch), "--json"], capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"convmem import failed: {out.stderr[-2000:]}")
            seconds = time.perf_counter() - start
            return seconds, cpu_seconds() - cpu, cpu_seconds(children=False) - own, json.loads(out.stdout)
        finally:
            svc.close()


def memory_turns(turns: list[tuple[str, str, str, str]], total: int, per_session: int) -> list[Turn]:
    """The turns ``write_transcripts`` writes, as the Claude Code reader maps them, built in memory."""
    out, base = [], 1_700_000_000_000
    for i in range(total):
        _, _, role, content = turns[i % len(turns)]
        sid = SID.format(i // per_session)
        out.append(Turn(f"claude-code:{sid}", f"{sid[:-12]}{i:012d}", role, content,
                        base + i * 1000, tags=("claude-code",)))
    return out


def timed_writer(store: str, turns: list[Turn], batch: int) -> dict:
    """The bulk writer alone (no file, no parsing, no mapping): ``turns`` into an empty store."""
    from eventstore.store import EventStore
    from projections.registry import Projector
    report = Report("claude-code")
    with EventStore(store, Projector()) as opened:
        start, cpu, own = time.perf_counter(), cpu_seconds(), cpu_seconds(children=False)
        with opened.projector.bulk_run():
            Writer(opened, report, batch=batch).write(turns)
        seconds, cpu, own = time.perf_counter() - start, cpu_seconds() - cpu, cpu_seconds(children=False) - own
    written = max(report.written, 1)
    return {"seconds": round(seconds, 2), "written": report.written,
            "messages_per_s": round(report.written / seconds),
            "cpu_us_per_message": round(1e6 * cpu / written, 1),
            "writer_cpu_us_per_message": round(1e6 * own / written, 1)}


def replay_rate(store: str) -> dict:
    from eventstore.store import EventStore
    from projections.registry import Projector
    with EventStore(store, Projector()) as opened:
        start, cpu = time.perf_counter(), cpu_seconds()
        events = opened.rebuild_projections()
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    return {"seconds": round(seconds, 2), "events_per_s": round(events / seconds),
            "cpu_us_per_event": round(1e6 * cpu / max(events, 1), 1)}


def serve_startup(store: str, parent: str) -> dict:
    """Seconds from starting ``convmem serve`` to its answers (initialize, then a health call)."""
    import anyio

    from .mcp_client import ok, served

    async def once() -> dict:
        start = time.perf_counter()
        async with served(store, parent) as (client, _pid):
            ready = time.perf_counter() - start
            health = await ok(client, "get_system_health")
            answered = time.perf_counter() - start
        return {"initialize_s": round(ready, 3), "first_health_s": round(answered, 3),
                "active_messages": health.get("active_messages")}
    runs = [anyio.run(once) for _ in range(3)]
    return {"runs": runs, "best_first_health_s": min(r["first_health_s"] for r in runs)}


def search(store: str, questions: list[str]) -> dict:
    from projections.search import Filters
    service = MemoryService(store)
    try:
        search_scale.measure(service, questions, Filters())                 # warm-up
        return search_scale.measure(service, questions, Filters())
    finally:
        service.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_import", description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=search_scale.DEFAULT_DATA, help="directory with locomo-dev.json")
    parser.add_argument("--messages", type=int, default=100_000, help="turns to import (default 100000)")
    parser.add_argument("--per-session", type=int, default=500, help="lines per transcript file (default 500)")
    parser.add_argument("--batch", type=int, default=20_000, help="messages per transaction (default 20000)")
    parser.add_argument("--store", help="store directory to build and keep (must not exist yet)")
    parser.add_argument("--serve", action="store_true", help="time `convmem serve` start-up on the store")
    parser.add_argument("--search", action="store_true", help="search p50/p95 over the store (LoCoMo questions)")
    parser.add_argument("--through-service", action="store_true",
                        help="import through an open MemoryService's committer (as into a served store)")
    parser.add_argument("--into-node", action="store_true",
                        help="`convmem import` into a replicated node's store while this process serves it")
    parser.add_argument("--no-rerun", action="store_true", help="skip the re-run and the replay (big stores)")
    parser.add_argument("--no-memory", action="store_true",
                        help="skip the bulk writer's own measure (turns already in memory, another empty store)")
    parser.add_argument("--measure-only", action="store_true",
                        help="import nothing: measure --serve/--search on the existing --store")
    args = parser.parse_args(argv)
    turns, questions = search_scale.load(args.data)
    if args.into_node and not (args.no_rerun and not args.serve and not args.measure_only):
        parser.error("--into-node: needs --no-rerun, without --serve and --measure-only (its cluster is gone then)")
    record: dict = {"benchmark": "bench_import", "messages": args.messages, "batch": args.batch,
                    **({"into_node": True} if args.into_node else {})}
    with workdir(args.store, "convmem-import-") as (store, parent), \
            tempfile.TemporaryDirectory(prefix="convmem-transcripts-") as folder:
        if os.path.exists(os.path.join(store, "data.mdb")) and not args.measure_only:
            parser.error(f"--store {store} already holds a store: the benchmark imports into an empty one")
        if not args.measure_only:
            record["content_bytes"] = write_transcripts(folder, turns, args.messages, args.per_session)
            print("transcripts written; importing", file=sys.stderr)
            seconds, cpu, own, summary = timed_import(store, folder, args.batch, args.through_service,
                                                      args.into_node)
            written = max(summary["written"], 1)
            record["import"] = {"seconds": round(seconds, 2), "written": summary["written"],
                                "messages_per_s": round(summary["written"] / seconds),
                                "cpu_us_per_message": round(1e6 * cpu / written, 1),
                                "writer_cpu_us_per_message": round(1e6 * own / written, 1)}
            print(f"imported: {json.dumps(record['import'])}", file=sys.stderr)
        record["store_file_bytes"] = os.path.getsize(os.path.join(store, "data.mdb"))
        if not args.no_rerun and not args.measure_only:
            seconds, _, _, again = timed_import(store, folder, args.batch)
            record["rerun"] = {"seconds": round(seconds, 2), "written": again["written"],
                               "already_present": again["already_present"]}
            record["replay"] = replay_rate(store)
        if not args.no_memory and not args.measure_only:
            turns_in_memory = memory_turns(turns, args.messages, args.per_session)
            with tempfile.TemporaryDirectory(prefix="convmem-writer-") as other:
                record["writer_only"] = timed_writer(os.path.join(other, "store"), turns_in_memory, args.batch)
            del turns_in_memory
            print(f"bulk writer alone: {json.dumps(record['writer_only'])}", file=sys.stderr)
        record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        if args.serve:
            record["serve"] = serve_startup(store, parent)
        if args.search:
            record["search_unfiltered"] = search(store, questions)
    print(table(record))
    print(json.dumps(record, sort_keys=True))
    return 0


def table(record: dict) -> str:
    lines = [f"store file {record['store_file_bytes'] / 1e6:,.1f} MB; peak RSS {record['peak_rss_mb']} MB"]
    if "import" in record:
        imp = record["import"]
        lines.insert(0, f"import {imp['written']:,} messages: {imp['seconds']} s, {imp['messages_per_s']:,} "
                        f"messages/s (batch {record['batch']:,}; {imp['cpu_us_per_message']} µs CPU a message, "
                        f"{imp['writer_cpu_us_per_message']} µs of it in the writing process)")
    if "rerun" in record:
        lines.append(f"re-run (all present): {record['rerun']['seconds']} s, wrote {record['rerun']['written']}")
        lines.append(f"replay of the store built: {record['replay']['seconds']} s, "
                     f"{record['replay']['events_per_s']:,} events/s "
                     f"({record['replay']['cpu_us_per_event']} µs CPU an event)")
    if "writer_only" in record:
        w = record["writer_only"]
        lines.append(f"bulk writer alone, turns in memory (no files, no parsing; not the import above): "
                     f"{w['written']:,} messages in {w['seconds']} s, {w['messages_per_s']:,} messages/s "
                     f"({w['cpu_us_per_message']} µs CPU a message, {w['writer_cpu_us_per_message']} µs of it "
                     f"in the writing process)")
    if "serve" in record:
        lines.append(f"convmem serve: first answer after {record['serve']['best_first_health_s']} s (best of 3)")
    if "search_unfiltered" in record:
        s = record["search_unfiltered"]
        lines.append(f"search ({s['queries']} queries): p50 {s['p50_ms']} ms, p95 {s['p95_ms']} ms")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
