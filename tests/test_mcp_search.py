"""search_messages through the MCP client: shape, filters, ranking rules, previews."""

from __future__ import annotations

import json

import pytest
from helpers import MESSAGE_KEYS, RESULT_KEYS, assert_message, nothing_changes

pytestmark = pytest.mark.anyio


def check_result(r: dict, preview: bool = False) -> None:
    assert set(r) == RESULT_KEYS | ({"context_preview"} if preview else set())
    assert_message({k: r[k] for k in MESSAGE_KEYS}, summary="summary" in r["metadata"],
                   tool_call_id="tool_call_id" in r["metadata"])
    assert 0.0 <= r["score"] <= 1.0
    assert set(r["score_breakdown"]) == {"content", "summary", "tags"}
    assert all(0.0 <= v <= 1.0 for v in r["score_breakdown"].values())
    assert r["matched_fields"] == [f for f in ("content", "summary", "tags") if r["score_breakdown"][f] > 0]
    assert type(r["relation_count"]) is int


async def test_a_result_is_the_message_plus_score_fields(mcp):
    written = await mcp.write("the billing database is PostgreSQL", tags=["db"], summary="billing db")
    body = await mcp.ok("search_messages", query="postgresql")
    assert set(body) == {"status", "results"}
    [r] = body["results"]
    check_result(r)
    assert {k: r[k] for k in written} == written
    assert r["matched_fields"] == ["content"] and r["relation_count"] == 0


async def test_a_field_equal_to_the_query_scores_one_after_nfkc_and_case_folding(mcp):
    await mcp.write("Remember this")
    await mcp.write("Remember this and much more besides")
    [whole, partial] = await mcp.search("ＲＥＭＥＭＢＥＲ this")
    assert whole["content"] == "Remember this"
    assert whole["score"] == 1.0 and whole["score_breakdown"]["content"] == 1.0
    assert partial["score"] < 1.0
    tagged = await mcp.write("unrelated words", tags=["Project-X"], summary="Weekly Sync")
    [r] = await mcp.search("project-x")
    assert r["message_id"] == tagged["message_id"]
    assert r["score_breakdown"]["tags"] == 1.0 and r["matched_fields"] == ["tags"]
    [r] = await mcp.search("weekly sync")
    assert r["score_breakdown"]["summary"] == 1.0 and "summary" in r["matched_fields"]


async def test_filters_or_within_kinds_and_tiers_and_require_every_tag(mcp):
    def write(kind, tier, tags, importance=50):
        return mcp.write("shared topic words", memory_kind=kind, memory_tier=tier, tags=tags,
                         importance=importance)
    a = await write("semantic", "long", ["project", "confirmed"], 90)
    b = await write("preference", "mid", ["project"], 70)
    c = await write("semantic", "short", ["confirmed"], 30)
    d = await write("episode", "long", [], 10)

    async def found(**filters) -> set[str]:
        rs = await mcp.search("topic", filters_json=json.dumps(filters))
        return {r["message_id"] for r in rs}
    A, B, C, D = (x["message_id"] for x in (a, b, c, d))
    assert await found() == {A, B, C, D}
    assert await found(kinds=["semantic", "preference"]) == {A, B, C}
    assert await found(tiers=["mid", "long"]) == {A, B, D}
    assert await found(kinds=["semantic"], tiers=["long"]) == {A}
    assert await found(tags=["project"]) == {A, B}
    assert await found(tags=["project", "confirmed"]) == {A}
    assert await found(tags=["nope"]) == set()
    rs = await mcp.search("topic", min_importance=70)
    assert {r["message_id"] for r in rs} == {A, B}
    assert {r["message_id"] for r in await mcp.search("topic", min_importance=100)} == set()


async def test_search_can_be_limited_to_one_session(mcp):
    a = await mcp.write("alpha beta", session="one")
    await mcp.write("alpha beta", session="two")
    assert [r["message_id"] for r in await mcp.search("alpha", session_id="one")] == [a["message_id"]]
    assert await mcp.search("alpha", session_id="three") == []


async def test_ties_go_to_importance_then_newer_then_message_id(mcp):
    low = await mcp.write("same words here", importance=10)
    old = await mcp.write("same words here", importance=60)
    new = await mcp.write("same words here", importance=60)
    rs = await mcp.search("same words here")
    assert [r["message_id"] for r in rs] == [new["message_id"], old["message_id"], low["message_id"]]
    assert len({r["score"] for r in rs}) == 1


async def test_limit_caps_the_results(mcp):
    for i in range(25):
        await mcp.write(f"common word number {i}")
    assert len(await mcp.search("common")) == 20
    assert len(await mcp.search("common", limit=1)) == 1
    assert len(await mcp.search("common", limit=100)) == 25


async def test_context_preview_appears_only_when_asked_for(mcp):
    msgs = [await mcp.write(f"turn {i}" + (" needle" if i == 3 else "")) for i in range(6)]
    [r] = await mcp.search("needle")
    assert "context_preview" not in r
    [r] = await mcp.search("needle", context_size=2)
    check_result(r, preview=True)
    assert set(r["context_preview"]) == {"before", "after"}
    assert r["context_preview"]["before"] == msgs[1:3]
    assert r["context_preview"]["after"] == msgs[4:6]
    [r] = await mcp.search("needle", context_size=3)
    assert r["context_preview"]["before"] == msgs[0:3] and r["context_preview"]["after"] == msgs[4:6]


async def test_relation_count_counts_outgoing_and_incoming_relations(mcp):
    a = await mcp.write("hub message")
    await mcp.write("spoke one", relations=[{"type": "related_to", "message_id": a["message_id"]}])
    await mcp.update(a["message_id"], relations=[
        {"type": "depends_on", "message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAW"}])
    [r] = await mcp.search("hub")
    assert r["relation_count"] == 2


async def test_deleted_and_superseded_text_is_not_found(mcp):
    a = await mcp.write("ephemeral zebra")
    b = await mcp.write("original giraffe")
    await mcp.ok("delete_message", message_id=a["message_id"])
    await mcp.update(b["message_id"], "replacement okapi")
    assert await mcp.search("zebra") == []
    assert await mcp.search("giraffe") == []
    [r] = await mcp.search("okapi")
    assert r["message_id"] == b["message_id"] and r["revision"] == 2


async def test_japanese_and_identifier_queries_find_their_messages(mcp):
    ja = await mcp.write("東京で会議を行いました")
    err = await mcp.write("the client failed with ERR_CONN_RESET at os.path.join in /usr/lib/libfoo.so")
    camel = await mcp.write("call parseHttpResponse then snake_case_name")
    for query, expected in (("東京", ja), ("会", ja), ("ERR_CONN_RESET", err), ("err_conn_reset", err),
                            ("os.path.join", err), ("/usr/lib/libfoo.so", err),
                            ("parseHttpResponse", camel), ("snake_case_name", camel)):
        rs = await mcp.search(query)
        assert rs and rs[0]["message_id"] == expected["message_id"], query


async def test_search_writes_nothing(mcp):
    for i in range(5):
        await mcp.write(f"message {i} about search")
    async with nothing_changes(mcp):
        await mcp.search("search", context_size=3, limit=100)
        await mcp.search("nothing matches this")
        await mcp.search("message", filters_json='{"kinds":["semantic"]}')


async def test_a_query_of_only_punctuation_or_stopwords_answers_normally(mcp):
    await mcp.write("the")
    await mcp.write("!!!")
    assert [r["content"] for r in await mcp.search("the")] == ["the"]
    assert [r["content"] for r in await mcp.search("!!!")] == ["!!!"]
    assert await mcp.search("   ") == []
