"""Default metadata is decoded by a shortcut that is exactly as strict as the full check."""

from __future__ import annotations

import zlib
from decimal import Decimal

import pytest

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import Message, MessageWritten, Metadata
from eventstore.ids import to_bytes

MID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def stored(meta: list) -> bytes:
    raw_id = to_bytes(MID)
    body = codec.dumps(["MessageWritten", 1, [raw_id, "s", "user", "hi", 1, 1, 1, meta]])
    return zlib.crc32(body).to_bytes(4, "big") + body


def test_default_metadata_decodes_to_the_default_value():
    event = codec.decode_event(stored([[], "short", "conversation", 50, None, None, [], []]))
    assert event == MessageWritten(Message(MID, "s", "user", "hi", 1, 1, 1, Metadata()))


def test_an_encoded_default_metadata_round_trips():
    event = MessageWritten(Message(MID, "s", "user", "hi", 1, 1, 1, Metadata()))
    assert codec.decode_event(codec.encode_event(event)) == event


@pytest.mark.parametrize("importance", [50.0, Decimal(50), True, "50"])
def test_default_looking_metadata_with_an_importance_that_is_not_an_int_is_corrupt(importance):
    with pytest.raises(CorruptStoreError):
        codec.decode_event(stored([[], "short", "conversation", importance, None, None, [], []]))


@pytest.mark.parametrize("meta", [
    [[], "short", "conversation", 50, None, None, [], [], None],
    [[], "short", "conversation", 50, None, None, []],
    {"tags": []},
])
def test_default_looking_metadata_of_the_wrong_shape_is_corrupt(meta):
    with pytest.raises(CorruptStoreError):
        codec.decode_event(stored(meta))
