"""The seven tools through a real MCP client, over both transports: the SDK's
in-memory ``Client`` and a real ``convmem serve --http`` child through the SDK's
HTTP client (the ``mcp`` fixture and the helpers are in conftest.py and helpers.py)."""

from __future__ import annotations

import json

import pytest
from helpers import ESTIMATE_KEYS, HEALTH_KEYS, IO_KEYS, TRANSPORTS, assert_message, connect, parse

pytestmark = [pytest.mark.anyio, TRANSPORTS]


# ------------------------------------------------------------------ tools/list
async def test_tools_list_offers_exactly_the_seven_tools(mcp):
    tools = (await mcp.client.list_tools()).tools
    assert sorted(t.name for t in tools) == sorted([
        "write_message", "update_message", "read_messages", "search_messages",
        "delete_message", "rebuild_index", "get_system_health"])


EXPECTED_PROPERTIES = {
    "write_message": ({"session_id", "role", "content", "metadata_json"}, ["session_id", "role", "content"]),
    "update_message": ({"message_id", "content", "metadata_json", "expected_revision"}, ["message_id"]),
    "read_messages": ({"view", "limit", "cursor", "session_id", "message_id", "content_offset",
                       "content_limit", "expected_revision", "before", "after", "relation_depth",
                       "relation_types_json"}, []),
    "search_messages": ({"query", "session_id", "filters_json", "min_importance", "context_size",
                         "limit"}, ["query"]),
    "delete_message": ({"message_id", "session_id"}, ["message_id"]),
    "rebuild_index": (set(), []),
    "get_system_health": (set(), []),
}


async def test_every_tool_schema_is_a_closed_object_listing_its_required_parameters(mcp):
    listed = {t.name: t for t in (await mcp.client.list_tools()).tools}
    for name, (props, required) in EXPECTED_PROPERTIES.items():
        schema = listed[name].input_schema
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema["properties"]) == props
        assert sorted(schema.get("required", [])) == sorted(required)
        assert listed[name].description


async def test_integer_parameters_declare_their_ranges_in_the_schema(mcp):
    listed = {t.name: t.input_schema for t in (await mcp.client.list_tools()).tools}
    read = listed["read_messages"]["properties"]
    assert (read["limit"]["minimum"], read["limit"]["maximum"]) == (1, 1000)
    assert (read["content_limit"]["minimum"], read["content_limit"]["maximum"]) == (1, 65536)
    assert (read["relation_depth"]["minimum"], read["relation_depth"]["maximum"]) == (0, 2)
    search = listed["search_messages"]["properties"]
    assert (search["limit"]["minimum"], search["limit"]["maximum"]) == (1, 100)
    assert (search["context_size"]["minimum"], search["context_size"]["maximum"]) == (0, 3)
    assert listed["write_message"]["properties"]["role"]["enum"] == ["user", "assistant", "system"]


async def test_annotations_mark_readers_read_only_and_delete_and_rebuild_destructive(mcp):
    listed = {t.name: t.annotations for t in (await mcp.client.list_tools()).tools}
    for name in ("read_messages", "search_messages", "get_system_health"):
        assert listed[name].read_only_hint is True
        assert listed[name].destructive_hint is False
    for name in ("delete_message", "rebuild_index"):
        assert listed[name].read_only_hint is False
        assert listed[name].destructive_hint is True
    for name in ("write_message", "update_message"):
        assert listed[name].read_only_hint is False
        assert listed[name].destructive_hint is False
    assert listed["write_message"].idempotent_hint is False


# ---------------------------------------------------------------- result shapes
async def test_write_message_returns_the_stored_message_with_defaults_and_revision_one(mcp):
    body = await mcp.ok("write_message", session_id="conversation-1", role="user", content="Remember this")
    assert set(body) == {"status", "message"}
    m = body["message"]
    assert_message(m)
    assert m["session_id"] == "conversation-1" and m["role"] == "user"
    assert m["content"] == "Remember this" and m["revision"] == 1
    assert m["timestamp"] == m["updated_at"] and isinstance(m["timestamp"], int)
    assert m["metadata"] == {"tags": [], "memory_tier": "short", "memory_kind": "conversation",
                             "importance": 50, "relations": [], "source_message_ids": []}


async def test_write_message_keeps_every_metadata_field_it_was_given(mcp):
    target = await mcp.write("first")
    meta = {"tool_call_id": "call-1", "tags": ["project", "decision"], "memory_tier": "long",
            "memory_kind": "semantic", "importance": 80, "summary": "a summary",
            "relations": [{"type": "derived_from", "message_id": target["message_id"]}],
            "source_message_ids": [target["message_id"]]}
    m = await mcp.write("second", role="assistant", **meta)
    assert_message(m, summary=True, tool_call_id=True)
    assert m["metadata"] == meta
    assert list(m["metadata"]) == ["tool_call_id", "tags", "memory_tier", "memory_kind", "importance",
                                   "summary", "relations", "source_message_ids"]
    assert m["message_id"] > target["message_id"]


async def test_duplicate_tags_and_relations_are_folded_keeping_first_order(mcp):
    other = "01ARZ3NDEKTSV4RRFFQ69G5FAW"
    rels = [{"type": "related_to", "message_id": other}, {"type": "depends_on", "message_id": other},
            {"type": "related_to", "message_id": other}]
    m = await mcp.write("x", tags=["b", "a", "b", "c", "a"], relations=rels)
    assert m["metadata"]["tags"] == ["b", "a", "c"]
    assert m["metadata"]["relations"] == rels[:2]


