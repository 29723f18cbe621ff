"""The history and sessions views of read_messages, and their cursors."""

from __future__ import annotations

import base64
import contextlib

import pytest
from helpers import KINDS, SESSION_KEYS, Clock, assert_message, connect, nothing_changes

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def clocked(store_path: str, clock: Clock):
    async with connect(store_path, clock=clock) as m:
        yield m


async def pages(m, **arguments) -> list[dict]:
    """Every page of a paged view, following nextCursor."""
    out, cursor = [], None
    while True:
        body = await m.read(**arguments, **({"cursor": cursor} if cursor else {}))
        out.append(body)
        cursor = body.get("nextCursor")
        if cursor is None:
            return out


# --------------------------------------------------------------------- history
async def test_history_of_a_session_without_live_messages_is_empty_not_an_error(mcp):
    assert await mcp.read(session_id="nobody") == {"status": "OK", "history": []}
    m = await mcp.write(session="gone")
    await mcp.ok("delete_message", message_id=m["message_id"])
    assert await mcp.read(session_id="gone") == {"status": "OK", "history": []}


async def test_history_lists_live_messages_of_one_session_in_creation_order(mcp):
    written = [await mcp.write(f"m{i}", session="a" if i % 2 else "b") for i in range(6)]
    await mcp.ok("delete_message", message_id=written[3]["message_id"])
    body = await mcp.read(session_id="a")
    assert set(body) == {"status", "history"}
    assert body["history"] == [written[1], written[5]]
    for m in body["history"]:
        assert_message(m)
    assert await mcp.read(view="history", session_id="b") == {
        "status": "OK", "history": [written[0], written[2], written[4]]}


async def test_history_pages_carry_a_cursor_only_while_more_remain(mcp):
    ids = [(await mcp.write(str(i)))["message_id"] for i in range(6)]
    got = await pages(mcp, session_id="s", limit=3)
    assert [len(p["history"]) for p in got] == [3, 3]
    assert "nextCursor" in got[0] and "nextCursor" not in got[1]
    assert [m["message_id"] for p in got for m in p["history"]] == ids
    got = await pages(mcp, session_id="s", limit=4)
    assert [len(p["history"]) for p in got] == [4, 2]
    assert [len(p["history"]) for p in await pages(mcp, session_id="s", limit=1)] == [1] * 6
    assert "nextCursor" not in await mcp.read(session_id="s", limit=1000)


async def test_paging_while_writes_happen_never_repeats_or_skips_a_message(mcp):
    original = [(await mcp.write(f"old {i}"))["message_id"] for i in range(10)]
    seen, cursor, extra = [], None, 0
    while True:
        body = await mcp.read(session_id="s", limit=3, **({"cursor": cursor} if cursor else {}))
        seen += [m["message_id"] for m in body["history"]]
        for session in ("s", "other"):
            await mcp.write(f"new {extra}", session=session)
        extra += 1
        cursor = body.get("nextCursor")
        if cursor is None or extra > 20:
            break
    assert seen[:10] == original
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen)


async def test_a_cursor_still_works_after_the_message_it_points_at_is_deleted(mcp):
    ids = [(await mcp.write(str(i)))["message_id"] for i in range(5)]
    first = await mcp.read(session_id="s", limit=2)
    await mcp.ok("delete_message", message_id=ids[1])
    rest = await mcp.read(session_id="s", limit=10, cursor=first["nextCursor"])
    assert [m["message_id"] for m in rest["history"]] == ids[2:]


async def test_a_cursor_survives_rebuild_index(mcp):
    ids = [(await mcp.write(str(i)))["message_id"] for i in range(4)]
    first = await mcp.read(session_id="s", limit=2)
    await mcp.ok("rebuild_index")
    rest = await mcp.read(session_id="s", cursor=first["nextCursor"])
    assert [m["message_id"] for m in rest["history"]] == ids[2:]


