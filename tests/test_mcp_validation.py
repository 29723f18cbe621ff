"""Every validation boundary of docs/tools.md (parameter tables, metadata fields, fine points),
through the MCP client.

Each refused call must answer ``VALIDATION_ERROR`` naming the field, and must
change nothing: the health report (counters, sizes, ``last_sequence``) is the
same before and after.  Each value just inside a limit must be accepted.
"""

from __future__ import annotations

import json

import pytest
from helpers import connect, nothing_changes

pytestmark = pytest.mark.anyio

MID = "@MID@"                       # replaced by the id of a live message
GOOD_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAW"


def bytes_of_a(n: int) -> str:
    """A string of exactly ``n`` UTF-8 bytes made mostly of 'あ' (3 bytes each)."""
    return "あ" * (n // 3) + "a" * (n % 3)


def w(**extra) -> dict:
    return {"session_id": "s", "role": "user", "content": "x", **extra}


def meta(**fields) -> dict:
    return w(metadata_json=json.dumps(fields))


def raw_meta(text: str) -> dict:
    return w(metadata_json=text)


def rel(type_: str = "related_to", message_id: str = GOOD_ID, **extra) -> dict:
    return {"type": type_, "message_id": message_id, **extra}


REFUSED = [
    # write_message: session_id, role, content
    ("write_message", w(session_id=""), "session_id"),
    ("write_message", w(session_id=bytes_of_a(257)), "session_id"),
    ("write_message", w(session_id="a\x00b"), "session_id"),
    ("write_message", w(session_id="\ud800"), "session_id"),
    ("write_message", w(session_id=7), "session_id"),
    ("write_message", w(role="User"), "role"),
    ("write_message", w(role="tool"), "role"),
    ("write_message", w(role=None), "role"),
    ("write_message", w(content=""), "content"),
    ("write_message", w(content=bytes_of_a((1 << 20) + 1)), "content"),
    ("write_message", w(content="ok \udfff"), "content"),
    ("write_message", w(content=["x"]), "content"),
    ("write_message", {"role": "user", "content": "x"}, "session_id"),
    ("write_message", {"session_id": "s", "content": "x"}, "role"),
    ("write_message", {"session_id": "s", "role": "user"}, "content"),
    ("write_message", w(extra=1), "extra"),
    ("write_message", w(metadata_json=None), "metadata_json"),
    ("write_message", w(metadata_json={"tags": []}), "metadata_json"),
    # metadata_json: parsing and unknown keys
    ("write_message", raw_meta("not json"), "metadata_json"),
    ("write_message", raw_meta("[]"), "metadata_json"),
    ("write_message", raw_meta("null"), "metadata_json"),
    ("write_message", raw_meta('"{}"'), "metadata_json"),
    ("write_message", raw_meta('{"importance": NaN}'), "metadata_json"),
    ("write_message", raw_meta('{"importance": 1e400}'), "importance"),
    ("write_message", raw_meta('{"summary": "\\ud800"}'), "summary"),
    ("write_message", meta(colour="red"), "colour"),
    # metadata fields: null, types, ranges
    *[("write_message", meta(**{f: None}), f) for f in (
        "tool_call_id", "tags", "memory_tier", "memory_kind", "importance", "summary",
        "relations", "source_message_ids")],
    ("write_message", meta(tool_call_id=bytes_of_a(257)), "tool_call_id"),
    ("write_message", meta(tool_call_id=5), "tool_call_id"),
    ("write_message", meta(tags="project"), "tags"),
    ("write_message", meta(tags=[f"t{i}" for i in range(33)]), "tags"),
    ("write_message", meta(tags=[bytes_of_a(129)]), "tags"),
    ("write_message", meta(tags=[""]), "tags"),
    ("write_message", meta(tags=[1]), "tags"),
    ("write_message", meta(memory_tier="huge"), "memory_tier"),
    ("write_message", meta(memory_tier="Short"), "memory_tier"),
    ("write_message", meta(memory_kind="fact"), "memory_kind"),
    ("write_message", meta(importance=True), "importance"),
    ("write_message", meta(importance=False), "importance"),
    ("write_message", meta(importance=50.0), "importance"),
    ("write_message", meta(importance="50"), "importance"),
    ("write_message", meta(importance=101), "importance"),
    ("write_message", meta(importance=-1), "importance"),
    ("write_message", meta(summary=bytes_of_a(4097)), "summary"),
    ("write_message", meta(summary=["s"]), "summary"),
    ("write_message", meta(relations={"type": "related_to"}), "relations"),
    ("write_message", meta(relations=[rel()] * 1 + [rel(message_id=GOOD_ID[:-1] + c)
                                                    for c in "0123456789ABCDEFGHJKMNPQRSTVWXYZ"]),
     "relations"),
    ("write_message", meta(relations=[rel(note="x")]), "relations"),
    ("write_message", meta(relations=[{"type": "related_to"}]), "relations"),
    ("write_message", meta(relations=[{"message_id": GOOD_ID}]), "relations"),
    ("write_message", meta(relations=["related_to"]), "relations"),
    ("write_message", meta(relations=[rel("parent_of")]), "type"),
    ("write_message", meta(relations=[rel(type_=None)]), "type"),
    ("write_message", meta(relations=[rel(message_id=GOOD_ID.lower())]), "message_id"),
    ("write_message", meta(relations=[rel(message_id="8" + GOOD_ID[1:])]), "message_id"),
    ("write_message", meta(relations=[rel(message_id=GOOD_ID[:-1])]), "message_id"),
    ("write_message", meta(source_message_ids=[GOOD_ID] * 65), "source_message_ids"),
    ("write_message", meta(source_message_ids=GOOD_ID), "source_message_ids"),
    ("write_message", meta(source_message_ids=[GOOD_ID.lower()]), "source_message_ids"),
    ("write_message", meta(source_message_ids=["Z" + GOOD_ID[1:]]), "source_message_ids"),
    ("write_message", meta(source_message_ids=[GOOD_ID[:-1] + "U"]), "source_message_ids"),
    # update_message
    ("update_message", {"message_id": MID}, "content"),
    ("update_message", {"message_id": MID.lower(), "content": "x"}, "message_id"),
    ("update_message", {"message_id": GOOD_ID.lower(), "content": "x"}, "message_id"),
    ("update_message", {"message_id": "8" + GOOD_ID[1:], "content": "x"}, "message_id"),
    ("update_message", {"message_id": GOOD_ID[:-1] + "I", "content": "x"}, "message_id"),
    ("update_message", {"message_id": GOOD_ID + "0", "content": "x"}, "message_id"),
    ("update_message", {"message_id": 12, "content": "x"}, "message_id"),
    ("update_message", {"content": "x"}, "message_id"),
    ("update_message", {"message_id": MID, "content": ""}, "content"),
    ("update_message", {"message_id": MID, "content": None}, "content"),
    ("update_message", {"message_id": MID, "content": bytes_of_a((1 << 20) + 1)}, "content"),
    ("update_message", {"message_id": MID, "metadata_json": None}, "metadata_json"),
    ("update_message", {"message_id": MID, "metadata_json": '{"importance":null}'}, "importance"),
    ("update_message", {"message_id": MID, "metadata_json": '{"x":1}'}, "metadata_json"),
    ("update_message", {"message_id": MID, "content": "y", "expected_revision": 0}, "expected_revision"),
    ("update_message", {"message_id": MID, "content": "y", "expected_revision": True}, "expected_revision"),
    ("update_message", {"message_id": MID, "content": "y", "expected_revision": 1.0}, "expected_revision"),
    ("update_message", {"message_id": MID, "content": "y", "expected_revision": "1"}, "expected_revision"),
    ("update_message", {"message_id": MID, "content": "y", "session_id": "s"}, "session_id"),
    # read_messages: common
    ("read_messages", {"view": "bogus"}, "view"),
    ("read_messages", {"view": 1}, "view"),
    ("read_messages", {"view": None}, "view"),
    ("read_messages", {"session_id": "s", "colour": 1}, "colour"),
    # history
    ("read_messages", {}, "session_id"),
    ("read_messages", {"view": "history"}, "session_id"),
    ("read_messages", {"session_id": ""}, "session_id"),
    ("read_messages", {"session_id": bytes_of_a(257)}, "session_id"),
    ("read_messages", {"session_id": "s\x00"}, "session_id"),
    ("read_messages", {"session_id": "s", "limit": 0}, "limit"),
    ("read_messages", {"session_id": "s", "limit": 1001}, "limit"),
    ("read_messages", {"session_id": "s", "limit": True}, "limit"),
    ("read_messages", {"session_id": "s", "limit": 1.5}, "limit"),
    ("read_messages", {"session_id": "s", "limit": 10.0}, "limit"),
    ("read_messages", {"session_id": "s", "limit": "10"}, "limit"),
    ("read_messages", {"session_id": "s", "cursor": 123}, "cursor"),
    ("read_messages", {"session_id": "s", "cursor": None}, "cursor"),
    ("read_messages", {"session_id": "s", "cursor": "garbage"}, "cursor"),
    ("read_messages", {"session_id": "s", "cursor": ""}, "cursor"),
    ("read_messages", {"session_id": "s", "message_id": MID}, "message_id"),
    ("read_messages", {"session_id": "s", "content_offset": 0}, "content_offset"),
    ("read_messages", {"session_id": "s", "before": 1}, "before"),
    ("read_messages", {"session_id": "s", "relation_types_json": "[]"}, "relation_types_json"),
    # content
    ("read_messages", {"view": "content"}, "message_id"),
    ("read_messages", {"view": "content", "message_id": MID.lower()}, "message_id"),
    ("read_messages", {"view": "content", "message_id": MID, "content_offset": -1}, "content_offset"),
    ("read_messages", {"view": "content", "message_id": MID, "content_offset": 16}, "content_offset"),
    ("read_messages", {"view": "content", "message_id": MID, "content_limit": 0}, "content_limit"),
    ("read_messages", {"view": "content", "message_id": MID, "content_limit": 65537}, "content_limit"),
    ("read_messages", {"view": "content", "message_id": MID, "expected_revision": 0}, "expected_revision"),
    ("read_messages", {"view": "content", "message_id": MID, "limit": 10}, "limit"),
    ("read_messages", {"view": "content", "message_id": MID, "cursor": "x"}, "cursor"),
    ("read_messages", {"view": "content", "message_id": MID, "session_id": "s"}, "session_id"),
    ("read_messages", {"view": "content", "message_id": MID, "before": 1}, "before"),
    # context
    ("read_messages", {"view": "context"}, "message_id"),
    ("read_messages", {"view": "context", "message_id": "8" + GOOD_ID[1:]}, "message_id"),
    ("read_messages", {"view": "context", "message_id": MID, "before": 11}, "before"),
    ("read_messages", {"view": "context", "message_id": MID, "before": -1}, "before"),
    ("read_messages", {"view": "context", "message_id": MID, "after": 11}, "after"),
    ("read_messages", {"view": "context", "message_id": MID, "after": True}, "after"),
    ("read_messages", {"view": "context", "message_id": MID, "relation_depth": 3}, "relation_depth"),
    ("read_messages", {"view": "context", "message_id": MID, "relation_depth": -1}, "relation_depth"),
    ("read_messages", {"view": "context", "message_id": MID, "relation_types_json": '["bogus"]'},
     "relation_types_json"),
    ("read_messages", {"view": "context", "message_id": MID, "relation_types_json": '"depends_on"'},
     "relation_types_json"),
    ("read_messages", {"view": "context", "message_id": MID, "relation_types_json": "{}"},
     "relation_types_json"),
    ("read_messages", {"view": "context", "message_id": MID, "relation_types_json": "nope"},
     "relation_types_json"),
    ("read_messages", {"view": "context", "message_id": MID, "relation_types_json": None},
     "relation_types_json"),
    ("read_messages", {"view": "context", "message_id": MID, "relation_types_json": ["depends_on"]},
     "relation_types_json"),
    ("read_messages", {"view": "context", "message_id": MID, "content_limit": 10}, "content_limit"),
    ("read_messages", {"view": "context", "message_id": MID, "limit": 10}, "limit"),
    # sessions
    ("read_messages", {"view": "sessions", "session_id": "s"}, "session_id"),
    ("read_messages", {"view": "sessions", "message_id": MID}, "message_id"),
    ("read_messages", {"view": "sessions", "limit": 0}, "limit"),
    ("read_messages", {"view": "sessions", "limit": 1001}, "limit"),
    ("read_messages", {"view": "sessions", "cursor": "AAAA"}, "cursor"),
    # search_messages
    ("search_messages", {}, "query"),
    ("search_messages", {"query": ""}, "query"),
    ("search_messages", {"query": bytes_of_a(4097)}, "query"),
    ("search_messages", {"query": 5}, "query"),
    ("search_messages", {"query": "\ud83d"}, "query"),
    ("search_messages", {"query": "x", "session_id": ""}, "session_id"),
    ("search_messages", {"query": "x", "session_id": "s\x00"}, "session_id"),
    ("search_messages", {"query": "x", "session_id": bytes_of_a(257)}, "session_id"),
    ("search_messages", {"query": "x", "session_id": None}, "session_id"),
    ("search_messages", {"query": "x", "filters_json": "nope"}, "filters_json"),
    ("search_messages", {"query": "x", "filters_json": "[]"}, "filters_json"),
    ("search_messages", {"query": "x", "filters_json": None}, "filters_json"),
    ("search_messages", {"query": "x", "filters_json": {"kinds": []}}, "filters_json"),
    ("search_messages", {"query": "x", "filters_json": '{"kinds":"semantic"}'}, "kinds"),
    ("search_messages", {"query": "x", "filters_json": '{"kinds":["fact"]}'}, "kinds"),
    ("search_messages", {"query": "x", "filters_json": '{"kinds":null}'}, "kinds"),
    ("search_messages", {"query": "x", "filters_json": '{"tiers":["huge"]}'}, "tiers"),
    ("search_messages", {"query": "x", "filters_json": '{"tags":"a"}'}, "tags"),
    ("search_messages", {"query": "x", "filters_json": '{"tags":[""]}'}, "tags"),
    ("search_messages", {"query": "x", "filters_json": '{"tags":[3]}'}, "tags"),
    ("search_messages", {"query": "x", "filters_json": '{"colours":[]}'}, "filters_json"),
    ("search_messages", {"query": "x", "min_importance": -1}, "min_importance"),
    ("search_messages", {"query": "x", "min_importance": 101}, "min_importance"),
    ("search_messages", {"query": "x", "min_importance": True}, "min_importance"),
    ("search_messages", {"query": "x", "min_importance": 50.5}, "min_importance"),
    ("search_messages", {"query": "x", "context_size": 4}, "context_size"),
    ("search_messages", {"query": "x", "context_size": -1}, "context_size"),
    ("search_messages", {"query": "x", "limit": 0}, "limit"),
    ("search_messages", {"query": "x", "limit": 101}, "limit"),
    ("search_messages", {"query": "x", "limit": 1000}, "limit"),
    ("search_messages", {"query": "x", "view": "history"}, "view"),
    # delete_message
    ("delete_message", {}, "message_id"),
    ("delete_message", {"message_id": MID.lower()}, "message_id"),
    ("delete_message", {"message_id": "9" + GOOD_ID[1:]}, "message_id"),
    ("delete_message", {"message_id": MID, "session_id": ""}, "session_id"),
    ("delete_message", {"message_id": MID, "session_id": "s\x00"}, "session_id"),
    ("delete_message", {"message_id": MID, "session_id": bytes_of_a(257)}, "session_id"),
    ("delete_message", {"message_id": MID, "force": True}, "force"),
    # parameterless tools
    ("rebuild_index", {"force": True}, "force"),
    ("get_system_health", {"verbose": True}, "verbose"),
]


def fill(arguments: dict, message_id: str) -> dict:
    def sub(value):
        if isinstance(value, str):
            return value.replace(MID, message_id).replace(MID.lower(), message_id.lower())
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return value
    return sub(arguments)


def _case_id(case) -> str:
    tool, args, field = case
    return f"{tool}-{field}-{REFUSED.index(case)}"


@pytest.mark.parametrize("case", REFUSED, ids=_case_id)
async def test_a_refused_call_names_its_field_and_changes_nothing(store_path, case):
    tool, arguments, field = case
    async with connect(store_path) as m:
        target = await m.write("the one message", importance=60)
        async with nothing_changes(m):
            message = await m.fail(tool, fill(arguments, target["message_id"]))
        assert field in message
        assert (await m.read(session_id="s"))["history"] == [target]


ACCEPTED = [
    ("write_message", w(session_id=bytes_of_a(256))),
    ("write_message", w(session_id="x")),
    ("write_message", w(content="\x00")),
    ("write_message", w(metadata_json="{}")),
    ("write_message", w(metadata_json=" { } ")),
    ("write_message", meta(tool_call_id=bytes_of_a(256))),
    ("write_message", meta(tool_call_id="")),
    ("write_message", meta(tags=[f"t{i}" for i in range(32)])),
    ("write_message", meta(tags=[bytes_of_a(128)])),
    ("write_message", meta(tags=[])),
    ("write_message", meta(importance=0)),
    ("write_message", meta(importance=100)),
    ("write_message", meta(summary=bytes_of_a(4096))),
    ("write_message", meta(summary="")),
    ("write_message", meta(relations=[rel(message_id=GOOD_ID[:-1] + c)
                                      for c in "0123456789ABCDEFGHJKMNPQRSTVWX"] + [rel(), rel("depends_on")])),
    ("write_message", meta(relations=[rel(message_id="7ZZZZZZZZZZZZZZZZZZZZZZZZZ")])),
    ("write_message", meta(source_message_ids=[GOOD_ID] * 64)),
    ("write_message", meta(source_message_ids=["00000000000000000000000000"])),
    *[("write_message", meta(memory_tier=t)) for t in ("short", "mid", "long", "discard")],
    *[("write_message", meta(memory_kind=k)) for k in (
        "conversation", "episode", "semantic", "procedure", "preference", "summary")],
    *[("write_message", w(role=r)) for r in ("user", "assistant", "system")],
    ("update_message", {"message_id": MID, "metadata_json": "{}"}),
    ("update_message", {"message_id": MID, "content": "y", "expected_revision": 1}),
    ("read_messages", {"session_id": "s", "limit": 1}),
    ("read_messages", {"session_id": "s", "limit": 1000}),
    ("read_messages", {"view": "history", "session_id": bytes_of_a(256)}),
    ("read_messages", {"view": "content", "message_id": MID, "content_limit": 1}),
    ("read_messages", {"view": "content", "message_id": MID, "content_limit": 65536}),
    ("read_messages", {"view": "content", "message_id": MID, "content_offset": 11}),
    ("read_messages", {"view": "context", "message_id": MID, "before": 0, "after": 0, "relation_depth": 0}),
    ("read_messages", {"view": "context", "message_id": MID, "before": 10, "after": 10, "relation_depth": 2}),
    ("read_messages", {"view": "context", "message_id": MID, "relation_types_json": "[]"}),
    ("read_messages", {"view": "context", "message_id": MID,
                       "relation_types_json": '["depends_on","derived_from","supersedes","related_to"]'}),
    ("read_messages", {"view": "sessions"}),
    ("read_messages", {"view": "sessions", "limit": 1000}),
    ("search_messages", {"query": bytes_of_a(4096)}),
    ("search_messages", {"query": "x", "session_id": bytes_of_a(256)}),
    ("search_messages", {"query": "x", "filters_json": "{}"}),
    ("search_messages", {"query": "x", "filters_json": '{"kinds":[],"tiers":[],"tags":[]}'}),
    ("search_messages", {"query": "x", "min_importance": 0, "context_size": 0, "limit": 1}),
    ("search_messages", {"query": "x", "min_importance": 100, "context_size": 3, "limit": 100}),
    ("delete_message", {"message_id": GOOD_ID, "session_id": bytes_of_a(256)}),
    ("rebuild_index", {}),
    ("get_system_health", {}),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: f"{c[0]}-{ACCEPTED.index(c)}")
async def test_a_value_just_inside_its_limit_is_accepted(store_path, case):
    tool, arguments = case
    async with connect(store_path) as m:
        target = await m.write("the message", importance=60)
        result = await m.call(tool, fill(arguments, target["message_id"]))
        assert not result.is_error, result.content[0].text


async def test_content_of_exactly_one_mebibyte_of_multibyte_text_is_stored_whole(mcp):
    content = bytes_of_a(1 << 20)
    assert len(content.encode()) == 1 << 20
    m = await mcp.write(content)
    assert m["content"] == content
    rng = (await mcp.read(view="content", message_id=m["message_id"], content_limit=65536))["content_range"]
    assert rng["total_bytes"] == 1 << 20


async def test_a_lone_surrogate_in_any_string_stores_nothing(mcp):
    async with nothing_changes(mcp):
        for args in (w(content="a\udc00b"), w(session_id="\ud800"),
                     raw_meta(json.dumps({"tags": ["\ud800"]}, ensure_ascii=True))):
            await mcp.fail("write_message", args)


async def test_a_number_of_5000_digits_in_a_json_text_is_refused_for_its_length(mcp):
    for field, text in (("metadata_json", '{"importance": ' + "9" * 5000 + "}"),
                        ("metadata_json", '{"importance": -' + "9" * 5000 + "}")):
        message = await mcp.fail("write_message", w(**{field: text}))
        assert message == f"{field}: numbers must have at most 4300 digits"
    message = await mcp.fail("search_messages", {"query": "x", "filters_json": '{"after": ' + "1" * 5000 + "}"})
    assert message == "filters_json: numbers must have at most 4300 digits"
    assert (await mcp.fail("write_message", w(metadata_json="[" * 100_000))).startswith("metadata_json: ")
