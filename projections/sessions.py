"""Read model: one entry per session with at least one live message.

``sessions``: ``session_id`` → CBOR ``[message_count, kind_counts[6],
started_at, last_message_at]``.  ``session_order``: 8-byte ``started_at`` +
``session_id`` → empty, the stable order of the sessions view.  The
representative summary is not stored: it is read from the session's latest
live message (the last key of its history range) when asked for.
"""

from __future__ import annotations

import struct
from typing import Iterator

from eventstore import codec
from eventstore.events import KINDS
from eventstore.store import Tx

from . import history, messages

DB = "sessions"
ORDER = "session_order"
SPECS = {DB: {}, ORDER: {}}
_TS = struct.Struct(">Q")


def get(tx: Tx, session_id: str) -> list | None:
    raw = tx.txn.get(session_id.encode("utf-8"), db=tx.db(DB))
    return None if raw is None else codec.loads(raw)


def order_key(started_at: int, session_id: str) -> bytes:
    return _TS.pack(started_at) + session_id.encode("utf-8")


def split_order_key(k: bytes) -> tuple[int, str]:
    return _TS.unpack(k[:8])[0], k[8:].decode("utf-8")


def changed(tx: Tx, session_id: str, kind_delta: dict[str, int]) -> None:
    """Recount after a message of the session was added, removed or re-kinded."""
    entry = get(tx, session_id) or [0, [0] * len(KINDS), None, None]
    count, kinds, old_start, _ = entry
    for kind, delta in kind_delta.items():
        kinds[KINDS.index(kind)] += delta
        count += delta
    ends = history.first_last(tx, session_id)
    key = session_id.encode("utf-8")
    if old_start is not None:
        tx.txn.delete(order_key(old_start, session_id), db=tx.db(ORDER))
    if ends is None:
        tx.txn.delete(key, db=tx.db(DB))
        return
    started, last = (_timestamp(tx, mid) for mid in ends)
    tx.txn.put(key, codec.dumps([count, kinds, started, last]), db=tx.db(DB))
    tx.txn.put(order_key(started, session_id), b"", db=tx.db(ORDER))


def _timestamp(tx: Tx, message_id: str) -> int:
    state = messages.get(tx, message_id)
    return state.timestamp


def ordered(tx: Tx, after_key: bytes | None) -> Iterator[tuple[bytes, str]]:
    """(order key, session id) in (started_at, session_id) order after ``after_key``."""
    with tx.txn.cursor(db=tx.db(ORDER)) as cur:
        found = cur.set_range(after_key + b"\x00") if after_key else cur.first()
        if not found:
            return
        for k in cur.iternext(values=False):
            yield k, split_order_key(k)[1]


def count(tx: Tx) -> int:
    return tx.txn.stat(tx.db(DB))["entries"]
