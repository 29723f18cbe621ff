"""Read model: every revision of each live message — when, by whom, what changed.

``revisions``: 16-byte message id + 4-byte revision (big-endian, so a
message's revisions sort oldest first) → CBOR ``[at, principal, changed]``:
``at`` the revision's ``updated_at``, ``principal`` the name its event
records (null in logs from before principals), ``changed`` the names of what
it changed — ``content`` and the metadata fields; ``created`` for a message's
first revision, ``rewritten`` for a message written whole at a later revision
(by a compaction, which keeps only the current revision, or an import of an
export).  A deleted message's revisions go with it.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from dataclasses import fields

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import Message, MessageUpdated, Metadata
from eventstore.ids import to_bytes
from eventstore.store import Tx

DB = "revisions"
SPECS: dict[str, dict] = {DB: {}}
_REV = struct.Struct(">I")
META_FIELDS = tuple(f.name for f in fields(Metadata))


def _key(message_id: str, revision: int) -> bytes:
    return to_bytes(message_id) + _REV.pack(revision)


_HEAD = codec.array_head(3)
_FIRST = _REV.pack(1)


@functools.lru_cache(maxsize=64)
def _tail(principal: str | None, created: bool) -> bytes:
    """What follows the time in a written message's record: its principal and
    ``[created]`` or ``[rewritten]`` (a handful of principals write every message)."""
    return b"".join((codec.dumps(principal), codec.array_head(1),
                     codec.dumps_text("created" if created else "rewritten")))


def first_record(msg: Message, principal: str | None) -> tuple[bytes, bytes]:
    """The key and record of a written message: ``dumps([at, principal, [what]])``, composed."""
    rev = msg.revision
    return (to_bytes(msg.message_id) + (_FIRST if rev == 1 else _REV.pack(rev)),
            _HEAD + codec.dumps_int(msg.updated_at) + _tail(principal, rev == 1))


def written(tx: Tx, run: list[tuple[Message, str | None]]) -> None:
    """The first record of each ``(message, principal)`` of ``run``."""
    db, put = tx.db(DB), tx.txn.put
    for msg, principal in run:
        put(*first_record(msg, principal), db=db)


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


def of(tx: Tx, message_id: str) -> list[dict]:
    """The message's revisions, oldest first: ``revision``, ``at``, ``principal``, ``changed``."""
    out = []
    for key, raw in _keys(tx, message_id):
        value = codec.loads(raw)
        if not (isinstance(value, list) and len(value) == 3 and type(value[0]) is int
                and (value[1] is None or isinstance(value[1], str)) and isinstance(value[2], list)):
            raise CorruptStoreError("a revision record is not [time, principal, changed]")
        out.append({"revision": _REV.unpack(key[16:])[0], "at": value[0], "principal": value[1],
                    "changed": list(value[2])})
    return out


def last_principal(tx: Tx, message_id: str) -> str | None:
    """The principal of the message's current revision (None: unknown)."""
    revs = of(tx, message_id)
    return revs[-1]["principal"] if revs else None
