"""Helpers the test modules share (fixtures live in conftest.py).

* :class:`Clock` — the one settable test clock;
* the exact JSON shapes of the spec (``MESSAGE_KEYS`` …) and :func:`assert_message`;
* :class:`Mcp` — a connected MCP client whose helpers parse and check every
  result (:func:`parse`, the error envelope), and :func:`connect`, a client
  connected in memory to a fresh server on a store;
* :func:`nothing_changes` — no persisted state, counters included, changes;
* :func:`export_text` — the JSONL export of a closed store;
* :func:`modules` and :func:`parsed` — the repository's Python files, read as
  text for the static checks (``ROOT`` is where they are looked for).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
from typing import Any

import pytest
from mcp import Client

from server import transfer
from server.app import build_server
from server.service import MemoryService
from tools.mcp_client import connect_http, http_server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Clock:
    """A millisecond clock that can be set, and moves by ``step`` on every reading (default: stands still)."""

    def __init__(self, now: int = 1_720_843_200_000, step: int = 0) -> None:
        self.now, self.step = now, step

    def __call__(self) -> int:
        self.now += self.step
        return self.now


ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
MESSAGE_KEYS = {"message_id", "session_id", "timestamp", "role", "content", "revision",
                "updated_at", "metadata"}
METADATA_KEYS = {"tags", "memory_tier", "memory_kind", "importance", "relations",
                 "source_message_ids"}
RESULT_KEYS = MESSAGE_KEYS | {"score", "score_breakdown", "matched_fields", "relation_count"}
RANGE_KEYS = {"message_id", "revision", "total_bytes", "content_offset", "next_content_offset",
              "complete", "content"}
SESSION_KEYS = {"session_id", "message_count", "kind_counts", "representative_summary",
                "started_at", "last_message_at"}
KINDS = ("conversation", "episode", "semantic", "procedure", "preference", "summary")
HEALTH_KEYS = {"status", "format_version", "log_size", "snapshot_size", "active_messages",
               "session_count", "deleted_messages", "last_sequence", "update_records",
               "dead_bytes", "memory_estimate", "io", "recovered_tail", "snapshot_valid",
               "last_error"}
ESTIMATE_KEYS = {"total_bytes", "store_entries_bytes", "body_bytes", "metadata_bytes",
                 "search_index_bytes", "history_index_bytes", "relation_index_bytes"}
IO_KEYS = {"write_bytes", "write_calls", "flush_calls", "truncate_calls", "replace_calls"}


def parse(result) -> dict:
    """The JSON body of a tool result: exactly one TextContent holding a JSON object."""
    assert len(result.content) == 1
    assert result.content[0].type == "text"
    body = json.loads(result.content[0].text)
    assert isinstance(body, dict)
    return body


def assert_message(m: dict, *, summary: bool = False, tool_call_id: bool = False) -> None:
    assert set(m) == MESSAGE_KEYS
    assert ULID.fullmatch(m["message_id"])
    expected = set(METADATA_KEYS)
    if summary:
        expected.add("summary")
    if tool_call_id:
        expected.add("tool_call_id")
    assert set(m["metadata"]) == expected
    for r in m["metadata"]["relations"]:
        assert set(r) == {"type", "message_id"}


class Mcp:
    """A connected MCP client with helpers that parse and check tool results."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def call(self, name: str, arguments: dict | None = None):
        return await self.client.call_tool(name, arguments)

    async def ok(self, name: str, **arguments: Any) -> dict:
        result = await self.call(name, arguments)
        body = parse(result)
        assert not result.is_error, body
        assert body["status"] == "OK", body
        return body

    async def fail(self, name: str, arguments: dict | None = None,
                   code: str = "VALIDATION_ERROR") -> str:
        """Call a tool that must answer with an application error; return its message."""
        result = await self.call(name, arguments)
        body = parse(result)
        assert result.is_error is True, body
        assert set(body) == {"status", "error"}
        assert body["status"] == "ERROR"
        assert set(body["error"]) == {"code", "message"}
        assert body["error"]["code"] == code, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        return body["error"]["message"]

    async def write(self, content: str = "hello", session: str = "s", role: str = "user",
                    **metadata: Any) -> dict:
        args = {"session_id": session, "role": role, "content": content}
        if metadata:
            args["metadata_json"] = json.dumps(metadata)
        return (await self.ok("write_message", **args))["message"]

    async def update(self, message_id: str, content: str | None = None, **metadata: Any) -> dict:
        args: dict[str, Any] = {"message_id": message_id}
        if content is not None:
            args["content"] = content
        if metadata or content is None:
            args["metadata_json"] = json.dumps(metadata)
        return await self.ok("update_message", **args)

    async def read(self, **arguments: Any) -> dict:
        return await self.ok("read_messages", **arguments)

    async def search(self, query: str, **arguments: Any) -> list[dict]:
        return (await self.ok("search_messages", query=query, **arguments))["results"]

    async def health(self) -> dict:
        return await self.ok("get_system_health")

    async def history_ids(self, session: str = "s") -> list[str]:
        return [m["message_id"] for m in (await self.read(session_id=session, limit=1000))["history"]]


# a module runs its ``mcp`` tests over both transports with
#   pytestmark = [pytest.mark.anyio, TRANSPORTS]
TRANSPORTS = pytest.mark.parametrize("transport", ["memory", "http"], indirect=True)


@contextlib.asynccontextmanager
async def connect(store_path: str, *, mode: str = "auto", transport: str = "memory", **service_options: Any):
    """A client connected to a fresh server on ``store_path``: in memory, or over
    HTTP to a ``convmem serve --http`` child (``service_options`` are in-memory only)."""
    if transport == "http":
        assert not service_options, "service options reach only an in-memory server"
        with http_server(store_path) as server:
            async with connect_http(server.url, server.token, mode=mode) as client:
                yield Mcp(client)
        return
    async with Client(build_server(store_path, **service_options), mode=mode) as client:
        yield Mcp(client)


@contextlib.asynccontextmanager
async def nothing_changes(m: Mcp):
    """Assert that what runs inside changes no persisted state, counters included."""
    before = await m.health()
    yield
    assert await m.health() == before


def export_text(path: str) -> str:
    """The JSONL export (header line first) of the store at ``path``, opened and closed here."""
    service = MemoryService(path)
    try:
        out = io.StringIO()
        transfer.export(service, out)
        return out.getvalue()
    finally:
        service.close()


def modules(package: str) -> list[str]:
    """Every ``.py`` file below the folder ``package`` of ``ROOT``, as a path relative to it, sorted."""
    out = []
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
        out += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files if f.endswith(".py")]
    return sorted(out)


def parsed(path: str) -> ast.Module:
    """The syntax tree of the file ``path`` (relative to ``ROOT``); nothing in it runs."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        return ast.parse(fh.read(), filename=path)
