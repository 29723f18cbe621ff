"""Read model: every revision of each live message — when, by whom, what changed.

``revisions``: 16-byte message id + 4-byte revision (big-endian, so a
message's revisions sort oldest first) → CBOR ``[at, principal, changed]``,
one record an update: ``at`` the revision's ``updated_at``, ``principal``
the name its event records (null in logs from before principals),
``changed`` the names of what it changed — ``content`` and the metadata
fields.  A message's first revision has no record: it is its
``MessageWritten`` event, which stays in the log at the message's docno
(:func:`projections.messages.written_event`), and reads as ``created`` —
or ``rewritten`` for a message written whole at a later revision (by a
compaction, which keeps only the current revision, or an import of an
export).  Reading it there instead of writing a copy saves every write
and replayed event a put (~2.8 µs of a replica's ~30 µs an event,
``python -m tools.bench_replication --only catchup``).  A deleted
message's records go with it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import fields

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import MessageUpdated, Metadata
from eventstore.ids import to_bytes
from eventstore.store import Tx

from . import messages

DB = "revisions"
SPECS: dict[str, dict] = {DB: {}}
_REV = struct.Struct(">I")
META_FIELDS = tuple(f.name for f in fields(Metadata))


def _key(message_id: str, revision: int) -> bytes:
    return to_bytes(message_id) + _REV.pack(revision)


def changed(old: Metadata, event: MessageUpdated) -> list[str]:
    new = event.metadata
    out = ["content"] if event.content is not None else []
    return out + [name for name in META_FIELDS if getattr(old, name) != getattr(new, name)]


def updated(tx: Tx, old: Metadata, event: MessageUpdated) -> None:
    tx.txn.put(_key(event.message_id, event.revision),
               codec.dumps([event.updated_at, event.principal, changed(old, event)]), db=tx.db(DB))


def _keys(tx: Tx, message_id: str) -> Iterator[tuple[bytes, bytes]]:
    prefix = to_bytes(message_id)
    with tx.txn.cursor(db=tx.db(DB)) as cur:
        if not cur.set_range(prefix):
            return
        for key, value in cur:
            if key[:16] != prefix:
                return
            yield bytes(key), bytes(value)


def deleted(tx: Tx, message_id: str) -> None:
    db = tx.db(DB)
    for key, _ in list(_keys(tx, message_id)):
        tx.txn.delete(key, db=db)


def of(tx: Tx, state: messages.State) -> list[dict]:
    """The message's revisions, oldest first: ``revision``, ``at``, ``principal``, ``changed``."""
    first = messages.written_event(tx, state)
    out = [{"revision": first.message.revision, "at": first.message.updated_at, "principal": first.principal,
            "changed": ["created" if first.message.revision == 1 else "rewritten"]}]
    for key, raw in _keys(tx, state.message_id):
        at, principal, what = _record(raw)
        out.append({"revision": _REV.unpack(key[16:])[0], "at": at, "principal": principal, "changed": what})
    return out


def _record(raw: bytes) -> tuple[int, str | None, list[str]]:
    """``(at, principal, changed)`` of a stored revision record."""
    value = codec.loads(raw)
    if not (isinstance(value, list) and len(value) == 3 and type(value[0]) is int
            and (value[1] is None or isinstance(value[1], str)) and isinstance(value[2], list)):
        raise CorruptStoreError("a revision record is not [time, principal, changed]")
    return value[0], value[1], list(value[2])


def last_principal(tx: Tx, state: messages.State) -> str | None:
    """The principal of the message's current revision (None: unknown)."""
    raw = tx.txn.get(_key(state.message_id, state.revision), db=tx.db(DB))
    if raw is None:
        return messages.written_event(tx, state).principal
    return _record(raw)[1]
