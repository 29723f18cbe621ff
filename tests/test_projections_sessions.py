"""Read model: sessions with live messages, their counts, order and summary."""

from __future__ import annotations

import pytest
from helpers import Clock
from strategies import open_service, write

from eventstore import ids
from eventstore.events import KINDS, Message, MessageWritten, Metadata
from projections import sessions


@pytest.fixture
def clock():
    return Clock(now=1_000_000, step=1000)


@pytest.fixture
def svc(store_path, clock):
    service = open_service(store_path, clock)
    try:
        yield service
    finally:
        service.close()


def listing(svc) -> list[dict]:
    return svc.sessions(1000, None)["sessions"]


def entry(svc, session_id) -> dict:
    return next(s for s in listing(svc) if s["session_id"] == session_id)


def test_a_session_counts_its_live_messages_by_kind_with_every_kind_present(svc):
    write(svc, "a", memory_kind="semantic")
    write(svc, "b", memory_kind="semantic")
    write(svc, "c")
    got = entry(svc, "s")
    assert got["message_count"] == 3
    assert got["kind_counts"] == {**{k: 0 for k in KINDS}, "semantic": 2, "conversation": 1}
    assert list(got["kind_counts"]) == list(KINDS)


def test_changing_a_message_kind_moves_it_between_kind_counts(svc):
    mid = write(svc, "a")
    svc.update_message(mid, None, {"memory_kind": "preference"}, None)
    got = entry(svc, "s")
    assert got["message_count"] == 1
    assert got["kind_counts"]["preference"] == 1 and got["kind_counts"]["conversation"] == 0


def test_sessions_are_ordered_by_start_and_ties_by_session_id(svc, clock):
    write(svc, "first", session="zeta")
    write(svc, "second", session="alpha")
    clock.step = 0                                   # same millisecond: the session id breaks the tie
    write(svc, "third", session="mu")
    write(svc, "fourth", session="beta")
    assert [s["session_id"] for s in listing(svc)] == ["zeta", "alpha", "beta", "mu"]


def test_started_at_and_last_message_at_follow_the_first_and_last_live_messages(svc):
    got = [write(svc, f"m{i}") for i in range(4)]
    stamps = [m["timestamp"] for m in svc.history("s", 10, None)["history"]]
    assert (entry(svc, "s")["started_at"], entry(svc, "s")["last_message_at"]) == (stamps[0], stamps[3])
    svc.delete_message(got[0], None)
    svc.delete_message(got[3], None)
    assert (entry(svc, "s")["started_at"], entry(svc, "s")["last_message_at"]) == (stamps[1], stamps[2])
    svc.delete_message(got[2], None)
    assert (entry(svc, "s")["started_at"], entry(svc, "s")["last_message_at"]) == (stamps[1], stamps[1])


def test_deleting_a_session_first_message_moves_it_in_the_order(svc):
    first = write(svc, "early", session="a")
    write(svc, "b starts", session="b")
    write(svc, "a again", session="a")
    assert [s["session_id"] for s in listing(svc)] == ["a", "b"]
    svc.delete_message(first, None)
    assert [s["session_id"] for s in listing(svc)] == ["b", "a"]


def test_a_session_whose_messages_are_all_deleted_disappears_and_can_come_back(svc):
    mid = write(svc, "only", session="gone")
    write(svc, "stays", session="kept")
    svc.delete_message(mid, None)
    assert [s["session_id"] for s in listing(svc)] == ["kept"]
    with svc.store.read() as tx:
        assert sessions.get(tx, "gone") is None
        assert sessions.count(tx) == 1
    write(svc, "back", session="gone")
    assert entry(svc, "gone")["message_count"] == 1


def test_started_at_is_the_first_message_by_creation_even_when_the_clock_went_back(svc, clock):
    write(svc, "created first")
    clock.now -= 500_000
    write(svc, "created second with an earlier clock")
    stamps = [m["timestamp"] for m in svc.history("s", 10, None)["history"]]
    got = entry(svc, "s")
    assert got["started_at"] == stamps[0] and got["last_message_at"] == stamps[1]
    assert stamps[1] < stamps[0]


def test_the_representative_summary_is_the_latest_live_message_summary_else_its_content(svc):
    first = write(svc, "first content", summary="first summary")
    last = write(svc, "last content")
    assert entry(svc, "s")["representative_summary"] == "last content"
    svc.update_message(last, None, {"summary": "last summary"}, None)
    assert entry(svc, "s")["representative_summary"] == "last summary"
    svc.delete_message(last, None)
    assert entry(svc, "s")["representative_summary"] == "first summary"
    svc.update_message(first, None, {"summary": None}, None)
    assert entry(svc, "s")["representative_summary"] == "first content"


def test_updating_an_older_message_does_not_make_it_representative(svc):
    older = write(svc, "older")
    write(svc, "newer")
    svc.update_message(older, "older, edited", {"summary": "edited summary"}, None)
    assert entry(svc, "s")["representative_summary"] == "newer"


def test_a_long_representative_summary_is_never_shortened(svc):
    text = "word " * 5000
    write(svc, text)
    assert entry(svc, "s")["representative_summary"] == text


def test_an_entry_read_back_from_the_bytes_this_process_wrote_is_a_copy_of_its_own():
    entry = sessions.SessionEntry(3, [1, 0, 2, 0, 0, 0], 1_000, 2_000)
    raw = entry.encode()
    first = sessions.SessionEntry.decode(raw)
    assert first == entry
    first.kind_counts[0] += 5                   # a write transaction counts in place
    entry.kind_counts[1] += 7
    assert sessions.SessionEntry.decode(raw) == (3, [1, 0, 2, 0, 0, 0], 1_000, 2_000)
    sessions._WRITTEN.clear()                   # decoded from the bytes: the same entry
    assert sessions.SessionEntry.decode(raw) == (3, [1, 0, 2, 0, 0, 0], 1_000, 2_000)


def test_a_batch_around_a_session_moves_both_its_ends_and_its_place_in_the_order(svc):
    """A batch whose messages sort before the session's first and after its last
    (an import of ids given elsewhere) moves each end to the message that holds it,
    in a transaction that already counted the session (its entry held, not reread)."""
    def mid(ms: int) -> str:
        return ids.to_str((ms << 80).to_bytes(16, "big"))

    def msg(ms: int, ts: int, kind: str = "conversation") -> MessageWritten:
        return MessageWritten(Message(mid(ms), "s", "user", "x", ts, ts, 1, Metadata(memory_kind=kind)))

    def command(w):
        w.append([msg(500, 5_000), msg(600, 6_000)])
        w.append([msg(900, 9_000, "episode"), msg(100, 1_000), msg(300, 3_000), msg(700, 7_000)])
    write(svc, "other session", session="t")
    svc.store.execute(command)
    got = entry(svc, "s")
    assert (got["message_count"], got["started_at"], got["last_message_at"]) == (6, 1_000, 9_000)
    assert got["kind_counts"]["episode"] == 1 and got["kind_counts"]["conversation"] == 5
    assert [s["session_id"] for s in listing(svc)] == ["s", "t"]
    with svc.store.read() as tx:
        assert [sid for _, sid in sessions.ordered(tx, None)] == ["s", "t"]
