"""The codec: canonical CBOR events that round-trip, and bad bytes are CORRUPT_STORE."""

from __future__ import annotations

import zlib

import cbor2
import pytest

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata

A = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
B = "01ARZ3NDEKTSV4RRFFQ69G5FAW"
RICH = Metadata(tags=("project", "決定"), memory_tier="long", memory_kind="semantic",
                importance=0, tool_call_id="call-1", summary="要約 summary",
                relations=(("derived_from", B), ("supersedes", A)), source_message_ids=(B,))

EVENTS = [
    MessageWritten(Message(A, "conversation-1", "user", "Remember this", 1720843200000, 1720843200000)),
    MessageWritten(Message(A, "s" * 256, "system", "NUL \x00 inside and 日本語 and 😀", 0, 5, 7, RICH)),
    MessageUpdated(A, 2, 1720843200001, "new content", Metadata()),
    MessageUpdated(A, 3, 1720843200002, None, RICH),
    MessageDeleted(B),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_the_codec(event):
    assert codec.decode_event(codec.encode_event(event)) == event


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_encoding_is_canonical_so_equal_events_give_equal_bytes(event):
    again = codec.decode_event(codec.encode_event(event))
    assert codec.encode_event(again) == codec.encode_event(event)
    body = codec.encode_event(event)[4:]
    assert body == cbor2.dumps(cbor2.loads(body), canonical=True)


def test_sequence_keys_are_eight_big_endian_bytes_that_sort_numerically():
    keys = [codec.seq_key(n) for n in (1, 255, 256, 2**40)]
    assert all(len(k) == 8 for k in keys)
    assert keys == sorted(keys)
    assert [codec.seq_of(k) for k in keys] == [1, 255, 256, 2**40]


def test_encoding_something_that_is_not_an_event_is_a_type_error():
    with pytest.raises(TypeError):
        codec.encode_event(Metadata())


def sealed(body: bytes) -> bytes:
    """Bytes with a correct checksum, so the shape checks behind it are reached."""
    return zlib.crc32(body).to_bytes(4, "big") + body


GOOD = codec.encode_event(EVENTS[0])
BAD = {
    "garbage": b"\xff\xfe\xfd not cbor",
    "empty": b"",
    "truncated": GOOD[: len(GOOD) // 2],
    "not a list": sealed(cbor2.dumps({"type": "MessageWritten"})),
    "unknown type tag": cbor2.dumps(["MessageExploded", 1, []]),
    "unknown schema version": sealed(cbor2.dumps(["MessageDeleted", 99, [bytes(16)]])),
    "payload of the wrong shape": cbor2.dumps(["MessageWritten", 1, [1, 2]]),
    "id of the wrong length": sealed(cbor2.dumps(["MessageDeleted", 1, [b"\x01" * 15]])),
    "empty delete payload": cbor2.dumps(["MessageDeleted", 1, []]),
    "one changed byte": GOOD[:-3] + bytes([GOOD[-3] ^ 0x20]) + GOOD[-2:],
    "a tag that is bytes": sealed(cbor2.dumps(["MessageWritten", 1, [bytes(16), "s", "user", "c", 1, 1, 1,
                                                                   [[b"tag"], "short", "conversation", 50,
                                                                    None, None, [], []]]])),
    "update without metadata": sealed(cbor2.dumps(["MessageUpdated", 1, [bytes(16), 2, 3, None]])),
}


@pytest.mark.parametrize("raw", BAD.values(), ids=BAD.keys())
def test_undecodable_bytes_are_a_corrupt_store_error(raw):
    with pytest.raises(CorruptStoreError) as info:
        codec.decode_event(raw)
    assert info.value.code == "CORRUPT_STORE"
