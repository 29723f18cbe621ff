"""Read model: whole-store statistics kept incrementally, and the message states."""

from __future__ import annotations

from strategies import write

from eventstore.codec import dumps, metadata_to_list
from eventstore.events import Metadata
from projections import messages, stats


def current(svc) -> dict[str, int]:
    with svc.store.read() as tx:
        return stats.read(tx)


def event_sizes(svc) -> list[int]:
    with svc.store.read() as tx:
        return [size for _, _, size in svc.store.iter_events(tx)]


def meta_bytes(**fields) -> int:
    return len(dumps(metadata_to_list(Metadata(**fields))))


def test_an_empty_store_has_all_statistics_at_zero(svc):
    assert current(svc) == {k: 0 for k in stats.KEYS}


def test_writes_count_active_messages_and_their_body_and_metadata_bytes(svc):
    write(svc, "héllo")
    write(svc, "world", tags=("x",))
    st = current(svc)
    assert st["active"] == 2 and st["deleted"] == 0 and st["updates"] == 0
    assert st["body_bytes"] == len("héllo".encode()) + 5
    assert st["metadata_bytes"] == meta_bytes() + meta_bytes(tags=("x",))
    assert st["dead_bytes"] == 0


def test_an_update_makes_the_whole_earlier_history_of_the_message_dead(svc):
    mid = write(svc, "original")
    svc.update_message(mid, "changed content", {}, None)
    w, u = event_sizes(svc)
    st = current(svc)
    assert st["updates"] == 1 and st["dead_bytes"] == w + u
    assert st["body_bytes"] == len("changed content")
    svc.update_message(mid, None, {"importance": 7}, None)
    u2 = event_sizes(svc)[-1]
    st = current(svc)
    assert st["updates"] == 2 and st["dead_bytes"] == w + u + u2
    assert st["metadata_bytes"] == meta_bytes(importance=7)


def test_a_delete_makes_the_message_events_and_itself_dead(svc):
    keep = write(svc, "kept")
    gone = write(svc, "deleted")
    svc.update_message(gone, "deleted, edited", {}, None)
    svc.delete_message(gone, None)
    sizes = event_sizes(svc)
    st = current(svc)
    assert st["active"] == 1 and st["deleted"] == 1
    assert st["dead_bytes"] == sum(sizes[1:])
    assert st["body_bytes"] == len("kept") and st["metadata_bytes"] == meta_bytes()
    assert keep


def test_health_reports_the_statistics(svc):
    mid = write(svc, "one")
    svc.update_message(mid, "two", {}, None)
    svc.delete_message(write(svc, "three"), None)
    report, st = svc.health(), current(svc)
    assert report["active_messages"] == st["active"] == 1
    assert report["deleted_messages"] == st["deleted"] == 1
    assert report["update_records"] == st["updates"] == 1
    assert report["dead_bytes"] == st["dead_bytes"]
    assert report["memory_estimate"]["body_bytes"] == st["body_bytes"] == 3


def test_a_message_state_points_at_the_event_that_carries_its_content(svc):
    mid = write(svc, "first words", summary="s1")
    with svc.store.read() as tx:
        state = messages.get(tx, mid)
        assert (state.docno, state.content_seq, state.revision) == (1, 1, 1)
    svc.update_message(mid, None, {"summary": "s2"}, None)        # metadata only
    with svc.store.read() as tx:
        state = messages.get(tx, mid)
        assert (state.docno, state.content_seq, state.revision) == (1, 1, 2)
        assert messages.content(tx, state) == "first words"
    svc.update_message(mid, "second words", {}, None)
    with svc.store.read() as tx:
        state = messages.get(tx, mid)
        assert (state.docno, state.content_seq, state.revision) == (1, 3, 3)
        loaded = messages.load(tx, state)
        assert loaded.content == "second words" and loaded.metadata.summary == "s2"
        assert messages.timestamp(tx, mid) == loaded.timestamp


def test_a_deleted_message_has_no_state(svc):
    mid = write(svc, "bye")
    svc.delete_message(mid, None)
    with svc.store.read() as tx:
        assert messages.get(tx, mid) is None


def test_the_stored_counter_maps_are_canonical_cbor(svc):
    """Statistics and I/O counters are written without the encoder sorting
    their keys (``codec.dumps_counts``): the bytes stored must still be the
    canonical encoding of the values, as replay and compaction produce."""
    import cbor2

    write(svc, "héllo", tags=("x",))
    write(svc, "world")
    with svc.store.read() as tx:
        raw_stats = bytes(tx.txn.get(b"s", db=tx.db("stats")))
        raw_io = bytes(tx.txn.get(b"io", db=tx.db("meta")))
    for raw in (raw_stats, raw_io):
        assert raw == dumps(cbor2.loads(raw))
