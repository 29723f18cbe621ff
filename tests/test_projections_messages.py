"""Read model: a message's state, stored as its document number alone while
its ``MessageWritten`` event says everything, as the whole state once updated."""

from __future__ import annotations

import cbor2
from strategies import write

from eventstore.ids import to_bytes
from projections import messages


def record(svc, mid: str):
    with svc.store.read() as tx:
        return cbor2.loads(tx.txn.get(to_bytes(mid), db=tx.db(messages.DB)))


def state(svc, mid: str) -> messages.State:
    with svc.store.read() as tx:
        return messages.get(tx, mid)


def test_a_written_message_is_stored_as_its_document_number(svc):
    write(svc, "first")
    mid = write(svc, "second message", session="t", role="assistant", tags=("x",), importance=7)
    assert record(svc, mid) == 2
    got = state(svc, mid)
    assert (got.docno, got.content_seq, got.session_id, got.role, got.metadata.tags,
            got.metadata.importance, got.revision, got.dead_counted) == (2, 2, "t", "assistant", ("x",), 7, 1, False)
    assert got.content_bytes == len("second message")
    with svc.store.read() as tx:
        assert messages.content(tx, got) == "second message"
        assert messages.exists(tx, mid) and messages.timestamp(tx, mid) == got.timestamp


def test_an_updated_message_stores_its_whole_state_and_reads_the_same(svc):
    mid = write(svc, "old text")
    svc.update_message(mid, "new text", {"tags": ("t",)}, None)
    raw = record(svc, mid)
    assert isinstance(raw, list) and raw[0] == 1 and raw[1] == 2     # docno 1, content in event 2
    got = state(svc, mid)
    assert (got.revision, got.metadata.tags, got.dead_counted, got.content_bytes) == (2, ("t",), True, 8)
    with svc.store.read() as tx:
        assert messages.content(tx, got) == "new text"


def test_a_metadata_only_update_reads_the_content_from_the_written_event(svc):
    mid = write(svc, "kept text")
    svc.update_message(mid, None, {"importance": 9}, None)
    got = state(svc, mid)
    assert got.content_seq == got.docno == 1 and not got.plain
    with svc.store.read() as tx:
        assert messages.content(tx, got) == "kept text"


def test_compaction_makes_every_record_plain_again(svc):
    a = write(svc, "a text")
    b = write(svc, "b text")
    svc.update_message(a, "a edited", {}, None)
    svc.delete_message(b, None)
    before = state(svc, a)
    svc.rebuild()
    after = state(svc, a)
    assert type(record(svc, a)) is int and after.plain
    assert (after.revision, after.updated_at, after.metadata) == (before.revision, before.updated_at, before.metadata)
    with svc.store.read() as tx:
        assert messages.content(tx, after) == "a edited" and not messages.exists(tx, b)
