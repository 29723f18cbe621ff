"""Latency of the MCP server as a host sees it: the SDK client over stdio.

    python -m tools.bench_mcp                       the three measurements below
    python -m tools.bench_mcp --messages 2000 --starts 3 --json OUT
    python -m tools.bench_mcp --http               the same over streamable HTTP
    python -m tools.bench_mcp --only-writes         the sequential writes alone (quick before/after runs)

Everything goes through a real ``convmem serve`` subprocess and the official
SDK client (``mcp.Client`` + ``StdioServerParameters``), so each figure
includes JSON-RPC framing, the pipe, pydantic on both sides and the durable
LMDB commit:

* **write** — ``--writes`` sequential ``write_message`` calls (one in flight),
  real LoCoMo chat turns as content; p50/p95/p99/max per call, and the
  server's CPU time per write (/proc); the client freezes its own heap
  first (``gc.freeze()``) so its own full collections do not count;
* **search** — the store is filled to ``--messages`` turns (LoCoMo's 2,760
  turns, repeated under new session ids; the part not timed as writes is sent
  ``--fill-concurrency`` calls at a time), then every LoCoMo question is one
  ``search_messages`` call (limit 10); p50/p95 per call;
* **start** — process start → ``tools/list`` answered, for a fresh process on
  the filled store, ``--starts`` times for each handshake (``legacy`` is the
  initialize handshake desktop hosts use; ``auto`` is the SDK default); the
  median counts.

Targets: write p50 ≤ 2 ms, search p50 ≤ 5 ms, start median ≤ 1 s.  Prints a
table and one JSON line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

import anyio
from mcp import Client, StdioServerParameters

from tools import mcp_client
from tools.search_bench import DEFAULT_DATA, load_locomo

TARGETS = {"write_message": 2.0, "search_messages": 5.0, "start_legacy": 1000.0}
HTTP_TARGETS = {"write_message": 3.0, "search_messages": 6.0, "start_http": 1000.0}     # issue 13


def server_parameters(store: str) -> StdioServerParameters:
    """``convmem serve`` on ``store``: the console script beside this Python (what a host
    runs), else ``-m server.cli``; warnings and errors only on stderr."""
    return mcp_client.server_parameters(store, console_script=True)


def turns(path: str, n: int) -> Iterator[dict]:
    """``n`` write_message argument sets: LoCoMo turns, repeated under fresh session ids."""
    corpora, _ = load_locomo(path)
    docs = [d for c in corpora for d in c.docs]
    for i, (_key, session, role, text) in enumerate(itertools.islice(itertools.cycle(docs), n)):
        yield {"session_id": f"{session}-r{i // len(docs)}", "role": role, "content": text}


def questions(path: str) -> list[str]:
    corpora, _ = load_locomo(path)
    return [q for c in corpora for q, _ in c.questions]


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def checked(client: Client, name: str, arguments: dict) -> dict:
    is_error, body = mcp_client.body(await client.call_tool(name, arguments))
    if is_error:
        raise RuntimeError(f"{name} failed: {body}")
    return body


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's children still running (the server)."""
    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            pids = f.read().split()
        for pid in pids:
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def timed_calls(client: Client, name: str, argument_sets) -> list[float]:
    """Milliseconds of each call, made one after another.  The client's own heap is
    frozen first, so a full collection in the client is not counted as the server's."""
    gc.collect()
    gc.freeze()
    out = []
    for arguments in argument_sets:
        start = time.perf_counter()
        await checked(client, name, arguments)
        out.append((time.perf_counter() - start) * 1000)
    return out


async def fill(client: Client, argument_sets, concurrency: int) -> None:
    pending = iter(argument_sets)

    async def lane() -> None:
        for arguments in pending:
            await checked(client, "write_message", arguments)
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(lane)


async def time_to_tools(store: str, mode: str) -> float:
    """Milliseconds from spawning the server to an answered ``tools/list``."""
    start = time.perf_counter()
    async with mcp_client.connect(server_parameters(store), mode=mode, cache=None) as client:
        tools = (await client.list_tools()).tools
        elapsed = (time.perf_counter() - start) * 1000
    if len(tools) != 7:
        raise RuntimeError(f"tools/list answered {len(tools)} tools")
    return elapsed


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, max(0, int(p * len(ordered) + 0.5) - 1))], 3)
    return {"n": len(ordered), "p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99),
            "mean": round(statistics.fmean(ordered), 3), "max": round(ordered[-1], 3)}


@contextlib.asynccontextmanager
async def _over_http(store: str):
    """A client of ``convmem serve --http`` on ``store``, and the server's CPU seconds so far."""
    from tools.bench_http import _cpu_seconds
    with mcp_client.http_server(store, log_level="WARNING") as server:
        async with mcp_client.connect_http(server.url, server.token) as client:
            yield client, lambda: _cpu_seconds(server.pid)


