"""Read model: each session's live messages in id (= creation) order.

``history``: ``session_id`` UTF-8 + NUL + 16-byte id → empty.  Session ids
never contain NUL, so one session's keys are one contiguous range: paging and
before/after neighbours are cursor range scans.
"""

from __future__ import annotations

from collections.abc import Iterator

from eventstore.errors import CorruptStoreError
from eventstore.events import Message
from eventstore.ids import to_bytes, to_str
from eventstore.store import Tx

DB = "history"
SPECS: dict[str, dict] = {DB: {}}


def _prefix(session_id: str) -> bytes:
    return session_id.encode("utf-8") + b"\x00"


def key(session_id: str, message_id: str) -> bytes:
    return _prefix(session_id) + to_bytes(message_id)


def _message_id(k: bytes, prefix: bytes) -> str:
    """The message id ending ``k``, a history key that starts with ``prefix``."""
    if len(k) != len(prefix) + 16:
        raise CorruptStoreError("a history key does not end in a 16-byte message id")
    return to_str(k[len(prefix):])


def add(tx: Tx, written: list[Message]) -> None:
    """List each of ``written`` under its session, in one call."""
    if written:
        with tx.txn.cursor(db=tx.db(DB)) as cur:
            cur.putmulti([(key(m.session_id, m.message_id), b"") for m in written])


def remove(tx: Tx, session_id: str, message_id: str) -> None:
    tx.txn.delete(key(session_id, message_id), db=tx.db(DB))


def after(tx: Tx, session_id: str, message_id: str | None, limit: int) -> Iterator[str]:
    """Ids of the session strictly after ``message_id`` (from the start if None)."""
    prefix = _prefix(session_id)
    start = prefix if message_id is None else key(session_id, message_id) + b"\x00"
    with tx.txn.cursor(db=tx.db(DB)) as cur:
        if not cur.set_range(start):
            return
        for n, k in enumerate(cur.iternext(values=False)):
            if n >= limit or not k.startswith(prefix):
                return
            yield _message_id(k, prefix)


def before(tx: Tx, session_id: str, message_id: str, limit: int) -> list[str]:
    """Up to ``limit`` ids just before ``message_id``, oldest first."""
    prefix = _prefix(session_id)
    found: list[str] = []
    with tx.txn.cursor(db=tx.db(DB)) as cur:
        positioned = cur.prev() if cur.set_range(key(session_id, message_id)) else cur.last()
        while positioned and len(found) < limit:
            k = cur.key()
            if not k.startswith(prefix):
                break
            found.append(_message_id(k, prefix))
            positioned = cur.prev()
    return found[::-1]


def first_last(tx: Tx, session_id: str) -> tuple[str, str] | None:
    prefix = _prefix(session_id)
    with tx.txn.cursor(db=tx.db(DB)) as cur:
        if not cur.set_range(prefix) or not cur.key().startswith(prefix):
            return None
        first = _message_id(cur.key(), prefix)
        if not cur.set_range(session_id.encode("utf-8") + b"\x01"):
            cur.last()
        else:
            cur.prev()
        return first, _message_id(cur.key(), prefix)
