"""update and delete semantics, rebuild_index, health counters and the response budget."""

from __future__ import annotations

import fcntl
import json
import os

import pytest
from helpers import Clock, connect, nothing_changes, parse

pytestmark = pytest.mark.anyio

MIB = 1 << 20
BUDGET = 8 * MIB
MISSING = "01ARZ3NDEKTSV4RRFFQ69G5FAW"


# ---------------------------------------------------------------------- update
async def test_an_update_keeps_identity_and_replaces_only_the_fields_given(store_path):
    clock = Clock()
    async with connect(store_path, clock=clock) as m:
        target = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
        original = await m.write("v1", role="assistant", session="conv", tags=["a", "b"], summary="sum",
                                 importance=70, relations=[{"type": "related_to", "message_id": target}])
        clock.now += 1
        body = await m.update(original["message_id"], tags=["c"])
        assert body["changed"] is True
        new = body["message"]
        for key in ("message_id", "session_id", "role", "timestamp", "content"):
            assert new[key] == original[key]
        assert (new["revision"], new["updated_at"]) == (2, original["updated_at"] + 1)
        assert new["metadata"] == {**original["metadata"], "tags": ["c"]}
        clock.now += 1
        new = (await m.update(original["message_id"], summary="", relations=[]))["message"]
        assert "summary" not in new["metadata"] and new["metadata"]["relations"] == []
        assert new["metadata"]["tags"] == ["c"] and new["metadata"]["importance"] == 70
        assert new["revision"] == 3 and new["updated_at"] == original["updated_at"] + 2
        assert (await m.read(session_id="conv"))["history"] == [new]


async def test_an_update_that_changes_nothing_writes_nothing(mcp):
    m = await mcp.write("same", tags=["t"], importance=5)
    async with nothing_changes(mcp):
        for args in ({"metadata_json": "{}"}, {"content": "same"},
                     {"metadata_json": json.dumps({"tags": ["t"], "importance": 5, "summary": ""})},
                     {"content": "same", "metadata_json": '{"memory_tier":"short"}', "expected_revision": 1}):
            body = await mcp.ok("update_message", message_id=m["message_id"], **args)
            assert body == {"status": "OK", "changed": False, "message": m}


async def test_updated_at_never_goes_back_when_the_clock_does(store_path):
    clock = Clock()
    async with connect(store_path, clock=clock) as m:
        first = await m.write("v1")
        clock.now -= 1000
        second = (await m.update(first["message_id"], "v2"))["message"]
        assert second["updated_at"] >= first["updated_at"]
        assert second["timestamp"] == first["timestamp"]


async def test_update_conflicts_and_missing_messages_change_nothing(mcp):
    m = await mcp.write("v1")
    gone = await mcp.write("gone")
    await mcp.ok("delete_message", message_id=gone["message_id"])
    async with nothing_changes(mcp):
        await mcp.fail("update_message", {"message_id": m["message_id"], "content": "v2", "expected_revision": 2},
                       code="CONFLICT")
        await mcp.fail("update_message", {"message_id": gone["message_id"], "content": "v2"}, code="NOT_FOUND")
        await mcp.fail("update_message", {"message_id": MISSING, "content": "v2"}, code="NOT_FOUND")
    body = await mcp.ok("update_message", message_id=m["message_id"], content="v2", expected_revision=1)
    assert body["message"]["revision"] == 2


async def test_changing_the_kind_moves_the_session_kind_counts(mcp):
    m = await mcp.write("x")
    await mcp.update(m["message_id"], memory_kind="summary")
    [entry] = (await mcp.read(view="sessions"))["sessions"]
    assert entry["kind_counts"]["summary"] == 1 and entry["kind_counts"]["conversation"] == 0


# ---------------------------------------------------------------------- delete
async def test_the_session_guard_protects_messages_of_other_sessions(mcp):
    m = await mcp.write("guarded", session="mine", tags=["t"])
    async with nothing_changes(mcp):
        result = await mcp.call("delete_message", {"message_id": m["message_id"], "session_id": "yours"})
        assert not result.is_error and parse(result) == {"status": "NOT_FOUND"}
        result = await mcp.call("delete_message", {"message_id": MISSING})
        assert not result.is_error and parse(result) == {"status": "NOT_FOUND"}
    assert await mcp.ok("delete_message", message_id=m["message_id"], session_id="mine") == {"status": "OK"}


