"""The content (byte range) and context (neighbours + relation graph) views."""

from __future__ import annotations

import pytest
from helpers import RANGE_KEYS, assert_message, nothing_changes

pytestmark = pytest.mark.anyio

MIXED = "ab" + "あ" + "😀" + "c"          # 1+1+3+4+1 = 10 bytes
MISSING = "01ARZ3NDEKTSV4RRFFQ69G5FAW"


async def chunk(m, message_id: str, **arguments) -> dict:
    return (await m.read(view="content", message_id=message_id, **arguments))["content_range"]


# --------------------------------------------------------------------- content
async def test_a_content_range_has_exactly_the_documented_fields(mcp):
    m = await mcp.write(MIXED)
    body = await mcp.read(view="content", message_id=m["message_id"])
    assert set(body) == {"status", "content_range"}
    assert body["content_range"] == {"message_id": m["message_id"], "revision": 1, "total_bytes": 10,
                                     "content_offset": 0, "next_content_offset": 10, "complete": True,
                                     "content": MIXED}
    assert set(body["content_range"]) == RANGE_KEYS


@pytest.mark.parametrize("offset, limit, content, nxt", [
    (0, 3, "ab", 2),            # would end inside あ: shortened to the boundary before it
    (0, 5, "abあ", 5),
    (0, 8, "abあ", 5),          # would end inside 😀
    (2, 1, "あ", 5),            # limit below one code point: that code point whole (2 bytes over)
    (2, 2, "あ", 5),
    (5, 1, "😀", 9),            # 3 bytes over
    (5, 3, "😀", 9),
    (5, 4, "😀", 9),
    (5, 5, "😀c", 10),
    (9, 100, "c", 10),
    (10, 1, "", 10),            # the end is a valid offset
    (0, 65536, MIXED, 10),
])
async def test_a_chunk_ends_on_a_code_point_boundary(mcp, offset, limit, content, nxt):
    m = await mcp.write(MIXED)
    got = await chunk(mcp, m["message_id"], content_offset=offset, content_limit=limit)
    assert (got["content"], got["next_content_offset"], got["content_offset"]) == (content, nxt, offset)
    assert got["complete"] is (nxt == 10)
    assert got["total_bytes"] == 10


@pytest.mark.parametrize("offset", [3, 4, 6, 7, 8, 11, 1 << 40])
async def test_an_offset_inside_a_code_point_or_past_the_end_is_a_validation_error(mcp, offset):
    m = await mcp.write(MIXED)
    message = await mcp.fail("read_messages", {"view": "content", "message_id": m["message_id"],
                                               "content_offset": offset})
    assert "content_offset" in message


async def test_iterating_next_content_offset_reassembles_the_content(mcp):
    text = ("日本語のテキスト😀 and ASCII " * 10)[:200]
    m = await mcp.write(text)
    for limit in (1, 2, 4, 7, 100):
        parts, offset, rev = [], 0, None
        while True:
            args = {"content_offset": offset, "content_limit": limit}
            if rev is not None:
                args["expected_revision"] = rev
            got = await chunk(mcp, m["message_id"], **args)
            rev = got["revision"]
            size = len(got["content"].encode())
            assert size <= limit or len(got["content"]) == 1
            parts.append(got["content"])
            offset = got["next_content_offset"]
            if got["complete"]:
                break
        assert "".join(parts) == text and offset == len(text.encode())


async def test_the_default_content_limit_is_4096_bytes(mcp):
    m = await mcp.write("x" * 5000)
    got = await chunk(mcp, m["message_id"])
    assert (len(got["content"]), got["next_content_offset"], got["complete"]) == (4096, 4096, False)


async def test_a_stale_expected_revision_is_a_conflict_and_a_missing_message_not_found(mcp):
    m = await mcp.write("v1")
    await mcp.update(m["message_id"], "version two")
    args = {"view": "content", "message_id": m["message_id"]}
    async with nothing_changes(mcp):
        await mcp.fail("read_messages", {**args, "expected_revision": 1}, code="CONFLICT")
        got = await chunk(mcp, m["message_id"], expected_revision=2)
        assert (got["revision"], got["content"]) == (2, "version two")
        await mcp.fail("read_messages", {**args, "message_id": MISSING}, code="NOT_FOUND")
        await mcp.fail("read_messages", {**args, "message_id": MISSING, "expected_revision": 1},
                       code="NOT_FOUND")
    await mcp.ok("delete_message", message_id=m["message_id"])
    await mcp.fail("read_messages", args, code="NOT_FOUND")


