"""The MCP server: low-level ``Server`` handlers that only translate.

``tools/list`` returns the seven specs of :mod:`server.tools`.  ``tools/call``
runs the tool's handler in a worker thread — a write alone at its moment
commits there; concurrent ones are gathered by the service's group committer
into commits on its writer thread — and wraps its JSON in one ``TextContent``.
Application errors become ``isError`` results with the error body of
docs/tools.md §Error codes; anything unexpected becomes ``INTERNAL_ERROR``
with the traceback on stderr (so does an ``InternalError`` the store made of
a bug: its cause is logged).

Over stdio (:func:`serve_stdio`) a plain ``tools/call`` skips the SDK's dispatch
(:class:`FastCalls`, its calls in flight kept by :class:`server._inflight.InFlight`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
import pydantic_core
from mcp.server.lowlevel import Server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, methods

from eventstore.errors import ConvMemError, InternalError

from . import render
from ._inflight import InFlight
from ._process import in_thread, settle_heap
from ._stdio import (
    MAX_LINE,
    LineTooLong,
    MessageReader,
    MessageWriter,
    StdinLines,
    StdoutLines,
    claimed_stdio,
    until_signal,
)
from .bearer import current as current_principal
from .principals import LOCAL, Principal
from .service import MemoryService
from .tools import BY_NAME, TOOLS
from .validation import MAX_DIGITS, NumberTooLong, json_integer

log = logging.getLogger("convmem")
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


async def call(state: AppState, name: str, arguments: Any, principal: Principal = LOCAL) -> types.CallToolResult:
    """Run one tool call to completion as ``principal``; never raises."""
    text, is_error = await call_text(state, name, arguments, principal)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


async def call_text(state: AppState, name: str, arguments: Any,
                    principal: Principal = LOCAL) -> tuple[str, bool]:
    """Run one tool call to completion: its result's JSON text and ``isError``; never raises.
    Writes too run on worker threads: a lone one commits there, and the service's group
    committer gathers concurrent ones into one commit on its writer thread."""
    return await in_thread(state.calls, functools.partial(run_call, state, name, arguments, principal))


def run_call(state: AppState, name: str, arguments: Any, principal: Principal = LOCAL) -> tuple[str, bool]:
    """:func:`call_text` on the calling thread (a worker's: the stdio fast path calls it there)."""
    spec = BY_NAME.get(name)
    if spec is None:
        return _error_text("VALIDATION_ERROR", "name: is not one of the seven tools")
    if state.service is None:
        error = state.open_error or InternalError("the store is not open")
        return _error_text(error.code, error.message)
    try:
        body = spec.call(state.service, arguments, principal)
    except InternalError as exc:         # a bug the store caught: its cause's traceback to stderr
        log.error("internal error in %s", name, exc_info=exc)
        return _error_text(exc.code, exc.message)
    except ConvMemError as exc:
        return _error_text(exc.code, exc.message)
    except Exception:
        log.exception("unexpected error in %s", name)
        return _error_text("INTERNAL_ERROR", f"{name}: unexpected internal error (see server log)")
    return render.dumps(body), False


def _error_text(code: str, message: str) -> tuple[str, bool]:
    return render.dumps({"status": "ERROR", "error": {"code": code, "message": message}}), True


def build_server(store_path: str, *, settle: bool = False, opened: Callable[[AppState], None] | None = None,
                 **service_options) -> Server:
    """The MCP server; ``settle``: :func:`settle_heap` when it starts (a serving
    process does; a test building servers in its own process does not);
    ``opened``: told the lifespan's state once the store is open (or failed to)."""
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
        state = AppState(service, open_error, writer, calls)
        try:
            if opened is not None:
                opened(state)
            yield state
        finally:
            calls.shutdown(wait=True)
            if service is not None:
                writer.submit(service.close).result()
            writer.shutdown(wait=True)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(t) for t in TOOLS])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        # the principal of an HTTP request's bearer token (bearer.current); ``local`` over stdio
        return await call(ctx.lifespan_context, params.name, params.arguments, current_principal())

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
    if isinstance(exc, LineTooLong):
        return error(None, types.INVALID_REQUEST, f"Invalid request: the line is longer than {MAX_LINE} bytes")
    line = getattr(exc, "line", None)
    try:
        if not isinstance(line, (str, bytes, bytearray)):
            raise TypeError("no line")
        message = json.loads(line, parse_int=json_integer)
    except RecursionError:      # valid JSON perhaps, but nested deeper than any parser here goes
        return error(None, types.PARSE_ERROR, "Parse error: the line nests arrays or objects too deeply")
    except NumberTooLong:
        return error(None, types.PARSE_ERROR, f"Parse error: a number in the line has more than {MAX_DIGITS} digits")
    except (TypeError, ValueError):
        return error(None, types.PARSE_ERROR, "Parse error: the line is not JSON")
    if not isinstance(message, dict):
        return error(None, types.INVALID_REQUEST, "Invalid request: not a JSON-RPC object")
    if "method" not in message or "id" not in message:
        return None
    rid = message["id"]
    rid = rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None
    return error(rid, types.INVALID_REQUEST,
                  "Invalid request: not valid JSON-RPC, or a string holds a lone surrogate")


