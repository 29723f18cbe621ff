"""The codec: canonical CBOR events that round-trip, and bad bytes are CORRUPT_STORE."""

from __future__ import annotations

import zlib
from dataclasses import replace

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import canonical_ids, metadata, metadata_fields
from strategies import v1_event_bytes as v1_bytes

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import ROLES, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from eventstore.ids import to_str

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
    "a role that is not one": sealed(cbor2.dumps(["MessageWritten", 1, [bytes(16), "s", "robot", "c", 1, 1, 1,
                                                                       [[], "short", "conversation", 50,
                                                                        None, None, [], []]]])),
}


@pytest.mark.parametrize("raw", BAD.values(), ids=BAD.keys())
def test_undecodable_bytes_are_a_corrupt_store_error(raw):
    with pytest.raises(CorruptStoreError) as info:
        codec.decode_event(raw)
    assert info.value.code == "CORRUPT_STORE"


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_version_1_events_are_upcast_to_the_same_event(event):
    assert codec.decode_event(v1_bytes(event)) == event


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_events_are_written_in_version_2_and_never_longer_than_version_1(event):
    tag, version, _ = cbor2.loads(codec.encode_event(event)[4:])
    assert (type(tag), version) == (int, codec.VERSION) == (int, 2)
    assert len(codec.encode_event(event)) <= len(v1_bytes(event))


def test_a_plain_written_event_is_about_half_the_overhead_of_version_1():
    now = 1720843200000
    mid = to_str((now << 80 | 777).to_bytes(16, "big"))       # an id stamped when it was written
    event = MessageWritten(Message(mid, "conversation-1", "user", "Remember this", now, now))
    content = len(event.message.content.encode("utf-8"))
    assert len(codec.encode_event(event)) - content <= 50 < len(v1_bytes(event)) - content


@pytest.mark.parametrize("when", [0, 1, 2**48 - 1])
@pytest.mark.parametrize("clock", [-(2**40), -1, 0, 1, 2**50])
def test_written_times_round_trip_whatever_their_distance_from_the_id(when, clock):
    mid = to_str((when << 80 | 12345).to_bytes(16, "big"))
    event = MessageWritten(Message(mid, "s", "assistant", "x", when + clock, when - clock, 3, RICH))
    assert codec.decode_event(codec.encode_event(event)) == event


def v2(tag, payload) -> bytes:
    return sealed(cbor2.dumps([tag, 2, payload]))


WRITTEN_V2 = [bytes(16), "s", 0, "c", 0, 0, 1, None]
BAD_V2 = {
    "role index past the roles": v2(1, WRITTEN_V2[:2] + [3] + WRITTEN_V2[3:]),
    "negative role index": v2(1, WRITTEN_V2[:2] + [-1] + WRITTEN_V2[3:]),
    "role as a name": v2(1, WRITTEN_V2[:2] + ["user"] + WRITTEN_V2[3:]),
    "a name as the tag": v2("MessageWritten", WRITTEN_V2),
    "unknown int tag": v2(9, WRITTEN_V2),
    "version 1 with an int tag": sealed(cbor2.dumps([1, 1, WRITTEN_V2])),
    "metadata that is neither null nor a list": v2(1, WRITTEN_V2[:7] + [0]),
    "delete with two ids": v2(3, [bytes(16), bytes(16)]),
    "update with a content that is bytes": v2(2, [bytes(16), 2, 3, b"c", None]),
}


@pytest.mark.parametrize("raw", BAD_V2.values(), ids=BAD_V2.keys())
def test_malformed_version_2_events_are_a_corrupt_store_error(raw):
    with pytest.raises(CorruptStoreError):
        codec.decode_event(raw)


def test_the_well_formed_version_2_sample_decodes():
    assert codec.decode_event(v2(1, WRITTEN_V2)).message.role == "user"


_texts = st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=20),
                   st.sampled_from([23, 24, 255, 256, 65535, 65536]).map(lambda n: "x" * n))
_numbers = st.one_of(st.integers(-2**70, 2**70), st.sampled_from([23, 24, 255, 256, 65535, 65536, 2**32 - 1,
                                                                 2**32, 2**64 - 1, 2**64, -2**64, -2**64 - 1]))
_written = st.builds(
    Message, canonical_ids, _texts, st.sampled_from(ROLES), _texts, _numbers, _numbers, _numbers,
    st.fixed_dictionaries({}, optional={**metadata_fields([]), "importance": _numbers,
                                        "tags": st.lists(_texts, max_size=25).map(tuple),
                                        "summary": st.none() | _texts}).map(lambda d: Metadata(**d)))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(message=_written)
def test_a_written_event_has_the_bytes_canonical_cbor2_gives_it_whatever_its_values(message):
    body = codec.encode_event(MessageWritten(message))[4:]
    assert body == cbor2.dumps(cbor2.loads(body), canonical=True)
    assert codec.decode_event(codec.encode_event(MessageWritten(message))) == MessageWritten(message)


@given(meta=st.fixed_dictionaries({}, optional={**metadata_fields([]), "summary": st.none() | _texts,
                                                "importance": _numbers}).map(lambda d: Metadata(**d)),
       more_sources=st.integers(0, 300))
def test_the_size_of_metadata_is_counted_as_its_encoding_is_long(meta, more_sources):
    meta = replace(meta, source_message_ids=meta.source_message_ids + (A,) * more_sources)
    assert codec.metadata_size(meta) == len(codec.dumps(codec.metadata_to_list(meta)))


