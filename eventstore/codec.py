"""The byte layout of events and of the keys the event store owns.

An event is a CRC-32 of its body, then the body: the canonical CBOR of
``[type_tag, schema_version, payload]``.  Canonical encoding makes the bytes a
pure function of the value, which is what lets replay reproduce the live read
models byte for byte.

Events are written in schema version 2, which is version 1 made compact (the
log is most of a store's bytes):

=========  ===============================  ======================================
version    type tag                         ``MessageWritten`` payload
=========  ===============================  ======================================
1          the name (``"MessageWritten"``)  ``[id, session, role, content,
                                            timestamp, updated_at, revision, meta]``
2          a small int (1, 2, 3)            ``[id, session, role index, content,
                                            timestamp − the id's milliseconds,
                                            updated_at − timestamp, revision,
                                            meta or null for the default]``
=========  ===============================  ======================================

``MessageUpdated`` and ``MessageDeleted`` payloads are the same in both but
for null standing for default metadata.  Decoding upcasts version 1 events
(logs written before version 2 keep them until a compaction re-writes them).
"""

from __future__ import annotations

import struct
import zlib

import cbor2

from .errors import DECODING_ERRORS, CorruptStoreError
from .events import ROLES, Event, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from .ids import to_bytes, to_str

_SEQ = struct.Struct(">Q")
_CRC = struct.Struct(">I")
VERSION = 2                                   # the schema version events are written in
_NAMES = {MessageWritten.TYPE: 1, MessageUpdated.TYPE: 2, MessageDeleted.TYPE: 3}  # version 1 tags → 2's
_CBOR_FAILURES: tuple[type[Exception], ...] = (cbor2.CBORDecodeError, *DECODING_ERRORS)


def seq_key(seq: int) -> bytes:
    return _SEQ.pack(seq)


def seq_of(key: bytes | memoryview) -> int:
    if len(key) != _SEQ.size:
        raise CorruptStoreError("a key of the event log is not 8 bytes")
    return _SEQ.unpack(key)[0]


def dumps(value: object) -> bytes:
    return cbor2.dumps(value, canonical=True)


def loads(raw: bytes | memoryview) -> object:
    """Decode a stored CBOR value: bytes that are not CBOR are ``CORRUPT_STORE``
    (the caller still checks the value's shape)."""
    try:
        return cbor2.loads(raw)
    except _CBOR_FAILURES as exc:
        raise CorruptStoreError(f"a stored record is not valid CBOR ({type(exc).__name__})") from exc


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


DEFAULT_METADATA = Metadata()      # decoding gives this one object for default metadata
_DEFAULT_METADATA_LIST = metadata_to_list(DEFAULT_METADATA)


def metadata_from_list(raw: object) -> Metadata:
    """Decode stored metadata, checking every field's type (never trust the bytes)."""
    if not (isinstance(raw, list) and len(raw) == len(_DEFAULT_METADATA_LIST)):
        raise CorruptStoreError("a stored record has a field of the wrong type")
    if raw == _DEFAULT_METADATA_LIST and type(raw[3]) is int:
        return DEFAULT_METADATA       # the usual value; ``==`` alone would take 50.0 for 50
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


def _id_ms(raw_id: bytes) -> int:
    """The milliseconds a ULID carries (its first 48 bits)."""
    return int.from_bytes(raw_id[:6], "big")


def _meta_out(meta: Metadata) -> list | None:
    return None if meta == DEFAULT_METADATA else metadata_to_list(meta)


def _meta_in(raw: object) -> Metadata:
    return DEFAULT_METADATA if raw is None else metadata_from_list(raw)


def encode_event(event: Event) -> bytes:
    payload: list
    if type(event) is MessageWritten:
        tag, m = 1, event.message
        mid = to_bytes(m.message_id)
        payload = [mid, m.session_id, ROLES.index(m.role), m.content, m.timestamp - _id_ms(mid),
                   m.updated_at - m.timestamp, m.revision, _meta_out(m.metadata)]
    elif type(event) is MessageUpdated:
        tag, payload = 2, [to_bytes(event.message_id), event.revision, event.updated_at,
                           event.content, _meta_out(event.metadata)]
    elif type(event) is MessageDeleted:
        tag, payload = 3, [to_bytes(event.message_id)]
    else:
        raise TypeError(f"not an event: {type(event).__name__}")
    body = dumps([tag, VERSION, payload])
    return _CRC.pack(zlib.crc32(body)) + body


def _written(payload: list, version: int) -> MessageWritten:
    mid, session, role, content, ts, upd, rev, meta = payload
    _check(isinstance(mid, bytes) and isinstance(session, str) and isinstance(content, str)
           and type(ts) is int and type(upd) is int and type(rev) is int)
    if version == 1:
        _check(role in ROLES)
        return MessageWritten(Message(to_str(mid), session, role, content, ts, upd, rev,
                                      metadata_from_list(meta)))
    _check(type(role) is int and 0 <= role < len(ROLES))
    ts += _id_ms(mid)
    return MessageWritten(Message(to_str(mid), session, ROLES[role], content, ts, ts + upd, rev,
                                  _meta_in(meta)))


def decode_event(raw: bytes | memoryview) -> Event:
    """Decode one stored event, of either schema version; anything malformed
    is ``CORRUPT_STORE``.

    Every event starts with the CRC-32 of its CBOR body, so a changed byte is
    reported instead of served.
    """
    body = raw[_CRC.size:]
    if len(raw) < _CRC.size or _CRC.unpack_from(raw)[0] != zlib.crc32(body):
        raise CorruptStoreError("an event in the log failed its checksum")
    try:
        tag, version, payload = cbor2.loads(body)
        if version == 1:
            tag = _NAMES.get(tag) if isinstance(tag, str) else None
            meta_in = metadata_from_list
        elif version == VERSION and type(tag) is int:
            meta_in = _meta_in
        else:
            raise ValueError("unknown schema version")
        if tag == 1:
            return _written(payload, version)
        if tag == 2:
            mid, rev, upd, content, meta = payload
            _check(isinstance(mid, bytes) and type(rev) is int and type(upd) is int and _str_or_none(content))
            return MessageUpdated(to_str(mid), rev, upd, content, meta_in(meta))
        if tag == 3:
            (mid,) = payload
            _check(isinstance(mid, bytes))
            return MessageDeleted(to_str(mid))
    except CorruptStoreError:
        raise
    except Exception as exc:  # any shape or CBOR problem means the bytes are bad
        raise CorruptStoreError("an event in the log could not be decoded") from exc
    raise CorruptStoreError("an event in the log has an unknown type tag")
