"""The byte layout of events and of the keys the event store owns.

An event is the canonical CBOR of ``[type_tag, schema_version, payload]``.
Canonical encoding makes the bytes a pure function of the value, which is what
lets replay reproduce the live read models byte for byte.
Decoding upcasts old schema versions (none yet: every event is version 1).
"""

from __future__ import annotations

import struct

import cbor2

from .errors import CorruptStoreError
from .events import Event, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from .ids import to_bytes, to_str

_SEQ = struct.Struct(">Q")


def seq_key(seq: int) -> bytes:
    return _SEQ.pack(seq)


def seq_of(key: bytes) -> int:
    return _SEQ.unpack(key)[0]


def dumps(value: object) -> bytes:
    return cbor2.dumps(value, canonical=True)


def loads(raw: bytes) -> object:
    return cbor2.loads(raw)


def metadata_to_list(meta: Metadata) -> list:
    return [list(meta.tags), meta.memory_tier, meta.memory_kind, meta.importance,
            meta.tool_call_id, meta.summary,
            [[t, to_bytes(m)] for t, m in meta.relations],
            [to_bytes(m) for m in meta.source_message_ids]]


def metadata_from_list(raw: list) -> Metadata:
    tags, tier, kind, importance, tool_call_id, summary, rels, sources = raw
    return Metadata(tuple(tags), tier, kind, importance, tool_call_id, summary,
                    tuple((t, to_str(m)) for t, m in rels),
                    tuple(to_str(m) for m in sources))


def _message_to_list(msg: Message) -> list:
    return [to_bytes(msg.message_id), msg.session_id, msg.role, msg.content,
            msg.timestamp, msg.updated_at, msg.revision, metadata_to_list(msg.metadata)]


def _message_from_list(raw: list) -> Message:
    mid, session, role, content, ts, upd, rev, meta = raw
    return Message(to_str(mid), session, role, content, ts, upd, rev, metadata_from_list(meta))


def encode_event(event: Event) -> bytes:
    if isinstance(event, MessageWritten):
        payload = _message_to_list(event.message)
    elif isinstance(event, MessageUpdated):
        payload = [to_bytes(event.message_id), event.revision, event.updated_at,
                   event.content, metadata_to_list(event.metadata)]
    elif isinstance(event, MessageDeleted):
        payload = [to_bytes(event.message_id)]
    else:
        raise TypeError(f"not an event: {type(event).__name__}")
    return dumps([event.TYPE, event.VERSION, payload])


def decode_event(raw: bytes) -> Event:
    """Decode one stored event; anything malformed is ``CORRUPT_STORE``."""
    try:
        tag, version, payload = loads(raw)
        if version != 1:
            raise ValueError("unknown schema version")
        if tag == MessageWritten.TYPE:
            return MessageWritten(_message_from_list(payload))
        if tag == MessageUpdated.TYPE:
            mid, rev, upd, content, meta = payload
            return MessageUpdated(to_str(mid), rev, upd, content, metadata_from_list(meta))
        if tag == MessageDeleted.TYPE:
            return MessageDeleted(to_str(payload[0]))
    except CorruptStoreError:
        raise
    except Exception as exc:  # any shape or CBOR problem means the bytes are bad
        raise CorruptStoreError("an event in the log could not be decoded") from exc
    raise CorruptStoreError("an event in the log has an unknown type tag")
