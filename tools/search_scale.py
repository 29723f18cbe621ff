"""Search latency and memory at scale: 100,000 chat messages, in-process.

    python -m tools.search_scale                       build a temporary store, measure, delete it
    python -m tools.search_scale --store DIR           keep the store in DIR (reused when it exists)
    python -m tools.search_scale --messages 20000      a smaller run

The corpus is the LoCoMo dev conversations (``--data``, default
``../shared/data``) replicated until there are ``--messages`` messages: copy c
of a turn goes to session ``"{sample}-s{n}-c{c}"``, content
``"{speaker}: {text}"``, as the retrieval benchmark writes them.  The queries
are every LoCoMo question (all categories), each searched with no filter and
a limit of 10 through :meth:`MemoryService.search` — the same call the MCP
tool makes, result rendering included (``--write-between``: after a
``write_message`` each, untimed, so that no search finds what an earlier one
kept for its snapshot; it adds messages to the store).  A first pass warms the page cache;
the second is timed.  Messages get a memory kind (cycling through the six) and
an importance (spread over 0–100) so that three filtered runs show the filter
paths: one session (selective: answered from the session's index list),
three of the six kinds (half the store: each candidate is checked instead),
``min_importance`` 90 (a tenth: a set of allowed documents), and a time
window holding the middle 1% of the messages (``after``/``before``: read from
the timestamp index).
A last pass records what evaluation did per query (lists, postings read,
random probes, pending documents; see ``projections.search.Trace``).

**How the store is built.**  100,000 ``write_message`` calls would each wait
for their own fsync (minutes).  The build instead runs in a child
process and calls ``store.execute`` once per batch of ``BATCH`` messages,
appending one ``MessageWritten`` per message exactly as
``MemoryService.write_message`` builds it (id and clock from the write
transaction) — the same events and projections, fewer commits.  Running it in
a child keeps its memory out of the measured process.

Output: one table and one JSON record on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import resource
import statistics
import sys
import time
from itertools import islice

from eventstore.events import KINDS, Message, MessageWritten, Metadata
from tools._workdir import add_store_options, workdir

BATCH = 1000
LIMIT = 10
WRITES_SESSION = "search-scale-writes"      # where --write-between writes
DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
_SESSION = re.compile(r"session_(\d+)")


def load(data: str) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """LoCoMo turns as (sample, session number, role, content) and every question."""
    with open(os.path.join(data, "locomo-dev.json"), encoding="utf-8") as fh:
        samples = json.load(fh)
    turns, questions = [], []
    for sample in samples:
        conv = sample["conversation"]
        roles = {conv.get("speaker_a"): "user", conv.get("speaker_b"): "assistant"}
        for number, key in sorted((int(m.group(1)), k) for k in conv if (m := _SESSION.fullmatch(k))):
            for turn in conv[key]:
                turns.append((sample["sample_id"], str(number), roles.get(turn["speaker"], "user"),
                              f"{turn['speaker']}: {turn['text']}"))
        questions.extend(qa["question"] for qa in sample["qa"])
    return turns, questions


def _messages(turns, total: int):
    """(session, role, content, metadata): kinds cycle, importance spreads over 0–100."""
    for i in range(total):
        copy, (sample, number, role, content) = divmod(i, len(turns))[0], turns[i % len(turns)]
        meta = Metadata(memory_kind=KINDS[i % len(KINDS)], importance=i * 37 % 101)
        yield f"{sample}-s{number}-c{copy}", role, content, meta


def build(path: str, data: str, total: int) -> dict:
    """Write ``total`` messages in batches of one transaction each (runs in a child)."""
    from server.service import MemoryService
    turns, _ = load(data)
    start = time.perf_counter()
    service = MemoryService(path)
    try:
        messages = _messages(turns, total)
        for first in range(0, total, BATCH):
            batch = list(islice(messages, BATCH))

            def command(w, batch=batch):
                for session, role, content, meta in batch:
                    now = w.now_ms()
                    w.append([MessageWritten(Message(w.new_ids([now])[0], session, role, content, now, now, 1, meta))])
            service.store.execute(command)
            print(f"\rbuilt {min(first + BATCH, total)}/{total}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        health = service.health()
    finally:
        service.close()
    return {"seconds": round(time.perf_counter() - start, 1), "active_messages": health["active_messages"],
            "file_bytes": os.path.getsize(os.path.join(path, "data.mdb")),
            "search_index_bytes": health["memory_estimate"]["search_index_bytes"],
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _build_child(path: str, data: str, total: int, queue) -> None:
    queue.put(build(path, data, total))


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    at = lambda p: ordered[min(len(ordered) - 1, int(p * len(ordered)))]
    return {"queries": len(ordered), "p50_ms": round(at(0.50), 2), "p95_ms": round(at(0.95), 2),
            "p99_ms": round(at(0.99), 2), "max_ms": round(ordered[-1], 2),
            "mean_ms": round(statistics.fmean(ordered), 2)}


def measure(service, questions: list[str], flt, boost: bool = True, write: bool = False) -> dict[str, float]:
    """Wall-clock percentiles, and the CPU time of this thread per query
    (``cpu_p50_ms``, ``cpu_p95_ms``: less disturbed by other processes on a
    shared machine, though still by their use of the caches).  ``write``: a
    ``write_message`` (not timed) before each search, so each searches a
    snapshot no search has seen."""
    timings, cpu = [], []
    for i, question in enumerate(questions):
        if write:
            service.write_message(WRITES_SESSION, "user", f"note {i}: {question}", Metadata())
        start, start_cpu = time.perf_counter(), time.thread_time()
        service.search(question, flt, 0, LIMIT, boost=boost)
        cpu.append(1000 * (time.thread_time() - start_cpu))
        timings.append(1000 * (time.perf_counter() - start))
    spent = _percentiles(cpu)
    return {**_percentiles(timings), "cpu_p50_ms": spent["p50_ms"], "cpu_p95_ms": spent["p95_ms"]}


def work(service, questions: list[str], boost: bool = True) -> dict[str, float]:
    """What evaluation did, per query on average (``projections.search.Trace``)."""
    from projections import search
    traces = []
    for question in questions:
        trace = search.Trace()
        with service.store.read() as tx:
            search.search(tx, question, search.Filters(), LIMIT, trace, search.Options(context=boost))
        traces.append(trace)
    n = len(traces)
    return {"lists": round(sum(t.lists for t in traces) / n, 1),
            "postings_in_lists": round(sum(t.postings for t in traces) / n),
            "postings_read": round(sum(t.read for t in traces) / n),
            "probes": round(sum(t.probes for t in traces) / n),
            "share_read": round(sum(t.read for t in traces) / max(1, sum(t.postings for t in traces)), 3),
            "pending": round(sum(t.pending for t in traces) / n)}


def run(path: str, data: str, total: int, boost: bool = True, write: bool = False) -> dict:
    from projections.search import Filters
    from server.service import MemoryService
    _, questions = load(data)
    record: dict = {"benchmark": "search_scale", "messages": total, "limit": LIMIT, "context_boost": boost,
                    "write_between": write}
    service = MemoryService(path)
    try:
        record["active_messages"] = service.health()["active_messages"]
        total = record["messages"] = record["active_messages"] or total     # a reused store's own size
        record["rss_mb_opened"] = round(_rss_mb(), 1)
        measure(service, questions, Filters(), boost)                       # warm-up
        record["unfiltered"] = measure(service, questions, Filters(), boost, write)
        session = f"conv-26-s1-c{max(0, total // 2760 - 1)}"
        record["session_filter"] = measure(service, questions, Filters(session_id=session), boost, write)
        record["kinds_filter"] = measure(service, questions, Filters(kinds=frozenset(KINDS[:3])), boost, write)
        record["importance_filter"] = measure(service, questions, Filters(min_importance=90), boost, write)
        after, before = _middle_window(service, 0.01)
        record["time_filter"] = measure(service, questions, Filters(after=after, before=before), boost, write)
        record["work"] = work(service, questions, boost)
        record["rss_mb"] = round(_rss_mb(), 1)
        record["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    finally:
        service.close()
    return record


def _middle_window(service, share: float) -> tuple[int, int]:
    """(after, before): the middle ``share`` of the messages by timestamp."""
    from projections.index.layout import TIMES
    with service.store.read() as tx, tx.txn.cursor(db=tx.db(TIMES)) as cur:
        stamps = [int.from_bytes(k[:8], "big") for k in cur.iternext(values=False)]
    if not stamps:
        return 0, 0
    mid, half = len(stamps) // 2, max(1, int(len(stamps) * share / 2))
    return stamps[max(0, mid - half)], stamps[min(len(stamps) - 1, mid + half)]


def table(record: dict) -> str:
    lines = [f"{'run':<18}{'queries':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}{'mean ms':>9}"
             f"{'cpu p50':>9}{'cpu p95':>9}"]
    for name in ("unfiltered", "session_filter", "kinds_filter", "importance_filter", "time_filter"):
        r = record[name]
        lines.append(f"{name:<18}{r['queries']:>8}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{r['p99_ms']:>9.2f}"
                     f"{r['max_ms']:>9.2f}{r['mean_ms']:>9.2f}{r['cpu_p50_ms']:>9.2f}{r['cpu_p95_ms']:>9.2f}")
    w = record["work"]
    lines.append(f"messages {record['active_messages']:,}; RSS {record['rss_mb']} MB "
                 f"(peak {record['peak_rss_mb']} MB, {record['rss_mb_opened']} MB after opening)")
    lines.append(f"per query: {w['lists']} lists holding {w['postings_in_lists']:,} postings; read "
                 f"{w['postings_read']:,} ({100 * w['share_read']:.1f}%) + {w['probes']} probes; "
                 f"{w['pending']} pending documents scored from their records")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.search_scale", description=__doc__.split("\n")[0])
    add_store_options(parser, DEFAULT_DATA)
    parser.add_argument("--no-context", action="store_true",
                        help="rank by the own fields alone (no context boost), for comparison")
    parser.add_argument("--write-between", action="store_true",
                        help=f"write a message (session {WRITES_SESSION!r}, not timed) before every timed search: "
                             "each search then sees a new snapshot; this ADDS messages to the store")
    args = parser.parse_args(argv)
    built = None
    with workdir(args.store, "convmem-scale-") as (path, _):
        if not os.path.exists(os.path.join(path, "data.mdb")):
            ctx = multiprocessing.get_context("spawn")
            queue = ctx.Queue()
            child = ctx.Process(target=_build_child, args=(path, args.data, args.messages, queue))
            child.start()
            built = queue.get()
            child.join()
        record = run(path, args.data, args.messages, boost=not args.no_context, write=args.write_between)
        record["build"] = built or "reused"
    print(table(record))
    print(json.dumps(record, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