def _tamper(cursor: str) -> str:
    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[len(raw) // 3] ^= 0x01
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


async def test_forged_foreign_and_malformed_cursors_are_validation_errors(mcp, tmp_path):
    for i in range(3):
        await mcp.write(str(i), session="s")
        await mcp.write(str(i), session="t")
    history = (await mcp.read(session_id="s", limit=1))["nextCursor"]
    sessions = (await mcp.read(view="sessions", limit=1))["nextCursor"]
    async with connect(str(tmp_path / "elsewhere")) as other:
        for i in range(3):
            await other.write(str(i), session="s")
        foreign = (await other.read(session_id="s", limit=1))["nextCursor"]
    async with nothing_changes(mcp):
        for bad in (_tamper(history), history[:-2], history + "A", history + "!", "!" + history,
                    history[:5] + "." + history[5:], history + "=", foreign, "!!!!", "é" * 8,
                    "A" * 5000, base64.urlsafe_b64encode(b"[1,\"history\",\"s\",\"x\"]").decode()):
            assert "cursor" in await mcp.fail("read_messages", {"session_id": "s", "cursor": bad})
        assert "cursor" in await mcp.fail("read_messages", {"session_id": "t", "cursor": history})
        assert "cursor" in await mcp.fail("read_messages", {"session_id": "s", "cursor": sessions})
        assert "cursor" in await mcp.fail("read_messages", {"view": "sessions", "cursor": history})
        assert "cursor" in await mcp.fail("read_messages", {"view": "sessions", "cursor": _tamper(sessions)})


# -------------------------------------------------------------------- sessions
async def test_sessions_are_ordered_by_start_time_then_id_with_every_field(store_path):
    clock = Clock()
    async with clocked(store_path, clock) as m:
        for sid in ("b", "a"):
            await m.write(f"{sid} first", session=sid)
        clock.now += 5
        await m.write("c first", session="c", memory_kind="semantic")
        clock.now += 5
        await m.write("a second", session="a", memory_kind="preference", summary="a's summary")
        body = await m.read(view="sessions")
    assert set(body) == {"status", "sessions"}
    entries = body["sessions"]
    assert [e["session_id"] for e in entries] == ["a", "b", "c"]
    for e in entries:
        assert set(e) == SESSION_KEYS
        assert list(e["kind_counts"]) == list(KINDS)
    t0 = 1_720_843_200_000
    assert entries[0] == {"session_id": "a", "message_count": 2,
                          "kind_counts": {"conversation": 1, "episode": 0, "semantic": 0, "procedure": 0,
                                          "preference": 1, "summary": 0},
                          "representative_summary": "a's summary", "started_at": t0,
                          "last_message_at": t0 + 10}
    assert entries[1]["representative_summary"] == "b first"
    assert (entries[1]["started_at"], entries[1]["last_message_at"]) == (t0, t0)
    assert entries[2]["kind_counts"]["semantic"] == 1 and entries[2]["started_at"] == t0 + 5


async def test_the_representative_summary_follows_the_latest_live_message_only(store_path):
    clock = Clock()
    async with clocked(store_path, clock) as m:
        first = await m.write("first content", summary="first summary")
        clock.now += 1
        second = await m.write("second content " + "long " * 500)
        summary = lambda: m.read(view="sessions")
        assert (await summary())["sessions"][0]["representative_summary"] == second["content"]
        clock.now += 1
        await m.update(first["message_id"], summary="edited")   # an update does not make it latest
        assert (await summary())["sessions"][0]["representative_summary"] == second["content"]
        await m.update(second["message_id"], summary="now summarized")
        assert (await summary())["sessions"][0]["representative_summary"] == "now summarized"
        await m.update(second["message_id"], summary="")
        assert (await summary())["sessions"][0]["representative_summary"] == second["content"]
        await m.ok("delete_message", message_id=second["message_id"])
        entry = (await summary())["sessions"][0]
        assert entry["representative_summary"] == "edited"
        assert entry["message_count"] == 1
        assert entry["last_message_at"] == entry["started_at"] == first["timestamp"]


async def test_deleting_a_session_s_first_message_moves_its_start_and_place(store_path):
    clock = Clock()
    async with clocked(store_path, clock) as m:
        early = await m.write("early", session="z")
        clock.now += 10
        await m.write("a", session="a")
        clock.now += 10
        await m.write("late", session="z")
        order = lambda b: [e["session_id"] for e in b["sessions"]]
        assert order(await m.read(view="sessions")) == ["z", "a"]
        await m.ok("delete_message", message_id=early["message_id"])
        body = await m.read(view="sessions")
        assert order(body) == ["a", "z"]
        assert body["sessions"][1]["started_at"] == clock.now


async def test_a_session_whose_messages_are_all_deleted_leaves_the_list(mcp):
    gone = await mcp.write(session="gone")
    await mcp.write(session="kept")
    await mcp.ok("delete_message", message_id=gone["message_id"])
    assert [e["session_id"] for e in (await mcp.read(view="sessions"))["sessions"]] == ["kept"]
    assert (await mcp.health())["session_count"] == 1


async def test_sessions_page_with_cursors_and_list_each_session_once(store_path):
    clock = Clock()
    async with clocked(store_path, clock) as m:
        names = [f"session-{i}" for i in range(7)]
        for name in names:
            clock.now += 1
            await m.write(name, session=name)
        got = await pages(m, view="sessions", limit=3)
        assert [len(p["sessions"]) for p in got] == [3, 3, 1]
        assert [e["session_id"] for p in got for e in p["sessions"]] == names
        assert "nextCursor" not in got[-1]
        assert await m.read(view="sessions", limit=7) == {"status": "OK", "sessions": got[0]["sessions"]
                                                            + got[1]["sessions"] + got[2]["sessions"]}


async def test_the_sessions_view_of_an_empty_store_is_an_empty_list(mcp):
    assert await mcp.read(view="sessions") == {"status": "OK", "sessions": []}
