"""The MCP server: low-level ``Server`` handlers that only translate.

``tools/list`` returns the seven specs of :mod:`server.tools`.  ``tools/call``
runs the tool's handler in a worker thread — a write alone at its moment
commits there; concurrent ones are gathered by the service's group committer
into commits on its writer thread — and wraps its JSON in one ``TextContent``.
Application errors become ``isError`` results with the error body of
docs/tools.md §Error codes; anything unexpected becomes ``INTERNAL_ERROR``
with the traceback on stderr (so does an ``InternalError`` the store made of
a bug: its cause is logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage

from eventstore.errors import ConvMemError, InternalError

from . import render
from ._stdio import MessageReader, MessageWriter, StdinLines, StdoutLines, claimed_stdio, until_signal
from .service import MemoryService
from .tools import BY_NAME, TOOLS

log = logging.getLogger("convmem")
T = TypeVar("T")
VERSION = "0.1.0"
CALL_THREADS = 40                   # tool calls running at once (anyio's default thread limit)
INSTRUCTIONS = ("Tiny ConvMem stores conversation messages and distilled memories durably. "
                "Use write_message to remember, search_messages to recall, read_messages to page "
                "through a session or read context, update_message and delete_message to correct.")


@dataclass
class AppState:
    service: MemoryService | None
    open_error: ConvMemError | None
    writer: ThreadPoolExecutor          # opens and closes the store
    calls: ThreadPoolExecutor           # runs the tool calls


def _tool(spec) -> types.Tool:
    return types.Tool(name=spec.name, description=spec.description, input_schema=spec.schema,
                      annotations=types.ToolAnnotations(read_only_hint=spec.read_only,
                                                        destructive_hint=spec.destructive,
                                                        idempotent_hint=spec.idempotent,
                                                        open_world_hint=False))


def _result(body: dict, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=render.dumps(body))],
                                is_error=is_error)


def error_result(code: str, message: str) -> types.CallToolResult:
    return _result({"status": "ERROR", "error": {"code": code, "message": message}}, is_error=True)


def settle_heap() -> None:
    """Once, when a serving process starts: collect, move every object alive (modules,
    the SDK's pydantic models and schemas) to the collector's permanent generation,
    and turn the collector back on (``convmem serve`` turns it off while importing).

    Python's cyclic collector walks every tracked object in a full (generation 2)
    collection; the ~91,000 objects the imports leave made each one a 20–130 ms
    pause in the middle of a request — the server's largest latency stalls.
    Frozen objects are never walked again; what requests allocate is still
    collected as before, and the objects alive do not grow with the number of
    requests (~800 tracked objects besides the frozen ones after 3,000 writes),
    so nothing unbounded is pinned.  It runs before the store opens: a replay
    at open (a large log) runs with the collector on.
    """
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    gc.enable()
    log.debug("heap settled: %d objects frozen in %.1f ms", gc.get_freeze_count(),
              (time.perf_counter() - start) * 1000)


async def in_thread(pool: ThreadPoolExecutor, fn: Callable[[], T]) -> T:
    """``fn()`` on a thread of ``pool``, awaited through one asyncio future: about
    0.1M instructions less per call than ``anyio.to_thread.run_sync`` (its
    capacity limiter, cancel scopes and per-call bookkeeping).  As with that call,
    a caller cancelled while ``fn`` runs waits until it has returned (a write in
    progress ends before the store can close), then is cancelled."""
    future = pool.submit(fn)
    try:
        asyncio.get_running_loop()
    except RuntimeError:                    # another anyio backend: wait in a worker thread
        return await anyio.to_thread.run_sync(future.result)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if not future.cancelled():          # it had begun: let it end first
            with anyio.CancelScope(shield=True):
                await asyncio.wait([asyncio.wrap_future(future)])
        raise


async def call(state: AppState, name: str, arguments: Any) -> types.CallToolResult:
    """Run one tool call to completion; never raises."""
    spec = BY_NAME.get(name)
    if spec is None:
        return error_result("VALIDATION_ERROR", "name: is not one of the seven tools")
    if state.service is None:
        error = state.open_error or InternalError("the store is not open")
        return error_result(error.code, error.message)
    work = functools.partial(spec.call, state.service, arguments)
    try:
        # writes too run on worker threads: a lone one commits there, and the service's
        # group committer gathers concurrent ones into one commit on its writer thread
        body = await in_thread(state.calls, work)
    except InternalError as exc:         # a bug the store caught: its cause's traceback to stderr
        log.error("internal error in %s", name, exc_info=exc)
        return error_result(exc.code, exc.message)
    except ConvMemError as exc:
        return error_result(exc.code, exc.message)
    except Exception:
        log.exception("unexpected error in %s", name)
        return error_result("INTERNAL_ERROR", f"{name}: unexpected internal error (see server log)")
    return _result(body)


def build_server(store_path: str, *, settle: bool = False, **service_options) -> Server:
    """The MCP server; ``settle``: :func:`settle_heap` when it starts (a serving
    process does; a test building servers in its own process does not)."""
    @contextlib.asynccontextmanager
    async def lifespan(_server: Server) -> AsyncIterator[AppState]:
        if settle:
            settle_heap()
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="convmem-writer")
        calls = ThreadPoolExecutor(max_workers=CALL_THREADS, thread_name_prefix="convmem-call")
        service, open_error = None, None
        try:
            service = await in_thread(writer, functools.partial(MemoryService, store_path, **service_options))
            log.info("store open at %s", store_path)
        except ConvMemError as exc:
            open_error = exc
            log.error("cannot open the store at %s: %s", store_path, exc.message)
        try:
            yield AppState(service, open_error, writer, calls)
        finally:
            calls.shutdown(wait=True)
            if service is not None:
                writer.submit(service.close).result()
            writer.shutdown(wait=True)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(t) for t in TOOLS])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await call(ctx.lifespan_context, params.name, params.arguments)

    server = Server("tiny-convmem", version=VERSION, instructions=INSTRUCTIONS, lifespan=lifespan,
                    on_list_tools=list_tools, on_call_tool=call_tool)
    if not tracing():
        server.middleware = []
    return server


def tracing() -> bool:
    """Whether an OpenTelemetry tracer provider is installed in this process.

    The SDK's only default middleware opens an OpenTelemetry span around every
    request (its documented opt-out: drop it from ``Server.middleware``).  Without
    a provider the span records nothing, yet building it and its attributes cost
    ~5% of a write's CPU; so it stays only when a provider is installed (e.g.
    under ``opentelemetry-instrument``).
    """
    from opentelemetry import trace
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _parse_line(line: str) -> SessionMessage:
    """A line of stdin as the SDK's stdio transport parses it."""
    return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))