async def test_ids_grow_with_creation_order_even_within_one_millisecond(mcp):
    ids = [(await mcp.write(str(i)))["message_id"] for i in range(20)]
    assert ids == sorted(ids) and len(set(ids)) == 20


async def test_nul_inside_content_is_kept(mcp):
    m = await mcp.write("a\x00b")
    assert (await mcp.read(session_id="s"))["history"][0]["content"] == "a\x00b"
    assert m["content"] == "a\x00b"


async def test_update_returns_changed_and_the_new_message(mcp):
    m = await mcp.write("v1")
    body = await mcp.update(m["message_id"], "v2")
    assert set(body) == {"status", "changed", "message"}
    assert body["changed"] is True
    assert_message(body["message"])
    assert body["message"]["revision"] == 2 and body["message"]["content"] == "v2"


async def test_delete_answers_ok_then_not_found_as_a_status_not_an_error(mcp):
    m = await mcp.write()
    assert await mcp.ok("delete_message", message_id=m["message_id"]) == {"status": "OK"}
    result = await mcp.call("delete_message", {"message_id": m["message_id"]})
    assert not result.is_error
    assert parse(result) == {"status": "NOT_FOUND"}


async def test_rebuild_index_answers_with_exactly_the_documented_keys(mcp):
    await mcp.write()
    body = await mcp.ok("rebuild_index")
    assert set(body) == {"status", "messages_indexed", "records_removed", "bytes_before", "bytes_after"}
    assert all(type(body[k]) is int for k in body if k != "status")


async def test_health_has_every_documented_field_with_its_type(mcp):
    h = await mcp.health()
    assert set(h) == HEALTH_KEYS
    assert set(h["memory_estimate"]) == ESTIMATE_KEYS
    assert set(h["io"]) == IO_KEYS
    assert h["status"] == "OK" and h["format_version"] == 2 and h["last_error"] == ""
    assert h["snapshot_valid"] is True and h["recovered_tail"] is False
    for k in ("log_size", "snapshot_size", "active_messages", "session_count", "deleted_messages",
              "last_sequence", "update_records", "dead_bytes"):
        assert type(h[k]) is int and h[k] >= 0
    est = h["memory_estimate"]
    assert est["total_bytes"] == sum(v for k, v in est.items() if k != "total_bytes")


async def test_health_counts_messages_sessions_deletes_and_updates(mcp):
    a = await mcp.write("a", session="s1")
    await mcp.write("b", session="s1")
    await mcp.write("c", session="s2")
    await mcp.update(a["message_id"], "a2")
    await mcp.ok("delete_message", message_id=a["message_id"])
    h = await mcp.health()
    assert (h["active_messages"], h["session_count"], h["deleted_messages"]) == (2, 2, 1)
    assert h["update_records"] == 1 and h["last_sequence"] == 5
    assert h["dead_bytes"] > 0 and h["log_size"] > 0 and h["snapshot_size"] > 0
    assert h["memory_estimate"]["body_bytes"] == 2


async def test_error_envelope_is_exact_and_never_echoes_the_value(mcp):
    secret = "sekrit-value-" + "z" * 300
    message = await mcp.fail("write_message", {"session_id": secret, "role": "user", "content": "x"})
    assert "session_id" in message and "sekrit" not in message
    message = await mcp.fail("write_message", {"session_id": "s", "role": "user", "content": "x",
                                               "metadata_json": json.dumps({"tags": [secret]})})
    assert "tags" in message and "sekrit" not in message


async def test_an_unknown_tool_is_an_error_result(mcp):
    await mcp.fail("no_such_tool", {})


async def test_missing_arguments_are_treated_as_empty(mcp):
    message = await mcp.fail("write_message", None)
    assert "session_id" in message
    assert (await mcp.ok("get_system_health"))["status"] == "OK"


async def test_the_legacy_initialize_handshake_serves_the_same_tools(store_path, transport):
    async with connect(store_path, mode="legacy", transport=transport) as m:
        assert len((await m.client.list_tools()).tools) == 7
        written = await m.write("over the legacy handshake")
        assert (await m.read(session_id="s"))["history"] == [written]
        await m.fail("read_messages", {"view": "nope"})


async def test_a_store_that_cannot_open_still_lists_tools_and_answers_each_call_with_the_error(tmp_path, transport):
    unopenable = tmp_path / "store"           # a directory (the CLI refuses a file before serving),
    (unopenable / "data.mdb").mkdir(parents=True)      # whose data file LMDB cannot open
    if transport == "http":                   # a serving process does not start without its store
        from tools._proc import python, run
        done = run(python("-m", "server.cli", "serve", "--http", "127.0.0.1:0", "--store", str(unopenable)))
        assert done.returncode == 2, done.stderr
        assert f"convmem: cannot open the store at {unopenable}: IO_ERROR: " in done.stderr
        return
    async with connect(str(unopenable), transport=transport) as m:
        assert len((await m.client.list_tools()).tools) == 7
        for name in ("get_system_health", "write_message"):
            message = await m.fail(name, {}, code="IO_ERROR")
            assert str(tmp_path) not in message


async def test_an_unexpected_exception_becomes_internal_error_with_the_traceback_logged(mcp, transport, monkeypatch,
                                                                                       caplog):
    from server.service import MemoryService

    if transport == "http":
        pytest.skip("patches the service in this process; the HTTP server is another process")

    def broken(self, **_options):
        raise RuntimeError("secret detail")
    monkeypatch.setattr(MemoryService, "health", broken)
    message = await mcp.fail("get_system_health", {}, code="INTERNAL_ERROR")
    assert "secret detail" not in message
    assert "secret detail" in caplog.text
    assert (await mcp.read(session_id="s"))["history"] == []
