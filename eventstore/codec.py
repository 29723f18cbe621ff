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
for null standing for default metadata.  In version 2 every payload may end
with one more item, the event's principal (a text: who made it, never a
secret); an event without it (written before principals were recorded, or by
compaction) decodes with ``principal=None``.  A ``MessageDeleted`` with its
time is ``[id, principal or null, deleted_at]``.  Decoding upcasts version 1 events
(logs written before version 2 keep them until a compaction re-writes them).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from functools import lru_cache

import cbor2

from .errors import DECODING_ERRORS, CorruptStoreError
from .events import ROLES, Event, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata, metadata, written
from .ids import to_bytes, to_str
from .memo import Memo

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


def canonical_order(keys: Iterable[str]) -> tuple[str, ...]:
    """Text keys in the order canonical CBOR puts them in a map (as cbor2 itself sorts them)."""
    return tuple(cbor2.loads(dumps(dict.fromkeys(keys, 0))))


def dumps_counts(counts: dict[str, int]) -> bytes:
    """:func:`dumps` of a map of text keys to integers whose keys are already
    in :func:`canonical_order` (as the stores' counter maps are kept): the
    same bytes, without the encoder sorting them again — a quarter of the
    time, and these maps are written by every write transaction.  The map
    is remembered with its bytes for :func:`loads_counts`."""
    raw = cbor2.dumps(counts)
    _COUNTS.keep((raw, tuple(counts)), tuple(counts.items()))
    return raw


def loads_counts(raw: bytes | None, order: tuple[str, ...], what: str) -> dict[str, int]:
    """A stored map of counters (``what`` names it in the error), every key
    of ``order`` in that order, 0 when missing.  Bytes this process wrote
    last (:func:`dumps_counts`), which the next write transaction reads
    back, give a copy of the map they were made from, without decoding."""
    known = _COUNTS.get((raw, order)) if raw else None
    if known is not None:
        return dict(known)
    found = loads(raw) if raw else {}
    if not (isinstance(found, dict) and all(type(v) is int for v in found.values())):
        raise CorruptStoreError(f"{what} is not a map of numbers")
    return {k: found.get(k, 0) for k in order}


_COUNTS: Memo[tuple[bytes, tuple[str, ...]], tuple[tuple[str, int], ...]] = Memo(16)


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


def metadata_size(meta: Metadata) -> int:
    """``len(dumps(metadata_to_list(meta)))``: the size of metadata as an event carries it."""
    return len(_metadata_body(meta))


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
           and isinstance(rels, list) and (not rels or all(isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)
                                                           and isinstance(r[1], bytes) for r in rels))
           and isinstance(sources, list) and all(isinstance(m, bytes) for m in sources))
    return metadata(tuple(tags), tier, kind, importance, tool_call_id, summary,
                    tuple((t, to_str(m)) for t, m in rels) if rels else (),
                    tuple(map(to_str, sources)))


def _id_ms(raw_id: bytes) -> int:
    """The milliseconds a ULID carries (its first 48 bits)."""
    return int.from_bytes(raw_id[:6], "big")


def _meta_in(raw: object) -> Metadata:
    return DEFAULT_METADATA if raw is None else metadata_from_list(raw)


def encode_event(event: Event) -> bytes:
    """The stored bytes of an event: a CRC-32 of its body, then the body.  A
    value of a type an event does not hold (a float, a bool) is a ``TypeError``."""
    if type(event) is MessageWritten:
        body = _written_body(event.message, event.principal)
    elif type(event) is MessageUpdated:
        body = _updated_body(event)
    elif type(event) is MessageDeleted:
        body = _deleted_body(event)
    else:
        raise TypeError(f"not an event: {type(event).__name__}")
    return _CRC.pack(zlib.crc32(body)) + body


# ------------------------------------------------------- events, written out
# The canonical CBOR of an event's body is composed here directly, item by
# item: the bytes cbor2's canonical encoder gives the same value (the codec's
# tests hold every event to that), in well under half of its time on a
# written event (cbor2 spends about two microseconds on each list, and an
# import writes one event a message).  Only ints, texts, byte strings, null and
# arrays occur; a value of another type raises.