def _line_of(item: SessionMessage) -> str:
    """A message as the SDK's stdio transport writes it (without the newline)."""
    return item.message.model_dump_json(by_alias=True, exclude_unset=True)


async def _answer_unreadable(writer: MessageWriter[SessionMessage], exc: Exception) -> None:
    """The SDK's stdio transport turns a line that is not valid JSON-RPC (bad JSON,
    or a lone surrogate such as ``"\\ud800"`` that its strict parser refuses) into
    an exception its dispatcher only logs: the client would wait for an answer
    forever.  Such a request is answered with a JSON-RPC error carrying its id
    (``null`` when no id can be read)."""
    reply = _unreadable_reply(exc)
    if reply is not None:
        log.warning("answered an unreadable request with JSON-RPC error %s", reply.error.code)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):   # nobody reads
            await writer.send(SessionMessage(reply))


def _unreadable_reply(exc: Exception) -> types.JSONRPCError | None:
    """The error answering the line behind ``exc``; None for a notification or a response."""
    line = None
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            line = errors()[0].get("input")
    try:
        if not isinstance(line, (str, bytes, bytearray)):
            raise TypeError("no line")
        message = json.loads(line)
    except (TypeError, ValueError):
        return _error(None, types.PARSE_ERROR, "Parse error: the line is not JSON")
    if not isinstance(message, dict):
        return _error(None, types.INVALID_REQUEST, "Invalid request: not a JSON-RPC object")
    if "method" not in message or "id" not in message:
        return None
    rid = message["id"]
    rid = rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None
    return _error(rid, types.INVALID_REQUEST,
                  "Invalid request: not valid JSON-RPC, or a string holds a lone surrogate")


def _error(rid: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message))


async def serve_stdio(store_path: str, **service_options) -> str | None:
    """Serve until stdin ends or SIGINT/SIGTERM arrives; the signal's name, if one stopped it."""
    server = build_server(store_path, settle=True, **service_options)

    async def run() -> None:
        with claimed_stdio() as (stdin, stdout):
            out = StdoutLines(stdout)
            try:
                writer = MessageWriter(out, _line_of)
                reader = MessageReader(StdinLines(stdin), _parse_line, functools.partial(_answer_unreadable, writer))
                await server.run(reader, writer, server.create_initialization_options())
            finally:
                out.close()
    return await until_signal(run)
