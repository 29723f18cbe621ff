"""The MCP server: low-level ``Server`` handlers that only translate.

``tools/list`` returns the seven specs of :mod:`server.tools`.  ``tools/call``
runs the tool's handler in a worker thread — writes on one dedicated writer
thread, reads concurrently — and wraps its JSON in one ``TextContent``.
Application errors become ``isError`` results with SPEC's error body;
anything unexpected becomes ``INTERNAL_ERROR`` with the traceback on stderr.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, AsyncIterator

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server

from eventstore.errors import ConvMemError

from . import render
from .service import MemoryService
from .tools import BY_NAME, TOOLS

log = logging.getLogger("convmem")
VERSION = "0.1.0"
INSTRUCTIONS = ("Tiny ConvMem stores conversation messages and distilled memories durably. "
                "Use write_message to remember, search_messages to recall, read_messages to page "
                "through a session or read context, update_message and delete_message to correct.")


@dataclass
class AppState:
    service: MemoryService | None
    open_error: ConvMemError | None
    writer: ThreadPoolExecutor


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


async def call(state: AppState, name: str, arguments: Any) -> types.CallToolResult:
    """Run one tool call to completion; never raises."""
    spec = BY_NAME.get(name)
    if spec is None:
        return error_result("VALIDATION_ERROR", "name: is not one of the seven tools")
    if state.service is None:
        return error_result(state.open_error.code, state.open_error.message)
    work = functools.partial(spec.handler, state.service, arguments)
    try:
        if spec.writes:
            body = await anyio.to_thread.run_sync(lambda: state.writer.submit(work).result())
        else:
            body = await anyio.to_thread.run_sync(work)
    except ConvMemError as exc:
        return error_result(exc.code, exc.message)
    except Exception:
        log.exception("unexpected error in %s", name)
        return error_result("INTERNAL_ERROR", f"{name}: unexpected internal error (see server log)")
    return _result(body)


def build_server(store_path: str, **service_options) -> Server:
    @contextlib.asynccontextmanager
    async def lifespan(_server: Server) -> AsyncIterator[AppState]:
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="convmem-writer")
        service, open_error = None, None
        try:
            service = await anyio.to_thread.run_sync(
                lambda: writer.submit(MemoryService, store_path, **service_options).result())
            log.info("store open at %s", store_path)
        except ConvMemError as exc:
            open_error = exc
            log.error("cannot open the store at %s: %s", store_path, exc.message)
        try:
            yield AppState(service, open_error, writer)
        finally:
            if service is not None:
                writer.submit(service.close).result()
            writer.shutdown(wait=True)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(t) for t in TOOLS])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await call(ctx.lifespan_context, params.name, params.arguments)

    return Server("tiny-convmem", version=VERSION, instructions=INSTRUCTIONS, lifespan=lifespan,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(store_path: str) -> None:
    from mcp.server.stdio import stdio_server
    server = build_server(store_path)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