def _head(major: int, n: int) -> bytes:
    """A CBOR head: major type and argument, in the fewest bytes."""
    if n < 24:
        return _HEADS[major][n]
    if n < 0x100:
        return bytes((major << 5 | 24, n))
    if n < 0x10000:
        return bytes((major << 5 | 25,)) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes((major << 5 | 26,)) + n.to_bytes(4, "big")
    return bytes((major << 5 | 27,)) + n.to_bytes(8, "big")


_HEADS = [[bytes((major << 5 | n,)) for n in range(24)] for major in range(8)]
_NULL = b"\xf6"
_WRITTEN_HEAD = b"\x83\x01" + _HEADS[0][VERSION] + b"\x88"    # [1, VERSION, [8 fields]]
_WRITTEN_BY_HEAD = _WRITTEN_HEAD[:-1] + b"\x89"                 # [1, VERSION, [8 fields, principal]]
_ID_HEAD = _HEADS[2][16]


def _int(n: int) -> bytes:
    if type(n) is not int:
        raise TypeError("not an int")
    if n >= 0:
        return _head(0, n) if n <= _UINT64 else _bignum(0xC2, n)
    return _head(1, -1 - n) if -1 - n <= _UINT64 else _bignum(0xC3, -1 - n)


def _bignum(tag: int, n: int) -> bytes:
    """An int past 64 bits: tag 2 (``n``) or 3 (−1 − ``n``) over its big-endian bytes."""
    return bytes((tag,)) + dumps_bytes(n.to_bytes((n.bit_length() + 7) // 8, "big"))


_UINT64 = (1 << 64) - 1


def dumps_int(n: int) -> bytes:
    """``dumps(n)``, composed directly: a read model stores one a message."""
    return _int(n)


def _text(text: str) -> bytes:
    if type(text) is not str:
        raise TypeError("not a str")
    data = text.encode("utf-8")
    return (_TEXT_HEADS[len(data)] if len(data) < len(_TEXT_HEADS) else _head(3, len(data))) + data


# Pieces of canonical CBOR for read models that compose a value's encoding
# themselves (a value of fixed shape written by every write): each gives the
# bytes ``dumps`` gives for the item, and raises for a value of another type.
dumps_text = _text


def dumps_bytes(data: bytes) -> bytes:
    if type(data) is not bytes:
        raise TypeError("not bytes")
    return (_BYTES_HEADS[len(data)] if len(data) < len(_BYTES_HEADS) else _head(2, len(data))) + data


def array_head(n: int) -> bytes:
    """The head of an array of ``n`` items (the items' encodings follow it)."""
    return _ARRAY_HEADS[n] if n < 24 else _head(4, n)


_TEXT_HEADS = [_head(3, n) for n in range(4096)]      # the heads of texts up to 4 KiB (a message's, usually)
_UINTS = _HEADS[0]            # the encodings of 0 to 23
_BYTES_HEADS = [_head(2, n) for n in range(256)]
_ARRAY_HEADS = _HEADS[4]


def _written_body(m: Message, principal: str | None) -> bytes:
    mid = to_bytes(m.message_id)
    meta, ts, upd, rev = m.metadata, m.timestamp, m.updated_at, m.revision
    if type(ts) is not int or type(upd) is not int or type(rev) is not int:
        raise TypeError("not an int")
    late, later = ts - int.from_bytes(mid[:6], "big"), upd - ts      # usually 0, 0 and a revision of 1
    return b"".join((_WRITTEN_HEAD if principal is None else _WRITTEN_BY_HEAD, _ID_HEAD, mid, _text(m.session_id),
                     _UINTS[ROLES.index(m.role)], _text(m.content), _UINTS[late] if 0 <= late < 24 else _int(late),
                     _UINTS[later] if 0 <= later < 24 else _int(later), _UINTS[rev] if 0 <= rev < 24 else _int(rev),
                     _NULL if _is_default(meta) else _metadata_body(meta),
                     b"" if principal is None else _text(principal)))


def _updated_body(e: MessageUpdated) -> bytes:
    fields = [_ID_HEAD + to_bytes(e.message_id), _int(e.revision), _int(e.updated_at),
              _NULL if e.content is None else _text(e.content),
              _NULL if _is_default(e.metadata) else _metadata_body(e.metadata)]
    return _body(2, fields, e.principal)


def _deleted_body(e: MessageDeleted) -> bytes:
    fields = [_ID_HEAD + to_bytes(e.message_id)]
    if e.deleted_at is None:
        return _body(3, fields, e.principal)
    return _body(3, [*fields, _NULL if e.principal is None else _text(e.principal), _int(e.deleted_at)], None)


def _body(tag: int, fields: list[bytes], principal: str | None) -> bytes:
    """``[tag, VERSION, payload]``, the payload's items encoded, ending with the principal if there is one."""
    if principal is not None:
        fields.append(_text(principal))
    return b"".join([_HEADS[4][3], _UINTS[tag], _UINTS[VERSION], array_head(len(fields)), *fields])


def _is_default(meta: Metadata) -> bool:
    """``meta == DEFAULT_METADATA``, at once for the usual cases (an imported
    message's source id says no at once)."""
    return meta is DEFAULT_METADATA or (not meta.source_message_ids and meta == DEFAULT_METADATA)


def _metadata_body(meta: Metadata) -> bytes:
    rels, sources = meta.relations, meta.source_message_ids
    if type(meta.importance) is not int:
        raise TypeError("not an int")
    fixed = _fixed_body(meta.tags, meta.memory_tier, meta.memory_kind, meta.importance, meta.tool_call_id,
                        meta.summary)
    if not rels and len(sources) == 1:          # an imported message's: no relation, its source id
        return fixed + _ONE_SOURCE + to_bytes(sources[0])
    parts = [fixed, _head(4, len(rels))]
    for rtype, target in rels:
        parts += (b"\x82", _text(rtype), _ID_HEAD, to_bytes(target))
    parts.append(_head(4, len(sources)))
    for source in sources:
        parts += (_ID_HEAD, to_bytes(source))
    return b"".join(parts)


_ONE_SOURCE = _HEADS[4][0] + _HEADS[4][1] + _ID_HEAD       # no relations, then a list of one id


@lru_cache(maxsize=4096)
def _fixed_body(tags: tuple[str, ...], tier: str, kind: str, importance: int, tool_call_id: str | None,
                summary: str | None) -> bytes:
    """The metadata's head and its fields before the relations: they repeat
    from message to message (an import's source tag, kind and tier), so
    their bytes are kept (the caller checks that ``importance`` is an int)."""
    return b"".join([b"\x88", _head(4, len(tags)), *map(_text, tags), _text(tier), _text(kind), _int(importance),
                     _NULL if tool_call_id is None else _text(tool_call_id),
                     _NULL if summary is None else _text(summary)])


def _principal(payload: list, fields: int) -> str | None:
    """The principal ending a payload of ``fields`` items, if it has one more."""
    if len(payload) == fields:
        return None
    _check(len(payload) == fields + 1 and isinstance(payload[fields], str))
    return payload[fields]


def _written(payload: list, version: int) -> MessageWritten:
    if len(payload) == 8:
        principal = None
        mid, session, role, content, ts, upd, rev, meta = payload
    else:
        principal = _principal(payload, 8)
        mid, session, role, content, ts, upd, rev, meta = payload[:8]
    _check(isinstance(mid, bytes) and isinstance(session, str) and isinstance(content, str)
           and type(ts) is int and type(upd) is int and type(rev) is int)
    if version == 1:
        _check(role in ROLES)
        return MessageWritten(Message(to_str(mid), session, role, content, ts, upd, rev,
                                      metadata_from_list(meta)), principal)
    _check(type(role) is int and 0 <= role < len(ROLES))
    ts += _id_ms(mid)
    return written(to_str(mid), session, ROLES[role], content, ts, ts + upd, rev, _meta_in(meta), principal)


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
            principal = _principal(payload, 5)
            mid, rev, upd, content, meta = payload[:5]
            _check(isinstance(mid, bytes) and type(rev) is int and type(upd) is int and _str_or_none(content))
            return MessageUpdated(to_str(mid), rev, upd, content, meta_in(meta), principal)
        if tag == 3:
            mid, deleted_at = payload[0], None
            if len(payload) == 3:                  # [id, principal or null, time]
                principal, deleted_at = payload[1], payload[2]
                _check(_str_or_none(principal) and type(deleted_at) is int)
            else:
                principal = _principal(payload, 1)
            _check(isinstance(mid, bytes))
            return MessageDeleted(to_str(mid), principal, deleted_at)
    except CorruptStoreError:
        raise
    except Exception as exc:  # any shape or CBOR problem means the bytes are bad
        raise CorruptStoreError("an event in the log could not be decoded") from exc
    raise CorruptStoreError("an event in the log has an unknown type tag")