async def serve_stdio(store_path: str, *, fast_calls: bool = True, **service_options) -> str | None:
    """Serve until stdin ends or SIGINT/SIGTERM arrives; the signal's name, if one stopped it.
    ``fast_calls``: plain ``tools/call`` requests take :class:`FastCalls` (else all go through the SDK)."""
    async def run() -> None:
        with claimed_stdio() as (stdin, stdout):
            out, lines = StdoutLines(stdout), StdinLines(stdin)
            fast = FastCalls(out, enabled=fast_calls, more_read=lines.has_line)
            reader: MessageReader[SessionMessage] | None = None
            try:
                writer = MessageWriter(out, line_of, sent=fast.sent)
                server = build_server(store_path, settle=True, opened=functools.partial(_required, fast.opened),
                                      **service_options)
                unreadable = functools.partial(_answer_unreadable, writer)
                reader = MessageReader(lines, parse_line, unreadable, take=fast.take, drain=fast.drain)
                await server.run(reader, writer, server.create_initialization_options())
            finally:
                fast.close()
                if reader is not None:
                    await reader.aclose()
                await out.close(_SHUTDOWN_WRITE_TIMEOUT)
    return await until_signal(run)


_SHUTDOWN_WRITE_TIMEOUT = 1.0       # the SDK's bound on its shutdown answer


def _required(then: Callable[[AppState], None], state: AppState) -> None:
    """A serving process does not run without its store: the error that kept it closed
    ends the server before it reads a line (``convmem serve`` reports it, exit 2)."""
    if state.open_error is not None:
        raise state.open_error
    then(state)


# ------------------------------------------------------------------ the stdio fast path
class FastCalls:
    """The stdio transport's short way for a plain ``tools/call``.

    Through the SDK's dispatch a ``write_message`` call costs the server about twice
    the CPU it costs here (figures and benchmark: :mod:`server._stdio`): a memory
    stream between its reader and its dispatcher, the request's task, context and
    session objects, the request validated against the protocol
    version's schema and then as ``CallToolRequestParams``, the result built as
    ``CallToolResult``, dumped, validated and dumped again by the version's
    schema, then wrapped in ``JSONRPCResponse`` and serialized.  Here the reader
    hands a plain call to :class:`~server._inflight.InFlight`, right in the event
    loop's callback for readable stdin: :func:`run_call` runs on the same thread
    pool (a lone write of one message right there), and that thread writes the
    answer itself, from a template that
    is the SDK's serialization byte for byte (checked, for the version the client
    negotiated, before the first call takes this way: :func:`template_holds`).

    A call is *plain*, and taken here, only when the SDK would surely run it
    and answer with the tool's result: its connection is past an ``initialize``
    the SDK answered with a result (so the SDK holds it initialized, in the
    handshake era), and its params hold exactly ``name`` (a string), optionally
    ``arguments`` (an object) and ``_meta`` holding nothing but a string or
    integer ``progressToken`` (the tools never report progress).  Everything
    else — other methods, notifications, responses, a second ``initialize``
    until the SDK answers it, odd params — goes to the SDK unchanged.

    What the SDK's dispatcher does, done alike: calls run concurrently (on the
    same pool, so at most ``CALL_THREADS`` at once); a ``notifications/cancelled``
    naming a call in flight (its id compared as the SDK compares ids) leaves the
    call to finish — a write in progress is not torn — and unanswered (the
    notification still goes on to the SDK).  One difference, at a stop by
    signal: the SDK answers a call whose work ends after the stop "Connection
    closed" (-32000), even a write that committed; here such a call is answered
    with its result (the SDK's error only for a call read once the pool has
    been shut down, which never began).

    At the end of stdin, :meth:`drain` waits until every call the fast path took
    and every request handed to the SDK has been answered: the SDK cancels its
    requests still in flight when its input ends (some never started, and were
    never answered).  ``enabled=False`` (``CONVMEM_STDIO_FASTCALL=0``) sends
    every call through the SDK; the draining stays.
    """

    def __init__(self, out: StdoutLines, *, enabled: bool = True,
                 more_read: Callable[[], bool] = lambda: False) -> None:
        self._enabled = enabled
        self._more_read = more_read                          # whether another line is read and waiting
        self._state: AppState | None = None
        self._initializing: set[types.RequestId] = set()    # ids of initialize requests the SDK has not answered
        self._ready = False                                  # plain calls may take the fast path
        self._flight = InFlight(out)
        self.drain = self._flight.drain
        self.close = self._flight.close

    def opened(self, state: AppState) -> None:
        self._state = state

    def take(self, item: SessionMessage) -> bool:
        """The reader's hook: whether the fast path takes ``item`` on (else it goes to the SDK)."""
        message = item.message
        if isinstance(message, types.JSONRPCRequest):
            if self._ready and message.method == "tools/call" and (plain := _plain_call(message.params)) is not None:
                self._start(message.id, *plain)
                return True
            self._flight.handed(coerce_request_id(message.id))
            if message.method == "initialize":
                self._ready = False                     # until the SDK has answered it
                self._initializing.add(message.id)
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            if (rid := cancelled_request_id_from_params(message.params)) is not None:
                self._flight.cancel(coerce_request_id(rid))
        return False

    def sent(self, item: SessionMessage) -> None:
        """The writer's hook: note an answer the SDK writes."""
        message = item.message
        if not isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)) or message.id is None:
            return
        if message.id in self._initializing:
            self._initializing.discard(message.id)
            version = message.result.get("protocolVersion") if isinstance(message, types.JSONRPCResponse) else None
            self._ready = self._enabled and isinstance(version, str) and template_holds(version)
        self._flight.answered(coerce_request_id(message.id))

    def _start(self, rid: types.RequestId, name: str, arguments: dict[str, Any] | None) -> None:
        state = self._state
        assert state is not None

        def answer() -> bytes:
            return answer_line(rid, *run_call(state, name, arguments))

        def refused() -> bytes:
            return (line_of(SessionMessage(error(rid, CONNECTION_CLOSED, "Connection closed"))) + "\n").encode()
        # not on a replicated store: its writes wait for the stream's acknowledgement
        brief = ((spec := BY_NAME.get(name)) is not None and spec.brief and not self._more_read()
                 and state.service is not None and state.service.replicated is None)
        self._flight.start(coerce_request_id(rid), state.calls, answer, refused, brief=brief)