async def test_a_deleted_message_disappears_from_every_view_at_once(mcp):
    keep = await mcp.write("keeper text", session="s")
    m = await mcp.write("doomed text", session="s", tags=["doomed"],
                        relations=[{"type": "related_to", "message_id": keep["message_id"]}])
    await mcp.ok("delete_message", message_id=m["message_id"])
    assert (await mcp.read(session_id="s"))["history"] == [keep]
    assert await mcp.search("doomed") == []
    ctx = await mcp.read(view="context", message_id=keep["message_id"])
    assert ctx["chronological_context"]["after"] == [] and ctx["relations"] == []
    [entry] = (await mcp.read(view="sessions"))["sessions"]
    assert entry["message_count"] == 1 and entry["representative_summary"] == "keeper text"


# --------------------------------------------------------------------- counters
async def test_each_accepted_write_raises_the_sequence_and_the_io_counters(mcp):
    h0 = await mcp.health()
    m = await mcp.write("one")
    h1 = await mcp.health()
    await mcp.update(m["message_id"], "two")
    h2 = await mcp.health()
    await mcp.ok("delete_message", message_id=m["message_id"])
    h3 = await mcp.health()
    for before, after in ((h0, h1), (h1, h2), (h2, h3)):
        assert after["last_sequence"] == before["last_sequence"] + 1
        assert after["io"]["write_calls"] == before["io"]["write_calls"] + 1
        assert after["io"]["write_bytes"] > before["io"]["write_bytes"]
        assert after["io"]["flush_calls"] >= before["io"]["flush_calls"]


async def test_reads_searches_errors_and_no_op_updates_raise_nothing(mcp):
    m = await mcp.write("counted once", summary="s")
    async with nothing_changes(mcp):
        await mcp.read(session_id="s")
        await mcp.read(view="sessions")
        await mcp.read(view="content", message_id=m["message_id"])
        await mcp.read(view="context", message_id=m["message_id"], relation_depth=2)
        await mcp.search("counted", context_size=3)
        await mcp.update(m["message_id"])
        await mcp.call("delete_message", {"message_id": MISSING})
        await mcp.fail("write_message", {"session_id": "s", "role": "nobody", "content": "x"})
        await mcp.fail("update_message", {"message_id": m["message_id"], "content": "y",
                                          "expected_revision": 9}, code="CONFLICT")


async def test_a_clean_restart_changes_no_health_field(store_path):
    async with connect(store_path) as m:
        a = await m.write("a")
        await m.update(a["message_id"], "b")
        await m.write("c", session="t")
        before = await m.health()
    async with connect(store_path) as m:
        assert await m.health() == before
    async with connect(store_path) as m:
        assert await m.health() == before


# ---------------------------------------------------------------------- rebuild
def store_bytes(store_path: str) -> bytes:
    out = b""
    for root, _dirs, files in os.walk(store_path):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                out += fh.read()
    return out.lower()


async def test_rebuild_index_compacts_to_live_messages_and_removes_dead_text(mcp, store_path):
    keep = await mcp.write("Keep this PERMANENT text", tags=["Stay"])
    old = await mcp.write("Superseded WALRUS content", tags=["OldTagQuokka"], summary="Old summary NARWHAL")
    gone = await mcp.write("Deleted PANGOLIN content", summary="Deleted summary AXOLOTL", tags=["TagIbex"])
    await mcp.update(old["message_id"], "fresh content", tags=["newtag"], summary="new summary")
    await mcp.ok("delete_message", message_id=gone["message_id"])
    before = await mcp.health()
    assert before["dead_bytes"] > 0 and before["update_records"] == 1
    body = await mcp.ok("rebuild_index")
    assert body["messages_indexed"] == 2
    assert body["records_removed"] == 3          # 5 events in, 2 out
    assert body["bytes_before"] > 0 and body["bytes_after"] > 0
    after = await mcp.health()
    assert (after["dead_bytes"], after["update_records"], after["deleted_messages"]) == (0, 0, 0)
    assert after["active_messages"] == 2 and after["session_count"] == 1
    assert after["io"]["replace_calls"] == before["io"]["replace_calls"] + 1
    assert after["last_sequence"] >= before["last_sequence"]
    assert after["snapshot_valid"] is True and after["status"] == "OK"
    disk = store_bytes(store_path)
    for word in ("walrus", "narwhal", "oldtagquokka", "pangolin", "axolotl", "tagibex"):
        assert word.encode() not in disk, word
    assert b"permanent" in disk
    history = (await mcp.read(session_id="s"))["history"]
    assert [h["message_id"] for h in history] == [keep["message_id"], old["message_id"]]
    assert history[1]["revision"] == 2 and history[1]["content"] == "fresh content"
    assert (await mcp.search("fresh"))[0]["message_id"] == old["message_id"]
    again = await mcp.ok("rebuild_index")
    assert again["records_removed"] == 0 and again["messages_indexed"] == 2
    newer = await mcp.write("after rebuild")
    assert newer["message_id"] > old["message_id"]
    assert (await mcp.health())["last_sequence"] > after["last_sequence"]


