"""Hostile tool arguments through the in-memory MCP client.

A hypothesis property (strategies in :mod:`tools.hostile`, which also runs it
with thousands of examples): wrong types, missing and unknown fields, huge
strings, deeply nested JSON in the ``*_json`` fields, lone surrogates, NUL
bytes, numbers at and past every bound, forged cursors — never
``INTERNAL_ERROR``, never a crash, and an error (or a read) never changes
state: the health counters and ``last_sequence`` are the same after it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from mcp import Client

from server.app import build_server
from tools.hostile import HostileRun, strategies
from tools.mcp_client import body


def test_hostile_tool_arguments_never_answer_internal_error_and_errors_change_nothing(tmp_path):
    with HostileRun(str(tmp_path / "store")) as run:
        @settings(max_examples=150, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(strategies())
        def hostile_call_is_answered_cleanly(call):
            run.check(*call)

        hostile_call_is_answered_cleanly()
    assert sum(run.calls.values()) >= 150
    assert run.errors.get("VALIDATION_ERROR", 0) > 0


async def _health(client) -> dict:
    is_error, out = body(await client.call_tool("get_system_health", {}))
    assert not is_error
    return {k: v for k, v in out.items() if k not in ("status", "last_error")}


async def _refused(client, name: str, args: dict, code: str = "VALIDATION_ERROR") -> dict:
    before = await _health(client)
    is_error, out = body(await client.call_tool(name, args))
    assert is_error and out["error"]["code"] == code, out
    assert await _health(client) == before
    return out


@pytest.mark.anyio
async def test_json_nested_a_hundred_thousand_levels_deep_is_a_validation_error_in_every_json_field(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    deep_object = '{"tags": ' + "[" * 5000 + "]" * 5000 + "}"
    async with Client(build_server(str(tmp_path / "store"))) as client:
        is_error, out = body(await client.call_tool("write_message", {"session_id": "s", "role": "user",
                                                                       "content": "target"}))
        mid = out["message"]["message_id"]
        for text in (deep, deep_object):
            await _refused(client, "write_message", {"session_id": "s", "role": "user", "content": "x",
                                                     "metadata_json": text})
            await _refused(client, "update_message", {"message_id": mid, "metadata_json": text})
            await _refused(client, "search_messages", {"query": "x", "filters_json": text})
            await _refused(client, "read_messages", {"view": "context", "message_id": mid,
                                                     "relation_types_json": text})


@pytest.mark.anyio
async def test_forged_truncated_and_foreign_cursors_are_validation_errors(tmp_path):
    async with Client(build_server(str(tmp_path / "store"))) as client:
        for i in range(6):
            await client.call_tool("write_message", {"session_id": f"s{i % 2}", "role": "user", "content": f"m{i}"})
        _e, page = body(await client.call_tool("read_messages", {"session_id": "s0", "limit": 1}))
        cursor = page["nextCursor"]
        _e, spage = body(await client.call_tool("read_messages", {"view": "sessions", "limit": 1}))
        flipped = cursor[:-3] + ("A" if cursor[-3] != "A" else "B") + cursor[-2:]
        for forged in (flipped, cursor[:-4], cursor + "x", cursor[::-1], "", "=" * 8, "é" * 10, "\ud800",
                       spage["nextCursor"]):
            await _refused(client, "read_messages", {"session_id": "s0", "cursor": forged})
        await _refused(client, "read_messages", {"session_id": "s1", "cursor": cursor})
        await _refused(client, "read_messages", {"view": "sessions", "cursor": cursor})
        is_error, out = body(await client.call_tool("read_messages", {"session_id": "s0", "cursor": cursor}))
        assert not is_error and [m["content"] for m in out["history"]] == ["m2", "m4"]


@pytest.mark.anyio
async def test_nul_is_kept_in_content_but_lone_surrogates_and_nul_in_ids_store_nothing(tmp_path):
    async with Client(build_server(str(tmp_path / "store"))) as client:
        await _refused(client, "write_message", {"session_id": "a\x00b", "role": "user", "content": "x"})
        await _refused(client, "write_message", {"session_id": "s", "role": "user", "content": "bad \udc00"})
        await _refused(client, "write_message", {"session_id": "\ud800", "role": "user", "content": "x"})
        await _refused(client, "search_messages", {"query": "x", "session_id": "s\x00"})
        await _refused(client, "delete_message", {"message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "session_id": "\x00"})
        is_error, out = body(await client.call_tool("write_message", {"session_id": "s", "role": "user",
                                                                       "content": "nul\x00inside"}))
        assert not is_error
        _e, page = body(await client.call_tool("read_messages", {"session_id": "s"}))
        assert [m["content"] for m in page["history"]] == ["nul\x00inside"]


@pytest.mark.anyio
async def test_numbers_at_and_past_every_bound_are_accepted_or_refused_exactly(tmp_path):
    async with Client(build_server(str(tmp_path / "store"))) as client:
        _e, out = body(await client.call_tool("write_message", {"session_id": "s", "role": "user",
                                                                 "content": "bounded"}))
        mid = out["message"]["message_id"]
        bounds = [("read_messages", {"session_id": "s"}, "limit", 1, 1000),
                  ("read_messages", {"view": "sessions"}, "limit", 1, 1000),
                  ("read_messages", {"view": "content", "message_id": mid}, "content_limit", 1, 65536),
                  ("read_messages", {"view": "context", "message_id": mid}, "before", 0, 10),
                  ("read_messages", {"view": "context", "message_id": mid}, "after", 0, 10),
                  ("read_messages", {"view": "context", "message_id": mid}, "relation_depth", 0, 2),
                  ("search_messages", {"query": "bounded"}, "min_importance", 0, 100),
                  ("search_messages", {"query": "bounded"}, "context_size", 0, 3),
                  ("search_messages", {"query": "bounded"}, "limit", 1, 100)]
        for name, base, field, lo, hi in bounds:
            for good in (lo, hi):
                is_error, out = body(await client.call_tool(name, {**base, field: good}))
                assert not is_error, (field, good, out)
            for bad in (lo - 1, hi + 1, 2 ** 63, -2 ** 63, 2 ** 64, float(lo), True, None, str(lo)):
                await _refused(client, name, {**base, field: bad})
        for bad in (0, -1, True, 1.0, "1", None):
            await _refused(client, "update_message", {"message_id": mid, "content": "y", "expected_revision": bad})
        await _refused(client, "update_message", {"message_id": mid, "content": "y", "expected_revision": 2 ** 63},
                       code="CONFLICT")
        await _refused(client, "read_messages", {"view": "content", "message_id": mid, "content_offset": 2 ** 63})