_PROGRESS_ONLY = frozenset({"progressToken"})


def _plain_call(params: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None] | None:
    """``(name, arguments)`` of a plain ``tools/call`` (see :class:`FastCalls`), else None."""
    if type(params) is not dict or type(name := params.get("name")) is not str:
        return None
    fields = 1
    arguments = params.get("arguments")
    if arguments is not None or "arguments" in params:
        if type(arguments) is not dict:
            return None
        fields += 1
    if (meta := params.get("_meta")) is not None or "_meta" in params:
        if type(meta) is not dict or not meta.keys() <= _PROGRESS_ONLY:
            return None
        token = meta.get("progressToken")
        if "progressToken" in meta and type(token) is not str and type(token) is not int:
            return None
        fields += 1
    return (name, arguments) if len(params) == fields else None


class UnreadableLine(ValueError):
    """A line the SDK's parser refuses; ``line`` is the line (the parser's own error
    names only the part it refused, e.g. params that are not an object)."""

    def __init__(self, line: str) -> None:
        super().__init__("a line the SDK's stdio transport cannot parse")
        self.line = line


def parse_line(line: str) -> SessionMessage:
    """A line of stdin as the SDK's stdio transport parses it (:class:`UnreadableLine` if it cannot)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:           # pydantic's ValidationError among them
        raise UnreadableLine(line) from exc


def line_of(item: SessionMessage) -> str:
    """A message as the SDK's stdio transport writes it (without the newline)."""
    return item.message.model_dump_json(by_alias=True, exclude_unset=True)


def error(rid: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message))


def answer_line(rid: types.RequestId, text: str, is_error: bool) -> bytes:
    """The line the SDK writes for a tool result of one text block, without building it."""
    return b"".join((b'{"jsonrpc":"2.0","id":', pydantic_core.to_json(rid), b',"result":{"content":[{"text":',
                     pydantic_core.to_json(text), b',"type":"text"}],"isError":true}}\n' if is_error else
                     b',"type":"text"}],"isError":false}}\n'))


@functools.cache
def template_holds(version: str) -> bool:
    """Whether :func:`answer_line` writes what the SDK writes for a tool result at ``version``."""
    text = 'quote " backslash \\ newline \n tab \t bell \x07 del \x7f é 日本語 😀 \u2028 </script>'
    try:
        for rid in (7, "id \" 7"):
            for is_error in (False, True):
                result = types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)
                wire = methods.serialize_server_result(
                    "tools/call", version, result.model_dump(by_alias=True, mode="json", exclude_none=True))
                line = line_of(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=rid, result=wire)))
                if (line + "\n").encode() != answer_line(rid, text, is_error):
                    raise ValueError("the SDK's line differs")
    except Exception as exc:
        log.warning("tools/call takes the SDK's way at protocol %s: %s", version, exc)
        return False
    return True
