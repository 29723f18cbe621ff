"""Read model: typed relation edges, stored in both directions.

``relations`` (dupsort, dupfixed 18 bytes): 16-byte message id →
``direction`` (0 outgoing, 1 incoming) + relation type index + other id.
An edge exists while its source message is live; its target may be deleted
or may never have existed (the context view reports such ends as deleted).
"""

from __future__ import annotations

from collections.abc import Iterator

from eventstore.errors import CorruptStoreError
from eventstore.events import RELATION_TYPES, Metadata
from eventstore.ids import to_bytes, to_str
from eventstore.store import Tx

DB = "relations"
SPECS: dict[str, dict] = {DB: {"dupsort": True, "dupfixed": True}}
OUTGOING, INCOMING = 0, 1
DIRECTIONS = ("outgoing", "incoming")
_VALUE_SIZE = 2 + 16


def _edges(message_id: str, meta: Metadata) -> list[tuple[bytes, bytes]]:
    src = to_bytes(message_id)
    out = []
    for rtype, target in meta.relations:
        t, dst = RELATION_TYPES.index(rtype), to_bytes(target)
        out.append((src, bytes([OUTGOING, t]) + dst))
        out.append((dst, bytes([INCOMING, t]) + src))
    return out


def add(tx: Tx, sources: list[tuple[str, Metadata]]) -> None:
    """The edges of each ``(message id, metadata)`` of ``sources``, in one call
    (none, and no cursor, for messages without relations)."""
    edges = [edge for mid, meta in sources if meta.relations for edge in _edges(mid, meta)]
    if edges:
        with tx.txn.cursor(db=tx.db(DB)) as cur:
            cur.putmulti(edges)


def remove(tx: Tx, message_id: str, meta: Metadata) -> None:
    for k, v in _edges(message_id, meta):
        tx.txn.delete(k, v, db=tx.db(DB))


def edges(tx: Tx, message_id: str) -> Iterator[tuple[str, str, str]]:
    """(direction, type, other id) of every edge touching the message."""
    with tx.txn.cursor(db=tx.db(DB)) as cur:
        if not cur.set_key(to_bytes(message_id)):
            return
        for v in cur.iternext_dup(keys=False):
            yield _edge(v)


def _edge(v: bytes) -> tuple[str, str, str]:
    """(direction, type, other id) of a stored value; ``CORRUPT_STORE`` if damaged."""
    if len(v) != _VALUE_SIZE or v[0] >= len(DIRECTIONS) or v[1] >= len(RELATION_TYPES):
        raise CorruptStoreError("a relation edge is not a direction, a relation type and an id")
    return DIRECTIONS[v[0]], RELATION_TYPES[v[1]], to_str(v[2:])


def count(tx: Tx, message_id: str) -> int:
    with tx.txn.cursor(db=tx.db(DB)) as cur:
        return cur.count() if cur.set_key(to_bytes(message_id)) else 0