@contextlib.asynccontextmanager
async def _over_stdio(store: str):
    async with mcp_client.connect(server_parameters(store), mode="legacy") as client:
        yield client, _children_cpu


async def run(store: str, data: str, messages: int, writes: int, concurrency: int, starts: int,
              http: bool = False, only_writes: bool = False) -> dict:
    argument_sets = turns(os.path.join(data, "locomo-dev.json"), messages)
    results: dict[str, dict] = {}
    async with (_over_http if http else _over_stdio)(store) as (client, server_cpu):
        progress(f"write_message: {writes} sequential calls")
        cpu0 = server_cpu()
        results["write_message"] = summary(await timed_calls(
            client, "write_message", itertools.islice(argument_sets, writes)))
        results["write_message"]["server_cpu_ms"] = round((server_cpu() - cpu0) * 1000 / writes, 3)
        if only_writes:
            health = await checked(client, "get_system_health", {})
            return {"messages": health["active_messages"], "log_size": health["log_size"], "results": results,
                    "load": [round(x, 2) for x in os.getloadavg()]}
        progress(f"filling to {messages} messages, {concurrency} calls in flight")
        await fill(client, argument_sets, concurrency)
        health = await checked(client, "get_system_health", {})
        qs = questions(os.path.join(data, "locomo-dev.json"))
        progress(f"search_messages: {len(qs)} LoCoMo questions over {health['active_messages']} messages")
        results["search_messages"] = summary(await timed_calls(
            client, "search_messages", ({"query": q, "limit": 10} for q in qs)))
    if http:
        from tools.bench_http import time_to_initialize
        progress(f"start → initialize answered over HTTP: {starts} runs")
        results["start_http"] = summary([time_to_initialize(store) for _ in range(starts)])
    for mode in ("legacy", "auto") if not http else ():
        progress(f"start → tools/list ({mode}): {starts} runs")
        results[f"start_{mode}"] = summary([await time_to_tools(store, mode) for _ in range(starts)])
    return {"messages": health["active_messages"], "log_size": health["log_size"], "results": results,
            "load": [round(x, 2) for x in os.getloadavg()]}


def table(record: dict, targets: dict[str, float] = TARGETS) -> str:
    rows = [f"{'measure':<18}{'n':>7}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}{'mean ms':>10}{'target p50':>12}"]
    for name, s in record["results"].items():
        target = targets.get(name)
        mark = "" if target is None else f"≤ {target:g} {'ok' if s['p50'] <= target else 'MISSED'}"
        rows.append(f"{name:<18}{s['n']:>7}{s['p50']:>10.2f}{s['p95']:>10.2f}{s['max']:>10.2f}"
                    f"{s['mean']:>10.2f}  {mark}")
    if "server_cpu_ms" in record["results"].get("write_message", {}):
        rows.append(f"(server CPU per sequential write: {record['results']['write_message']['server_cpu_ms']} ms)")
    rows.append(f"(store: {record['messages']} messages, events sub-database {record['log_size']} bytes; "
                f"start rows: median of the runs; load average {' '.join(map(str, record.get('load', [])))})")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_mcp", description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=10_000, help="messages in the store for search (10000)")
    p.add_argument("--writes", type=int, default=1000, help="sequential write_message calls timed (1000)")
    p.add_argument("--fill-concurrency", type=int, default=8, help="calls in flight while filling (8)")
    p.add_argument("--starts", type=int, default=7, help="process starts per handshake mode (7)")
    p.add_argument("--data", default=DEFAULT_DATA, help="directory holding locomo-dev.json")
    p.add_argument("--store", default=None, help="store directory to use (default: a fresh temporary one)")
    p.add_argument("--json", default=None, help="also write the JSON record to this file")
    p.add_argument("--http", action="store_true", help="over streamable HTTP (convmem serve --http) instead of stdio")
    p.add_argument("--only-writes", action="store_true", help="time the sequential writes only (no fill, search "
                   "or start rows): for quick before/after runs")
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        if args.store is None:
            tmp = tempfile.mkdtemp(prefix="convmem-bench-")
            stack.callback(shutil.rmtree, tmp, True)
            store = os.path.join(tmp, "store")
        else:
            store = args.store
        record = anyio.run(run, store, args.data, max(args.messages, args.writes), args.writes,
                           args.fill_concurrency, args.starts, args.http, args.only_writes)
    print(table(record, HTTP_TARGETS if args.http else TARGETS))
    line = json.dumps({"bench": "mcp_http" if args.http else "mcp_stdio", **record}, separators=(",", ":"))
    print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
