"""Latency of the MCP server as a host sees it: the SDK client over stdio.

    python -m tools.bench_mcp                       the three measurements below
    python -m tools.bench_mcp --messages 2000 --starts 3 --json OUT
    python -m tools.bench_mcp --http               the same over streamable HTTP
    python -m tools.bench_mcp --only-writes         the sequential writes alone (quick before/after runs)
    python -m tools.bench_mcp --only-writes --writes 300 --callgrind OUT
                                                    the server under callgrind: instructions a write
    python -m tools.bench_mcp --only-writes --no-fastcall
                                                    every tools/call through the SDK's dispatch
    python -m tools.bench_mcp --only-writes --sdk-stdio
                                                    the SDK's own stdio transport (tools.sdk_stdio)

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

With ``--callgrind OUT`` the server runs under ``valgrind --tool=callgrind``
(all its threads in one count), ``--warmup`` writes go first, then its
counters are zeroed, the timed writes run, and the counts are dumped to
``OUT.*``: the row gains ``server_instructions``, instructions a write (each
zero and dump is sent while a ``ping`` wakes the idle server, whose handling
falls partly inside the count; its times are valgrind's, not the server's).

The server is ``convmem`` beside the Python running this (a virtual
environment's own script), else ``python -m server.cli`` from this tree; the
command is printed on stderr.

Targets: write p50 ≤ 2 ms, search p50 ≤ 5 ms, start median ≤ 1 s.  Prints a
table and one JSON line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import glob
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator

import anyio
from mcp import Client, StdioServerParameters

from tools import mcp_client
from tools._proc import REPO
from tools.search_bench import DEFAULT_DATA, load_locomo

TARGETS = {"write_message": 2.0, "search_messages": 5.0, "start_legacy": 1000.0}
HTTP_TARGETS = {"write_message": 3.0, "search_messages": 6.0, "start_http": 1000.0}


def server_parameters(store: str, *, fastcall: bool = True, callgrind: str | None = None,
                      sdk_stdio: bool = False) -> StdioServerParameters:
    """``convmem serve`` on ``store``: the console script beside this Python (what a host
    runs), else ``-m server.cli``; warnings and errors only on stderr.  ``fastcall=False``:
    ``CONVMEM_STDIO_FASTCALL=0``; ``callgrind``: under callgrind, its output files named so;
    ``sdk_stdio``: the same server over the SDK's own stdio transport (:mod:`tools.sdk_stdio`)."""
    params = mcp_client.server_parameters(store, console_script=callgrind is None)
    if sdk_stdio:
        params.command, params.args = sys.executable, ["-m", "tools.sdk_stdio", "--store", store]
    if callgrind is not None:
        params.args = [params.command, *params.args]
        params.command = "valgrind"
        params.args[:0] = ["--tool=callgrind", f"--callgrind-out-file={callgrind}", "--quiet"]
    # the console script imports the tree it was installed from (an editable install maps
    # ``server`` to it), not necessarily this one (a git worktree): this tree first
    params.env = {"PYTHONPATH": REPO}
    if not fastcall:
        params.env["CONVMEM_STDIO_FASTCALL"] = "0"
    return params


