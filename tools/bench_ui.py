"""Page times of the browser pages (``/ui/``) on a store of 100,000 messages.

    python -m tools.bench_ui                         build a temporary store, measure, delete it
    python -m tools.bench_ui --store DIR             keep the store in DIR (reused when it exists)
    python -m tools.bench_ui --messages 20000        a smaller store

The store: the LoCoMo dev turns (``--data``, as :mod:`tools.search_scale`
writes them: kinds cycle, importance spreads) in ``--messages`` minus 1,000
messages, plus one session of 1,000 messages (``bench-big``, the same turns,
with a tool call folded every tenth message and a relation every fifth); their
times spread evenly over the last 365 days, so the health chart has a bar a day.
Built one transaction per 1,000 messages (as :mod:`tools.search_scale` builds;
the pages are then served by another process).

Then a real ``convmem serve --http`` child, signed in once like a browser,
and each page fetched over loopback HTTP by one client (wall-clock from
request to the whole body read): the sessions list, the first and the last page
of the 1,000-message session (``HISTORY_PAGE`` messages a page), 100 searches (LoCoMo questions; unfiltered, and
with three of six kinds plus a minimum importance), a message's page, and the
health page with its chart.  ``--rounds`` fetches of each fixed page after one
warm-up.  Also, in this process: the per-day count the chart needs
(:meth:`MemoryService.written_per_day`), over the chart's 90 days
(``per_day_chart``) and over every day of the store (``per_day_all``), the whole
1,000-message session read and rendered as one page (``whole_session``), and
the two tool calls of a message's page, context and revisions
(``message_reads``, in microseconds).

Output: one table, then one JSON record, on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from itertools import islice

from eventstore.events import KINDS, Message, MessageWritten, Metadata
from tools._workdir import add_store_options, workdir
from tools.search_scale import DEFAULT_DATA, load

BIG = "bench-big"
BIG_SIZE = 1000
BATCH = 1000
DAY_MS = 86_400_000
SPAN_DAYS = 365


def _turns(data: str, total: int):
    """(session, role, content, metadata) for the whole store, the big session last."""
    turns, _ = load(data)
    for i in range(total - BIG_SIZE):
        copy, (sample, number, role, content) = i // len(turns), turns[i % len(turns)]
        yield (f"{sample}-s{number}-c{copy}", role, content,
               Metadata(memory_kind=KINDS[i % len(KINDS)], importance=i * 37 % 101))
    for i in range(BIG_SIZE):
        _, _, role, content = turns[i % len(turns)]
        if i % 10 == 9:
            yield BIG, "assistant", f"[tool_use Bash]\n{{\"command\": \"grep -rn {i} .\"}}", Metadata(
                tool_call_id=f"call-{i}", tags=("tool_use", "tool:Bash"))
        else:
            yield BIG, role, content, Metadata(tags=("bench",))


def build(path: str, data: str, total: int) -> dict:
    from server.service import MemoryService
    start = time.perf_counter()
    first_ms = int(time.time() * 1000) - SPAN_DAYS * DAY_MS
    step = SPAN_DAYS * DAY_MS // total
    service = MemoryService(path)
    try:
        rows, written, previous = _turns(data, total), 0, None
        while batch := list(islice(rows, BATCH)):
            def command(w, batch=batch, at=written):
                nonlocal previous
                for n, (session, role, content, meta) in enumerate(batch):
                    ts = first_ms + (at + n) * step
                    if session == BIG and previous is not None and (at + n) % 5 == 0:
                        meta = Metadata(tags=meta.tags, tool_call_id=meta.tool_call_id,
                                        relations=(("related_to", previous),))
                    mid = w.new_ids([ts])[0]
                    if session == BIG:
                        previous = mid
                    w.append([MessageWritten(Message(mid, session, role, content, ts, ts, 1, meta))])
            service.store.execute(command)
            written += len(batch)
            print(f"\rbuilt {written}/{total}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    finally:
        service.close()
    return {"seconds": round(time.perf_counter() - start, 1)}


def _stats(samples: list[float]) -> dict:
    ordered = sorted(samples)
    at = lambda p: ordered[min(len(ordered) - 1, int(p * len(ordered)))]
    return {"n": len(ordered), "p50_ms": round(at(0.5), 1), "p95_ms": round(at(0.95), 1),
            "max_ms": round(ordered[-1], 1), "mean_ms": round(statistics.fmean(ordered), 1)}


def per_day(path: str, rounds: int, days: int) -> dict:
    from server.service import MemoryService
    service = MemoryService(path)
    try:
        times = []
        for _ in range(rounds + 1):
            start = time.perf_counter()
            counted, older = service.written_per_day(days)
            times.append(1000 * (time.perf_counter() - start))
        return {**_stats(times[1:]), "days": len(counted), "messages": sum(counted.values()), "older": older}
    finally:
        service.close()


def whole_session(path: str, rounds: int) -> dict:
    """In this process: the big session's 1,000 messages read (the history view) and rendered
    as one page, which the pages do not do (they page it by ``HISTORY_PAGE``)."""
    from server.service import MemoryService
    from server.tools import BY_NAME
    from server.ui.app import environment
    service = MemoryService(path)
    template = environment().get_template("session.html")
    try:
        times = []
        for _ in range(rounds + 1):
            start = time.perf_counter()
            body = BY_NAME["read_messages"].call(service, {"view": "history", "session_id": BIG, "limit": BIG_SIZE})
            template.render(session_id=BIG, messages=body["history"], next_cursor=None, deleted=None, csrf="",
                            signed_in=True, path="/ui/", principal="default")
            times.append(1000 * (time.perf_counter() - start))
        return _stats(times[1:])
    finally:
        service.close()


def message_reads(path: str, rounds: int) -> dict:
    """In this process: the two tool calls a message's page makes (``view=context`` and
    ``view=revisions``) for the big session's 101st message, ``50 * rounds`` of each,
    interleaved; medians and p95s in microseconds."""
    from server.service import MemoryService
    from server.tools import BY_NAME
    call = BY_NAME["read_messages"].call
    service = MemoryService(path)
    try:
        history = call(service, {"view": "history", "session_id": BIG, "limit": 101})["history"]
        mid = history[-1]["message_id"]
        views = {"context": {"view": "context", "message_id": mid, "before": 3, "after": 3, "relation_depth": 1},
                 "revisions": {"view": "revisions", "message_id": mid}}
        times: dict[str, list[float]] = {name: [] for name in views}
        for _ in range(50 * rounds):
            for name, args in views.items():
                start = time.perf_counter()
                call(service, args)
                times[name].append(1e6 * (time.perf_counter() - start))
        out = {}
        for name, samples in times.items():
            ordered = sorted(samples)
            out[f"{name}_p50_us"] = round(ordered[len(ordered) // 2], 1)
            out[f"{name}_p95_us"] = round(ordered[int(0.95 * len(ordered))], 1)
        return out
    finally:
        service.close()


def measure(path: str, data: str, rounds: int) -> dict:
    import httpx2

    from tools.mcp_client import http_server
    _, questions = load(data)
    questions = questions[:100]
    record: dict = {}
    with http_server(path, log_level="WARNING") as server:
        base = server.url.rsplit("/mcp", 1)[0]
        with httpx2.Client(base_url=base, timeout=60) as client:
            client.post("/ui/signin", data={"token": server.token, "next": "/ui/"}, headers={"Origin": base})

            def timed(url: str, params: dict | None = None) -> float:
                start = time.perf_counter()
                answer = client.get(url, params=params)
                spent = 1000 * (time.perf_counter() - start)
                if answer.status_code != 200:
                    raise RuntimeError(f"{url}: HTTP {answer.status_code}")
                return spent

            first = client.get(f"/ui/sessions/{BIG}").text
            message_id = re.findall(r'href="/ui/messages/([0-9A-Z]{26})"', first)[100]
            record["session_page_bytes"] = len(first.encode())
            last, later = f"/ui/sessions/{BIG}", re.search(r'class="next" href="([^"]+)"', first)
            while later:                                # the session's last page, by its "later" links
                last = later.group(1).replace("&amp;", "&")
                later = re.search(r'class="next" href="([^"]+)"', client.get(last).text)
            pages = {"sessions": "/ui/", "session_first": f"/ui/sessions/{BIG}", "session_last": last,
                     "message": f"/ui/messages/{message_id}", "health": "/ui/health"}
            for name, url in pages.items():
                timed(url)
                record[name] = _stats([timed(url) for _ in range(rounds)])
            filtered = {"kind": list(KINDS[:3]), "min_importance": "50"}
            for name, extra in (("search", {}), ("search_filtered", filtered)):
                for q in questions[:10]:
                    timed("/ui/search", {"q": q, **extra})
                record[name] = _stats([timed("/ui/search", {"q": q, **extra}) for q in questions])
    return record


def table(record: dict) -> str:
    lines = [f"{'page':<18}{'n':>5}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'mean ms':>9}"]
    for name in ("sessions", "session_first", "session_last", "message", "search", "search_filtered", "health",
                 "per_day_chart", "per_day_all", "whole_session"):
        r = record[name]
        lines.append(f"{name:<18}{r['n']:>5}{r['p50_ms']:>9.1f}{r['p95_ms']:>9.1f}{r['max_ms']:>9.1f}"
                     f"{r['mean_ms']:>9.1f}")
    reads = record["message_reads"]
    return "\n".join([
        *lines,
        f"a message's page, in process: view=context {reads['context_p50_us']} us p50 "
        f"({reads['context_p95_us']} p95), view=revisions {reads['revisions_p50_us']} us p50 "
        f"({reads['revisions_p95_us']} p95)",
        f"messages {record['messages']:,}; a page of the 1,000-message session is "
        f"{record['session_page_bytes']:,} bytes; load average {record['load_average']}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_ui", description=__doc__.split("\n")[0])
    add_store_options(parser, DEFAULT_DATA)
    parser.add_argument("--rounds", type=int, default=40, help="fetches of each fixed page (default 40)")
    args = parser.parse_args(argv)
    if args.messages <= BIG_SIZE:
        parser.error(f"--messages must be more than {BIG_SIZE}")
    record: dict = {"benchmark": "ui", "messages": args.messages, "rounds": args.rounds}
    with workdir(args.store, "convmem-ui-bench-") as (path, _):
        if not os.path.exists(os.path.join(path, "data.mdb")):
            record["build"] = build(path, args.data, args.messages)
        from server.ui.chart import DAYS
        record["per_day_chart"] = per_day(path, args.rounds, DAYS)
        record["per_day_all"] = per_day(path, args.rounds, SPAN_DAYS + 1)
        record["whole_session"] = whole_session(path, args.rounds)
        record["message_reads"] = message_reads(path, args.rounds)
        record["messages"] = record["per_day_all"]["messages"]
        record.update(measure(path, args.data, args.rounds))
        record["load_average"] = round(os.getloadavg()[0], 2)
    print(table(record))
    print(json.dumps(record, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
