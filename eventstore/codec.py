"""The byte layout of events and of the keys the event store owns.

An event is the canonical CBOR of ``[type_tag, schema_version, payload]``.
Canonical encoding makes the bytes a pure function of the value, which is what
lets replay reproduce the live read models byte for byte.
Decoding upcasts old schema versions (none yet: every event is version 1).
"""

from __future__ import annotations

import struct
import zlib

import cbor2

from .errors import CorruptStoreError
from .events import Event, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from .ids import to_bytes, to_str

_SEQ = struct.Struct(">Q")
_CRC = struct.Struct(">I")


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
            [[t, to_bytes(m)] for t, m in meta.relations] if meta.relations else [],
            [to_bytes(m) for m in meta.source_message_ids] if meta.source_message_ids else []]


def _check(ok: bool) -> None:
    if not ok:
        raise CorruptStoreError("a stored record has a field of the wrong type")


def _str_or_none(value: object) -> bool:
    return value is None or isinstance(value, str)


_DEFAULT_METADATA = Metadata()
_DEFAULT_METADATA_LIST = metadata_to_list(_DEFAULT_METADATA)


def metadata_from_list(raw: list) -> Metadata:
    """Decode stored metadata, checking every field's type (never trust the bytes)."""
    if type(raw) is list and raw == _DEFAULT_METADATA_LIST and type(raw[3]) is int:
        return _DEFAULT_METADATA       # the usual value; ``==`` alone would take 50.0 for 50
    tags, tier, kind, importance, tool_call_id, summary, rels, sources = raw
    _check(isinstance(tags, list) and all(isinstance(t, str) for t in tags)
           and isinstance(tier, str) and isinstance(kind, str) and type(importance) is int
           and _str_or_none(tool_call_id) and _str_or_none(summary)
           and isinstance(rels, list) and all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
                                              and isinstance(r[1], bytes) for r in rels)
           and isinstance(sources, list) and all(isinstance(m, bytes) for m in sources))
    return Metadata(tuple(tags), tier, kind, importance, tool_call_id, summary,
                    tuple((t, to_str(m)) for t, m in rels),
                    tuple(to_str(m) for m in sources))


def _message_to_list(msg: Message) -> list:
    return [to_bytes(msg.message_id), msg.session_id, msg.role, msg.content,
            msg.timestamp, msg.updated_at, msg.revision, metadata_to_list(msg.metadata)]


def _message_from_list(raw: list) -> Message:
    mid, session, role, content, ts, upd, rev, meta = raw
    _check(isinstance(mid, bytes) and isinstance(session, str) and isinstance(role, str)
           and isinstance(content, str) and type(ts) is int and type(upd) is int and type(rev) is int)
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
    body = dumps([event.TYPE, event.VERSION, payload])
    return _CRC.pack(zlib.crc32(body)) + body


def decode_event(raw: bytes) -> Event:
    """Decode one stored event; anything malformed is ``CORRUPT_STORE``.

    Every event starts with the CRC-32 of its CBOR body, so a changed byte is
    reported instead of served.
    """
    body = raw[_CRC.size:]
    if len(raw) < _CRC.size or _CRC.unpack_from(raw)[0] != zlib.crc32(body):
        raise CorruptStoreError("an event in the log failed its checksum")
    try:
        tag, version, payload = loads(body)
        if version != 1:
            raise ValueError("unknown schema version")
        if tag == MessageWritten.TYPE:
            return MessageWritten(_message_from_list(payload))
        if tag == MessageUpdated.TYPE:
            mid, rev, upd, content, meta = payload
            _check(isinstance(mid, bytes) and type(rev) is int and type(upd) is int and _str_or_none(content))
            return MessageUpdated(to_str(mid), rev, upd, content, metadata_from_list(meta))
        if tag == MessageDeleted.TYPE:
            return MessageDeleted(to_str(payload[0]))
    except CorruptStoreError:
        raise
    except Exception as exc:  # any shape or CBOR problem means the bytes are bad
        raise CorruptStoreError("an event in the log could not be decoded") from exc
    raise CorruptStoreError("an event in the log has an unknown type tag")