def test_a_decoded_message_written_is_the_dataclass_its_constructor_makes():
    from dataclasses import fields

    from eventstore.events import Message, MessageWritten, Metadata
    for cls in (Message, MessageWritten, Metadata):
        assert not hasattr(cls, "__slots__") and not hasattr(cls, "__post_init__")
    m = Message("01J0000000000000000000000A", "s", "assistant", "hello", 1_700_000_000_000, 1_700_000_000_500, 3,
                Metadata(tags=("a",), summary="x"))
    decoded = codec.decode_event(codec.encode_event(MessageWritten(m)))
    assert decoded == MessageWritten(m) and hash(decoded.message) == hash(m)
    assert vars(decoded.message) == vars(m) and [f.name for f in fields(Message)] == list(vars(decoded.message))


@given(meta=metadata([]))
def test_metadata_built_at_once_is_the_dataclass_its_constructor_makes(meta):
    from dataclasses import astuple, fields

    from eventstore.events import metadata as built
    made = built(*astuple(meta))
    assert made == meta and hash(made) == hash(meta) and vars(made) == vars(meta)
    assert [f.name for f in fields(Metadata)] == list(vars(made))


_COUNTS = st.integers(min_value=-(1 << 64), max_value=(1 << 64) - 1)


@given(st.data())
def test_counter_maps_kept_in_canonical_order_encode_to_the_canonical_bytes(data):
    """The stores' counter maps (statistics, I/O counters) are built in
    ``canonical_order`` and written by ``dumps_counts`` without sorting: the
    bytes must be exactly the canonical encoding, whatever the values."""
    from eventstore.meta import IO_KEYS
    from projections.stats import KEYS
    for keys in (KEYS, IO_KEYS):
        order = codec.canonical_order(keys)
        assert sorted(order) == sorted(keys)
        counts = {k: data.draw(_COUNTS) for k in order}
        assert codec.dumps_counts(counts) == codec.dumps(counts)


def test_canonical_order_is_not_the_order_the_keys_are_listed_in():
    """What the test above guards: written in their listed order, the maps would not be canonical."""
    from projections.stats import KEYS
    listed = dict.fromkeys(KEYS, 1)
    assert codec.dumps_counts(listed) != codec.dumps(listed)
    assert codec.dumps_counts({k: 1 for k in codec.canonical_order(KEYS)}) == codec.dumps(listed)


@given(st.data())
def test_counter_maps_read_back_equal_what_was_written_and_are_copies(data):
    """``loads_counts`` of bytes this process wrote gives the map they decode
    to (remembered, not decoded), a fresh copy each time."""
    from projections.stats import _ORDER
    counts = {k: data.draw(_COUNTS) for k in _ORDER}
    raw = codec.dumps_counts(counts)
    first = codec.loads_counts(raw, _ORDER, "m")
    assert first == {k: cbor2.loads(raw)[k] for k in _ORDER} == counts and list(first) == list(_ORDER)
    first["active"] += 1
    assert codec.loads_counts(raw, _ORDER, "m") == counts
    assert codec.loads_counts(bytes(raw), _ORDER, "m") == counts


def test_a_counter_map_that_is_not_one_is_corrupt_even_after_maps_were_remembered():
    codec.dumps_counts({"a": 1})
    with pytest.raises(CorruptStoreError, match="the statistics record is not a map of numbers"):
        codec.loads_counts(cbor2.dumps({"a": "x"}), ("a",), "the statistics record")


@given(st.integers(-(1 << 64), (1 << 64) - 1) | st.integers(-(1 << 130), 1 << 130))
def test_an_int_composed_directly_has_the_bytes_cbor2_gives_it(n):
    assert codec.dumps_int(n) == cbor2.dumps(n, canonical=True)


@given(st.text(max_size=300), st.binary(max_size=300), st.integers(0, 40))
def test_texts_bytes_and_array_heads_composed_directly_have_the_bytes_cbor2_gives_them(text, data, n):
    assert codec.dumps_text(text) == cbor2.dumps(text, canonical=True)
    assert codec.dumps_bytes(data) == cbor2.dumps(data, canonical=True)
    assert codec.array_head(n) + b"".join(map(codec.dumps_int, range(n))) == cbor2.dumps(list(range(n)))


_updated = st.builds(MessageUpdated, canonical_ids, _numbers, _numbers, st.none() | _texts,
                     st.just(Metadata()) | st.just(RICH), st.none() | _texts)
_deleted = st.builds(MessageDeleted, canonical_ids, st.none() | _texts, st.none() | _numbers)


@settings(max_examples=300)
@given(event=_updated | _deleted)
def test_updates_and_deletes_have_the_bytes_canonical_cbor2_gives_them_whatever_their_values(event):
    body = codec.encode_event(event)[4:]
    assert body == cbor2.dumps(cbor2.loads(body), canonical=True)
    assert codec.decode_event(codec.encode_event(event)) == event


@pytest.mark.parametrize("event", [
    MessageWritten(Message(A, "s", "user", "c", 1.0, 1, 1)),             # type: ignore[arg-type]
    MessageWritten(Message(A, "s", "user", "c", 1, 1, True)),
    MessageUpdated(A, 2.0, 1, None, Metadata()),                           # type: ignore[arg-type]
    MessageUpdated(A, 2, 1, b"bytes", Metadata()),                         # type: ignore[arg-type]
    MessageDeleted(A, None, 1.5),                                          # type: ignore[arg-type]
], ids=["float time", "bool revision", "float revision", "bytes content", "float deletion time"])
def test_an_event_holding_a_value_of_another_type_is_refused_not_written(event):
    with pytest.raises(TypeError):
        codec.encode_event(event)