async def test_rebuild_index_is_busy_while_another_process_holds_the_store(mcp, store_path):
    await mcp.write("x")
    fd = os.open(os.path.join(store_path, "convmem.lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        async with nothing_changes(mcp):
            await mcp.fail("rebuild_index", {}, code="BUSY")
    finally:
        os.close(fd)
    assert (await mcp.ok("rebuild_index"))["messages_indexed"] == 1
    assert (await mcp.health())["status"] == "OK"


# ----------------------------------------------------------------------- budget
def text_size(result) -> int:
    return len(result.content[0].text.encode("utf-8"))


async def test_nine_one_mebibyte_messages_never_fit_in_one_history_page(mcp):
    written = [(await mcp.write("needle " + "x" * (MIB - 7)))["message_id"] for _ in range(9)]
    seen, cursor, sizes = [], None, []
    while True:
        result = await mcp.call("read_messages", {"session_id": "s", **({"cursor": cursor} if cursor else {})})
        sizes.append(text_size(result))
        body = parse(result)
        seen += [m["message_id"] for m in body["history"]]
        cursor = body.get("nextCursor")
        if cursor is None:
            break
    assert seen == written
    assert len(sizes) >= 2 and max(sizes) <= BUDGET
    result = await mcp.call("search_messages", {"query": "needle", "limit": 100})
    assert text_size(result) <= BUDGET
    assert 1 <= len(parse(result)["results"]) < 9


async def test_the_budget_counts_escaped_json_not_raw_bytes(mcp):
    for _ in range(5):
        await mcp.write('"' * MIB)                    # each escapes to 2 MiB of JSON
    first = await mcp.call("read_messages", {"session_id": "s"})
    assert text_size(first) <= BUDGET
    assert len(parse(first)["history"]) < 5 and "nextCursor" in parse(first)


async def test_sessions_pages_end_at_the_budget_with_a_cursor(mcp):
    for i in range(9):
        await mcp.write("y" * MIB, session=f"big-{i}")
    seen, cursor, pages = [], None, 0
    while True:
        result = await mcp.call("read_messages", {"view": "sessions", **({"cursor": cursor} if cursor else {})})
        assert text_size(result) <= BUDGET
        body = parse(result)
        assert all(len(e["representative_summary"]) == MIB for e in body["sessions"])
        seen += [e["session_id"] for e in body["sessions"]]
        pages += 1
        cursor = body.get("nextCursor")
        if cursor is None:
            break
    assert sorted(seen) == [f"big-{i}" for i in range(9)] and pages >= 2


async def test_a_context_over_the_budget_is_truncated(mcp):
    older = [(await mcp.write("z" * MIB))["message_id"] for _ in range(9)]
    last = (await mcp.write("focal"))["message_id"]
    result = await mcp.call("read_messages", {"view": "context", "message_id": last, "before": 10})
    assert text_size(result) <= BUDGET
    body = parse(result)
    before = [m["message_id"] for m in body["chronological_context"]["before"]]
    assert body["truncated"] is True and 1 <= len(before) < 9
    assert before == older[-len(before):]          # the nearest neighbours are the ones kept


async def test_a_search_preview_is_trimmed_to_the_budget_nearest_neighbours_first(mcp):
    around = [(await mcp.write("\x01" * MIB))["message_id"] for _ in range(3)]    # 6 MiB of JSON each
    hit = await mcp.write("needle")
    for _ in range(3):
        await mcp.write("\x01" * MIB)
    result = await mcp.call("search_messages", {"query": "needle", "context_size": 3})
    assert text_size(result) <= BUDGET
    [r] = parse(result)["results"]
    assert r["message_id"] == hit["message_id"]
    preview = r["context_preview"]
    assert [m["message_id"] for m in preview["before"]] == around[-1:]
    assert preview["after"] == []
