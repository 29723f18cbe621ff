"""The ``docs`` table: docno → what filters and tie-breaks need of a message
without decoding it.

Value: id (16) + kind, tier, importance (1 byte each) + timestamp (8) + role
(1) + content length in UTF-8 bytes (4) + session id, sealed with a CRC-32 of
key and value.  Written with the message, not merged.  The ``times`` table
(timestamp + docno → empty) is written with it: the index of time filters.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from eventstore.errors import CorruptStoreError
from eventstore.events import KINDS, ROLES, TIERS, Message
from eventstore.ids import to_bytes, to_str
from eventstore.transaction import Tx

from .layout import DOCS, TIMES, docno_key, sealed, time_key, unsealed

_DOC = struct.Struct(">16sBBBQBI")     # id, kind, tier, importance, timestamp, role, content bytes (+ session)
# Offsets of the filterable fields inside a ``docs`` value (see :func:`raw_doc`).
DOC_KIND, DOC_TIER, DOC_IMPORTANCE, DOC_TIME, DOC_ROLE, DOC_BYTES, DOC_SESSION = 16, 17, 18, 19, 27, 28, _DOC.size


@dataclass(frozen=True)
class Doc:
    message_id: str
    kind: str
    tier: str
    importance: int
    timestamp: int
    session_id: str
    role: str = "user"
    content_bytes: int = 0


def doc_value(key: bytes, msg: Message) -> bytes:
    m = msg.metadata
    size = min(len(msg.content.encode("utf-8")), 0xFFFFFFFF)
    return sealed(key, _DOC.pack(to_bytes(msg.message_id), KINDS.index(m.memory_kind),
                                 TIERS.index(m.memory_tier), m.importance, msg.timestamp,
                                 ROLES.index(msg.role), size)
                  + msg.session_id.encode("utf-8"))


def put(tx: Tx, docno: int, msg: Message, new: bool) -> None:
    """Write a document's row; ``new``: a new document (its docno is the
    greatest so far: appended), which also gets its ``times`` key."""
    key = docno_key(docno)
    if new:
        tx.put_last(DOCS, [(key, doc_value(key, msg))])
        tx.put_last(TIMES, [(time_key(msg.timestamp, docno), b"")])
    else:
        tx.txn.put(key, doc_value(key, msg), db=tx.db(DOCS))


def delete(tx: Tx, docno: int, timestamp: int) -> None:
    tx.txn.delete(docno_key(docno), db=tx.db(DOCS))
    tx.txn.delete(time_key(timestamp, docno), db=tx.db(TIMES))


def raw_doc(tx: Tx, docno: int) -> bytes | None:
    """The ``docs`` value (checksum checked and cut off), for filters that
    compare a byte or two."""
    key = docno_key(docno)
    raw = tx.txn.get(key, db=tx.db(DOCS))
    return None if raw is None else unsealed(key, raw, "a search document record")


def raw_docs(tx: Tx, docnos: list[int]) -> list[bytes | None]:
    """:func:`raw_doc` of each of ``docnos``, read in one call."""
    keys = [docno_key(d) for d in docnos]
    with tx.txn.cursor(db=tx.db(DOCS)) as cur:
        found = dict(cur.getmulti(keys))
    return [None if (raw := found.get(key)) is None else unsealed(key, raw, "a search document record")
            for key in keys]


def tie_keys(tx: Tx, docnos: list[int]) -> list[tuple[int, int, bytes]]:
    """Each document's place among equal scores, the larger first, as search
    settles them: importance, timestamp, message id."""
    return [(-1, -1, b"") if raw is None else
            (raw[DOC_IMPORTANCE], int.from_bytes(raw[DOC_TIME:DOC_TIME + 8], "big"), raw[:16])
            for raw in raw_docs(tx, docnos)]


def sessions_of(tx: Tx, docnos: list[int]) -> set[str]:
    """The sessions the documents ``docnos`` are in (one without a row: none)."""
    found = {raw[_DOC.size:] for raw in raw_docs(tx, docnos) if raw is not None}
    try:
        return {session.decode("utf-8") for session in found}
    except UnicodeDecodeError as exc:
        raise CorruptStoreError("a search document record could not be decoded") from exc


def doc(tx: Tx, docno: int) -> Doc | None:
    raw = raw_doc(tx, docno)
    if raw is None:
        return None
    if (len(raw) < _DOC.size or raw[DOC_KIND] >= len(KINDS) or raw[DOC_TIER] >= len(TIERS)
            or raw[DOC_ROLE] >= len(ROLES)):
        raise CorruptStoreError("a search document record could not be decoded")
    mid, kind, tier, imp, ts, role, size = _DOC.unpack_from(raw)
    try:
        session_id = raw[_DOC.size:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptStoreError("a search document record could not be decoded") from exc
    return Doc(to_str(mid), KINDS[kind], TIERS[tier], imp, ts, session_id, ROLES[role], size)