async def test_reading_content_changes_nothing(mcp):
    m = await mcp.write(MIXED * 100)
    async with nothing_changes(mcp):
        for offset in (0, 10, 20):
            await chunk(mcp, m["message_id"], content_offset=offset, content_limit=7)


# --------------------------------------------------------------------- context
async def context(m, message_id: str, **arguments) -> dict:
    body = await m.read(view="context", message_id=message_id, **arguments)
    assert set(body) == {"status", "message", "chronological_context", "relations", "session", "truncated"}
    assert set(body["chronological_context"]) == {"before", "after"}
    assert set(body["session"]) == {"session_id", "message_count"}
    for entry in body["relations"]:
        if "message" in entry:
            assert set(entry) == {"type", "direction", "depth", "message"}
            assert_message(entry["message"], summary="summary" in entry["message"]["metadata"])
        else:
            assert set(entry) == {"type", "direction", "depth", "message_id", "status"}
            assert entry["status"] == "deleted"
        assert entry["direction"] in ("outgoing", "incoming") and entry["depth"] in (1, 2)
    return body


def ids(messages: list[dict]) -> list[str]:
    return [m["message_id"] for m in messages]


def edges(body: dict) -> set[tuple]:
    return {(e["type"], e["direction"], e["depth"],
             e["message"]["message_id"] if "message" in e else e["message_id"], "message" in e)
            for e in body["relations"]}


async def test_context_lists_neighbours_of_the_same_session_oldest_first(mcp):
    msgs = [await mcp.write(f"m{i}", session="s") for i in range(7)]
    await mcp.write("elsewhere", session="t")
    mid = msgs[3]["message_id"]
    body = await context(mcp, mid)
    assert body["message"] == msgs[3]
    assert ids(body["chronological_context"]["before"]) == ids(msgs[2:3])
    assert ids(body["chronological_context"]["after"]) == ids(msgs[4:5])
    assert body["session"] == {"session_id": "s", "message_count": 7}
    assert body["relations"] == [] and body["truncated"] is False
    body = await context(mcp, mid, before=2, after=10)
    assert ids(body["chronological_context"]["before"]) == ids(msgs[1:3])
    assert ids(body["chronological_context"]["after"]) == ids(msgs[4:])
    await mcp.ok("delete_message", message_id=msgs[2]["message_id"])
    body = await context(mcp, mid, before=10, after=0)
    assert ids(body["chronological_context"]["before"]) == ids(msgs[0:2])
    assert body["chronological_context"]["after"] == []
    assert body["session"]["message_count"] == 6


async def test_the_relation_graph_is_walked_two_steps_in_both_directions(mcp):
    c = await mcp.write("C", session="g")
    d = await mcp.write("D", session="g")
    f = await mcp.write("F", session="g")
    ghost = "01ARZ3NDEKTSV4RRFFQ69G5FAW"
    a = await mcp.write("A", session="focal", relations=[
        {"type": "depends_on", "message_id": c["message_id"]},
        {"type": "related_to", "message_id": ghost},
        {"type": "depends_on", "message_id": f["message_id"]}])
    await mcp.update(c["message_id"], relations=[{"type": "related_to", "message_id": d["message_id"]}])
    b = await mcp.write("B", session="g", relations=[{"type": "derived_from", "message_id": a["message_id"]}])
    e = await mcp.write("E", session="g", relations=[{"type": "supersedes", "message_id": b["message_id"]}])
    await mcp.ok("delete_message", message_id=f["message_id"])
    A, B, C, D, E, F = (x["message_id"] for x in (a, b, c, d, e, f))
    level1 = {("depends_on", "outgoing", 1, C, True), ("related_to", "outgoing", 1, ghost, False),
              ("depends_on", "outgoing", 1, F, False), ("derived_from", "incoming", 1, B, True)}
    level2 = {("related_to", "outgoing", 2, D, True), ("supersedes", "incoming", 2, E, True)}
    body = await context(mcp, A, relation_depth=2, before=0, after=0)
    assert edges(body) == level1 | level2 and len(body["relations"]) == 6
    assert edges(await context(mcp, A)) == level1
    assert (await context(mcp, A, relation_depth=0))["relations"] == []
    typed = await context(mcp, A, relation_depth=2, relation_types_json='["depends_on"]')
    assert edges(typed) == {("depends_on", "outgoing", 1, C, True), ("depends_on", "outgoing", 1, F, False)}
    typed = await context(mcp, A, relation_depth=2, relation_types_json='["derived_from","supersedes"]')
    assert edges(typed) == {("derived_from", "incoming", 1, B, True), ("supersedes", "incoming", 2, E, True)}
    assert (await context(mcp, A, relation_depth=2, relation_types_json="[]"))["relations"] == []
    from_d = await context(mcp, D, relation_depth=2)
    assert edges(from_d) == {("related_to", "incoming", 1, C, True), ("depends_on", "incoming", 2, A, True)}


