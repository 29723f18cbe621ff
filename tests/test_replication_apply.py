"""The apply side of replication without a server: stream records into a real store,
exactly once, numbered as the stream numbers them, and the names on the stream."""

from __future__ import annotations

import pytest

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from eventstore.store import EventStore
from projections.registry import Projector
from server.maintenance import dump_projections
from server.replication import layout
from server.replication.apply import Position, apply_records, read_position
from server.replication.layout import Control, Record


def record(seq: int, event, kind: str | None = None) -> Record:
    raw = b"" if event is None else codec.encode_event(event)
    return Record(seq=seq, subject="convmem.T.g1.m.x", data=raw, kind=kind, msg_id=layout.event_id(seq, raw),
                  timestamp=0.0, pending=0)


def history(n: int) -> list:
    msg = Message("01J" + "0" * 22 + "1", "s", "user", "first text", 1_720_000_000_000, 1_720_000_000_000)
    events = [MessageWritten(msg)]
    for rev in range(2, n + 1):
        events.append(MessageUpdated(msg.message_id, rev, 1_720_000_000_000 + rev, f"text {rev}", Metadata()))
    return events


@pytest.fixture
def store(tmp_path):
    with EventStore(str(tmp_path / "s"), Projector()) as s:
        yield s


def test_records_are_applied_with_the_stream_position_in_the_same_transaction(store, tmp_path):
    events = history(5)
    out = apply_records(store, Position(1, 0), False, [record(i + 1, e) for i, e in enumerate(events)])
    assert out.position == Position(1, 5) and not out.sealed
    assert out.ids == {layout.event_id(i + 1, codec.encode_event(e)) for i, e in enumerate(events)}
    with store.read() as tx:
        assert read_position(tx) == Position(1, 5)
        assert store.last_sequence(tx) == 5 and store.watermark(tx) == 5
    # the same events one transaction each give the same read models, byte for byte
    with EventStore(str(tmp_path / "one-by-one"), Projector()) as other:
        position = Position(1, 0)
        for i, e in enumerate(events):
            position = apply_records(other, position, False, [record(i + 1, e)]).position
        assert dump_projections(other) == dump_projections(store)


def test_what_another_process_of_the_store_applied_is_skipped_not_taken_for_a_fork(store):
    """Two processes applying one stream into one store (a node's server and an import):
    each starts from the position stored in the store, whatever its own last was."""
    events = history(5)
    records = [record(i + 1, e) for i, e in enumerate(events)]
    apply_records(store, Position(1, 0), False, records[:3])                 # "the other process"
    out = apply_records(store, Position(1, 1), False, records[1:])          # this one, from its own last
    assert out.position == Position(1, 5) and out.ids == {r.msg_id for r in records[3:]}
    again = apply_records(store, Position(1, 2), False, records[1:4])       # all there already
    assert again.position == Position(1, 5) and not again.ids
    with store.read() as tx:
        assert read_position(tx) == Position(1, 5) and store.last_sequence(tx) == 5
    with pytest.raises(CorruptStoreError, match="not consecutive"):         # a gap is still a gap
        apply_records(store, Position(1, 5), False, [record(7, history(1)[0])])


def mixed(n: int) -> list:
    """``n`` messages written, then updates and deletes reaching some of them, interleaved
    with more writes (the term index's bulk work then builds records it held)."""
    msgs = [Message(f"01J{i:023d}", f"s{i % 7}", "user", f"message {i} about topic{i % 13} and more words",
                    1_720_000_000_000 + i, 1_720_000_000_000 + i) for i in range(n)]
    events: list = [MessageWritten(m) for m in msgs[: n // 2]]
    for i, m in enumerate(msgs[n // 2:]):
        events.append(MessageWritten(m))
        old = msgs[i]
        if i % 5 == 0:
            events.append(MessageUpdated(old.message_id, 2, old.updated_at + 1, f"new text {i}", Metadata()))
        if i % 7 == 0:
            events.append(MessageDeleted(old.message_id))
    return events


def test_large_bulk_batches_give_the_read_models_of_small_transactions(store, tmp_path):
    """A catch-up applies up to APPLY_BATCH events in one bulk transaction (the term index
    holds its work and hands written messages to its second process, 512 at a time);
    transactions of every size give the same bytes."""
    events = mixed(1400)
    records = [record(i + 1, e) for i, e in enumerate(events)]
    assert apply_records(store, Position(1, 0), False, records).position.sequence == len(events)
    with EventStore(str(tmp_path / "mixed"), Projector()) as other:
        position, start = Position(1, 0), 0
        for size in [1, 2, 1, 3, 600, 1, 1, 260, 5] * 3:
            position = apply_records(other, position, False, records[start:start + size]).position
            start += size
        position = apply_records(other, position, False, records[start:]).position
        assert position.sequence == len(events)
        assert dump_projections(other) == dump_projections(store)


def test_records_out_of_order_or_after_a_seal_are_refused_and_change_nothing(store):
    events = history(3)
    with pytest.raises(CorruptStoreError, match="consecutive"):
        apply_records(store, Position(1, 0), False, [record(1, events[0]), record(3, events[1])])
    with store.read() as tx:
        assert read_position(tx) is None and store.last_sequence(tx) == 0
    out = apply_records(store, Position(1, 0), False, [record(1, events[0]), record(2, None, layout.SEAL)])
    assert out.sealed and out.position == Position(1, 2)
    with pytest.raises(CorruptStoreError, match="after its seal"):
        apply_records(store, out.position, True, [record(3, events[1])])


def test_a_store_written_outside_replication_is_refused(store):
    apply_records(store, Position(1, 0), False, [record(1, history(1)[0])])
    store.execute(lambda w: w.append([MessageDeleted(history(1)[0].message.message_id)]))   # behind the stream's back
    with pytest.raises(CorruptStoreError, match="written outside replication"):
        apply_records(store, Position(1, 1), False, [record(2, history(2)[1])])


def test_local_numbers_follow_the_generation_offset(store):
    store.maintain(lambda w: store.set_sequence_floor(w, 40), "test")
    out = apply_records(store, Position(2, 0, 40), False, [record(1, history(1)[0])])
    assert out.position == Position(2, 1, 40)
    with store.read() as tx:
        assert store.last_sequence(tx) == 41
        assert read_position(tx) == Position(2, 1, 40)


def test_event_ids_name_the_position_and_the_bytes():
    raw = codec.encode_event(history(1)[0])
    assert layout.event_id(7, raw) == layout.event_id(7, bytes(raw))
    assert layout.event_id(7, raw) != layout.event_id(8, raw)
    assert layout.event_id(7, raw) != layout.event_id(7, raw + b"x")


def test_names_on_the_stream():
    assert layout.stream("CONVMEM", 3) == "CONVMEM-g3"
    assert layout.event_subject("CONVMEM", 3, "01ABC") == "convmem.CONVMEM.g3.m.01ABC"
    assert layout.seal_subject("CONVMEM", 3) == "convmem.CONVMEM.g3.seal"
    assert Control.decode(Control(4, 10, 90).encode()) == Control(4, 10, 90)
    assert Control.decode(b'{"generation": 2, "initial": 5}') == Control(2, 5, 0)
    with pytest.raises(ValueError, match="control record"):
        Control.decode(b"[1]")
