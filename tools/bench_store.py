"""Benchmark of the event store: durable writes, replay, and size on disk.

    python -m tools.bench_store [--writes N] [--events N] [--data PATH] [--keep DIR]

Three numbers, each against a target:

* **writes/s** — in-process ``MemoryService.write_message`` calls of ~200-byte
  English messages, each its own durable (fsynced) transaction (target ≥ 1,500);
* **replay events/s** — ``EventStore.rebuild_projections`` on a store of
  ``--events`` events (target ≥ 20,000), as ``convmem replay`` runs it (the
  collector paused for the command); and again, reported beside it, with
  the collector on, as a serving process replays (a replica catching up);
* **size** — ``data.mdb`` bytes and used bytes (``(last_pgno + 1) · psize``)
  of the replay store as written (before the replay) against the raw UTF-8
  bytes of the stored content as written (target ≤ 6×), with each
  sub-database's share.

``--no-terms`` is a diagnostic: it switches the full-text index off to show
what it costs in each number.

The text is real conversation: consecutive turns of LoCoMo dialogues, cut at a
word boundary to about 200 bytes.  A table goes to stdout, then one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator

from eventstore.events import Message, MessageWritten, Metadata
from eventstore.store import WriteTx
from server.commands._common import paused_collector
from server.service import MemoryService

DEFAULT_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "locomo-dev.json")
TARGETS = {"writes_per_s": 1500, "replay_events_per_s": 20000, "size_ratio": 6.0}
_FALLBACK = ("The deployment failed again last night because the billing service could not reach "
             "the database; we rolled back, added a retry with backoff, and scheduled a review of "
             "the connection pool settings for Thursday morning.")


def _turns(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return [_FALLBACK]
    out = []
    for conv in data:
        for key, turns in conv.get("conversation", {}).items():
            if key.startswith("session_") and isinstance(turns, list):
                out.extend(t["text"] for t in turns if isinstance(t, dict) and t.get("text"))
    return out or [_FALLBACK]


def messages_of(path: str, size: int = 200) -> Iterator[str]:
    """Endless ~``size``-byte messages made of consecutive turns, cut at a space."""
    turns = _turns(path)
    i = 0
    while True:
        text = ""
        while len(text.encode("utf-8")) < size:
            text = (text + " " + turns[i % len(turns)]).strip()
            i += 1
        cut = text.encode("utf-8")[:size].decode("utf-8", "ignore")
        yield cut.rsplit(" ", 1)[0] if " " in cut else cut


def bench_writes(path: str, texts: Iterator[str], n: int) -> tuple[float, int]:
    svc = MemoryService(path)
    try:
        raw = 0
        start = time.perf_counter()
        for i in range(n):
            text = next(texts)
            raw += len(text.encode("utf-8"))
            svc.write_message(f"session-{i // 50}", "user" if i % 2 else "assistant", text, Metadata())
        elapsed = time.perf_counter() - start
    finally:
        svc.close()
    return n / elapsed, raw


def fill(path: str, texts: Iterator[str], n: int, batch: int = 1) -> int:
    """Write ``n`` messages, ``batch`` per durable transaction (1: as the server
    writes them, so the size is what a user's store would have); returns raw bytes."""
    svc = MemoryService(path)
    raw = 0
    try:
        while n > 0:
            chunk = [next(texts) for _ in range(min(batch, n))]
            raw += sum(len(t.encode("utf-8")) for t in chunk)
            svc.store.execute(lambda w, chunk=chunk, first=n: _append_all(w, chunk, first))
            n -= len(chunk)
    finally:
        svc.close()
    return raw


def _append_all(w: WriteTx, texts: list[str], first: int) -> None:
    for i, text in enumerate(texts, first):
        now = w.now_ms()
        mid = w.new_ids([now])[0]
        session = f"session-{i % 400}"
        w.append([MessageWritten(Message(mid, session, "user", text, now, now, 1, Metadata()))])


def bench_replay(path: str, collector: bool = False) -> tuple[float, int, float, float]:
    """(events/s, events, CPU seconds of this process, and of the children that ended meanwhile:
    the index's second process); ``collector``: with the cyclic collector on, as in a serving process."""
    svc = MemoryService(path)
    try:
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        with contextlib.nullcontext() if collector else paused_collector():
            done = svc.store.rebuild_projections()
        elapsed = time.perf_counter() - start
        me2, kids2 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        svc.close()
    own = me2.ru_utime + me2.ru_stime - me.ru_utime - me.ru_stime
    return done / elapsed, done, own, kids2.ru_utime + kids2.ru_stime - kids.ru_utime - kids.ru_stime


def sizes(path: str) -> dict[str, int]:
    """File bytes, used bytes (high-water page), and each sub-database's pages."""
    svc = MemoryService(path)
    try:
        out = {"file_bytes": svc.store.file_size(), "used_bytes": svc.store.used_bytes()}
        with svc.store.read() as tx:
            for name in ["events", *svc.store.projector.db_specs]:
                out[f"db_{name}"] = svc.store.db_bytes(tx, name)
    finally:
        svc.close()
    return out


def run(writes: int, events: int, data: str, workdir: str, batch: int = 1) -> dict:
    texts = messages_of(data)
    w_rate, _ = bench_writes(os.path.join(workdir, "writes"), texts, writes)
    big = os.path.join(workdir, "replay")
    raw = fill(big, texts, events, batch)
    sz = sizes(big)
    r_rate, replayed, own, kids = bench_replay(big)
    on_rate, _, _, _ = bench_replay(big, collector=True)
    live = sum(v for k, v in sz.items() if k.startswith("db_"))
    return {"writes": writes, "writes_per_s": round(w_rate), "events": replayed,
            "replay_events_per_s": round(r_rate),
            "replay_collector_on_events_per_s": round(on_rate), "raw_content_bytes": raw, **sz,
            "replay_cpu_us_per_event": round(1e6 * (own + kids) / max(replayed, 1), 1),
            "replay_own_cpu_us_per_event": round(1e6 * own / max(replayed, 1), 1),
            "live_bytes": live, "size_ratio_live": round(live / raw, 2),
            "size_ratio_file": round(sz["file_bytes"] / raw, 2),
            "size_ratio": round(sz["used_bytes"] / raw, 2)}


def table(r: dict) -> str:
    ok = lambda good: "ok" if good else "MISSED"
    rows = [
        ("durable writes/s", f"{r['writes_per_s']:,}", f"≥ {TARGETS['writes_per_s']:,}",
         ok(r["writes_per_s"] >= TARGETS["writes_per_s"])),
        (f"replay events/s ({r['events']:,} events)", f"{r['replay_events_per_s']:,}",
         f"≥ {TARGETS['replay_events_per_s']:,}", ok(r["replay_events_per_s"] >= TARGETS["replay_events_per_s"])),
        ("replay events/s, collector on (serving)", f"{r['replay_collector_on_events_per_s']:,}", "", ""),
        ("used bytes / raw content", f"{r['size_ratio']}×", f"≤ {TARGETS['size_ratio']}×",
         ok(r["size_ratio"] <= TARGETS["size_ratio"])),
        ("data.mdb bytes / raw content", f"{r['size_ratio_file']}×", "", ""),
        ("live pages (all sub-databases) / raw", f"{r['size_ratio_live']}×", "", ""),
    ]
    lines = [f"{'measure':<40} {'value':>12} {'target':>10}  result"]
    lines += [f"{a:<40} {b:>12} {c:>10}  {d}" for a, b, c, d in rows]
    lines.append(f"replay CPU {r['replay_cpu_us_per_event']} µs an event, {r['replay_own_cpu_us_per_event']} µs "
                 "of it in the replaying process")
    lines.append(f"raw content {r['raw_content_bytes']:,} B; data.mdb {r['file_bytes']:,} B; "
                 f"used {r['used_bytes']:,} B")
    dbs = sorted(((k[3:], v) for k, v in r.items() if k.startswith("db_")), key=lambda kv: -kv[1])
    lines.append("sub-databases: " + ", ".join(f"{k} {v:,}" for k, v in dbs))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_store", description=__doc__.split("\n")[0])
    p.add_argument("--writes", type=int, default=2000, help="durable writes to time (default 2000)")
    p.add_argument("--events", type=int, default=20000, help="events in the replayed store (default 20000)")
    p.add_argument("--data", default=DEFAULT_DATA, help="LoCoMo JSON to take text from")
    p.add_argument("--keep", default=None, help="directory to build the stores in (kept afterwards)")
    p.add_argument("--fill-batch", type=int, default=1,
                   help="messages per transaction when building the replay store (default 1, as "
                        "the server writes; more is faster to set up but leaves more free pages)")
    p.add_argument("--no-terms", action="store_true",
                   help="diagnostic only: skip the full-text index, to see what it costs")
    args = p.parse_args(argv)
    if args.no_terms:
        from projections.index.live import IndexWork
        IndexWork.index = IndexWork.unindex = lambda *a, **k: None  # type: ignore[method-assign]
    workdir = args.keep or tempfile.mkdtemp(prefix="convmem-bench-")
    try:
        result = run(args.writes, args.events, args.data, workdir, args.fill_batch)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(result))
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