async def test_cycles_and_self_relations_list_each_message_once_and_never_the_focal_one(mcp):
    a = await mcp.write("A")
    b = await mcp.write("B", relations=[{"type": "related_to", "message_id": a["message_id"]}])
    await mcp.update(a["message_id"], relations=[
        {"type": "related_to", "message_id": b["message_id"]},
        {"type": "depends_on", "message_id": b["message_id"]},
        {"type": "supersedes", "message_id": a["message_id"]}])
    body = await context(mcp, a["message_id"], relation_depth=2)
    listed = [e["message"]["message_id"] for e in body["relations"]]
    assert listed == [b["message_id"]]
    assert body["truncated"] is False


async def test_a_deleted_relation_end_is_reported_once_as_deleted(mcp):
    gone = await mcp.write("gone")
    a = await mcp.write("A", relations=[{"type": "related_to", "message_id": gone["message_id"]},
                                        {"type": "supersedes", "message_id": gone["message_id"]}])
    await mcp.ok("delete_message", message_id=gone["message_id"])
    body = await context(mcp, a["message_id"], relation_depth=2)
    [entry] = body["relations"]
    assert entry["type"] in ("related_to", "supersedes")
    assert entry == {"type": entry["type"], "direction": "outgoing", "depth": 1,
                     "message_id": gone["message_id"], "status": "deleted"}


async def _star(m, spokes: int) -> tuple[str, list[str]]:
    """A focal message with 10 neighbours each side and ``spokes`` related messages."""
    for i in range(10):
        await m.write(f"before {i}", session="s")
    focal = await m.write("focal", session="s")
    for i in range(10):
        await m.write(f"after {i}", session="s")
    out = [(await m.write(f"out {i}", session="r"))["message_id"] for i in range(min(spokes, 32))]
    await m.update(focal["message_id"], relations=[{"type": "related_to", "message_id": x} for x in out])
    for i in range(spokes - len(out)):
        await m.write(f"in {i}", session="r", relations=[{"type": "depends_on", "message_id": focal["message_id"]}])
    return focal["message_id"], out


def _counted(body: dict) -> int:
    chrono = body["chronological_context"]
    return 1 + len(chrono["before"]) + len(chrono["after"]) + sum("message" in e for e in body["relations"])


async def test_context_holds_at_most_fifty_messages_then_reports_truncated(mcp):
    focal, _ = await _star(mcp, 40)
    body = await context(mcp, focal, before=10, after=10, relation_depth=2)
    assert _counted(body) == 50
    assert len(body["chronological_context"]["before"]) == 10
    assert len(body["chronological_context"]["after"]) == 10
    assert body["truncated"] is True


async def test_context_of_exactly_fifty_messages_is_not_truncated(mcp):
    focal, _ = await _star(mcp, 29)
    body = await context(mcp, focal, before=10, after=10, relation_depth=2)
    assert _counted(body) == 50 and body["truncated"] is False


async def test_context_of_a_missing_or_deleted_message_is_not_found(mcp):
    m = await mcp.write()
    await mcp.ok("delete_message", message_id=m["message_id"])
    for mid in (m["message_id"], MISSING):
        await mcp.fail("read_messages", {"view": "context", "message_id": mid}, code="NOT_FOUND")