class Callgrind:
    """Zeroes and dumps the counters of the server running under callgrind (the child of
    this process).  callgrind reads its commands only while the server runs code, so a
    ``ping`` is sent meanwhile to wake the idle event loop."""

    def __init__(self, out: str) -> None:
        self.out = out

    async def command(self, client: Client, option: str) -> None:
        (pid,) = _children()
        control = subprocess.Popen(["callgrind_control", option, str(pid)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        while control.poll() is None:
            with warnings.catch_warnings():           # ping: deprecated at 2026-07-28, served in legacy mode
                warnings.simplefilter("ignore")
                await client.send_ping()
            await anyio.sleep(0.05)
        if control.returncode:
            raise RuntimeError(f"callgrind_control {option} {pid} failed")

    def instructions(self) -> int:
        """The instructions of the last dump (its ``totals:`` line)."""
        dumps = sorted(glob.glob(self.out + ".*"), key=os.path.getmtime)
        with open(dumps[-1], encoding="utf-8") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith(("totals:", "summary:")))


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


def _children() -> list[str]:
    """The pids of this process's children still running (the server)."""
    pids = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            pids += f.read().split()
    return pids


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's children still running (the server)."""
    total = 0.0
    for pid in _children():
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
    return {"n": len(ordered), "p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99), "p99.9": pct(0.999),
            "mean": round(statistics.fmean(ordered), 3), "max": round(ordered[-1], 3)}


@contextlib.asynccontextmanager
async def _over_http(store: str):
    """A client of ``convmem serve --http`` on ``store``, and the server's CPU seconds so far."""
    from tools.bench_http import _cpu_seconds
    with mcp_client.http_server(store, log_level="WARNING") as server:
        async with mcp_client.connect_http(server.url, server.token) as client:
            yield client, lambda: _cpu_seconds(server.pid)


@contextlib.asynccontextmanager
async def _over_stdio(store: str, **options):
    params = server_parameters(store, **options)
    progress("server: " + " ".join([params.command, *params.args]))
    async with mcp_client.connect(params, mode="legacy") as client:
        yield client, _children_cpu


async def run(store: str, data: str, messages: int, writes: int, concurrency: int, starts: int,
              http: bool = False, only_writes: bool = False, *, warmup: int = 0, fastcall: bool = True,
              callgrind: str | None = None, sdk_stdio: bool = False) -> dict:
    argument_sets = turns(os.path.join(data, "locomo-dev.json"), messages + warmup)
    results: dict[str, dict] = {}
    counter = Callgrind(callgrind) if callgrind else None
    connected = _over_http(store) if http else _over_stdio(store, fastcall=fastcall, callgrind=callgrind,
                                                                     sdk_stdio=sdk_stdio)
    async with connected as (client, server_cpu):
        if warmup:
            progress(f"warm-up: {warmup} sequential write_message calls")
            await timed_calls(client, "write_message", itertools.islice(argument_sets, warmup))
        if counter:
            await counter.command(client, "--zero")
        progress(f"write_message: {writes} sequential calls")
        cpu0 = server_cpu()
        results["write_message"] = summary(await timed_calls(
            client, "write_message", itertools.islice(argument_sets, writes)))
        results["write_message"]["server_cpu_ms"] = round((server_cpu() - cpu0) * 1000 / writes, 3)
        if counter:
            await counter.command(client, "--dump")
            results["write_message"]["server_instructions"] = round(counter.instructions() / writes)
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
    if "server_instructions" in record["results"].get("write_message", {}):
        rows.append(f"(server instructions per sequential write: "
                    f"{record['results']['write_message']['server_instructions']:,})")
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
    p.add_argument("--warmup", type=int, default=None, help="write_message calls before the timed ones (0; 50 "
                   "with --callgrind)")
    p.add_argument("--no-fastcall", action="store_true", help="stdio: every tools/call through the SDK's dispatch "
                   "(CONVMEM_STDIO_FASTCALL=0)")
    p.add_argument("--sdk-stdio", action="store_true", help="stdio: the same server over the SDK's own stdio "
                   "transport (python -m tools.sdk_stdio), the reference for convmem serve")
    p.add_argument("--callgrind", metavar="OUT", default=None, help="stdio, with --only-writes: run the server under "
                   "callgrind and report its instructions per timed write (output files OUT.*)")
    args = p.parse_args(argv)
    if args.callgrind and (args.http or not args.only_writes):
        p.error("--callgrind goes with --only-writes over stdio")
    warmup = args.warmup if args.warmup is not None else (50 if args.callgrind else 0)
    with contextlib.ExitStack() as stack:
        if args.store is None:
            tmp = tempfile.mkdtemp(prefix="convmem-bench-")
            stack.callback(shutil.rmtree, tmp, True)
            store = os.path.join(tmp, "store")
        else:
            store = args.store
        record = anyio.run(functools.partial(
            run, store, args.data, max(args.messages, args.writes), args.writes, args.fill_concurrency, args.starts,
            args.http, args.only_writes, warmup=warmup, fastcall=not args.no_fastcall, callgrind=args.callgrind,
            sdk_stdio=args.sdk_stdio))
    print(table(record, HTTP_TARGETS if args.http else TARGETS))
    line = json.dumps({"bench": "mcp_http" if args.http else "mcp_stdio", **record}, separators=(",", ":"))
    print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
