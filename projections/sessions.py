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


def _entry(tx: Tx, session_id: str) -> list:
    return get(tx, session_id) or [0, [0] * len(KINDS), None, None]


def _store(tx: Tx, session_id: str, entry: list, old_start: int | None) -> None:
    count, _, started, _ = entry
    key = session_id.encode("utf-8")
    if old_start != started or not count:
        if old_start is not None:
            tx.txn.delete(order_key(old_start, session_id), db=tx.db(ORDER))
        if count:
            tx.txn.put(order_key(started, session_id), b"", db=tx.db(ORDER))
    if count:
        tx.txn.put(key, codec.dumps(entry), db=tx.db(DB))
    else:
        tx.txn.delete(key, db=tx.db(DB))


def added(tx: Tx, session_id: str, message_id: str, timestamp: int, kind: str) -> None:
    """Count a message that ``history`` already lists under the session."""
    count, kinds, started, last = _entry(tx, session_id)
    kinds[KINDS.index(kind)] += 1
    first_id, last_id = history.first_last(tx, session_id)
    entry = [count + 1, kinds, timestamp if first_id == message_id else started,
             timestamp if last_id == message_id else last]
    _store(tx, session_id, entry, started)


def removed(tx: Tx, session_id: str, message_id: str, kind: str) -> None:
    """Uncount a message already gone from ``history`` and ``messages``."""
    count, kinds, started, last = _entry(tx, session_id)
    kinds[KINDS.index(kind)] -= 1
    ends = history.first_last(tx, session_id)
    if ends is None:
        _store(tx, session_id, [0, kinds, None, None], started)
        return
    first_id, last_id = ends        # ids sort like creation: an end moved iff it was removed
    entry = [count - 1, kinds,
             messages.timestamp(tx, first_id) if message_id < first_id else started,
             messages.timestamp(tx, last_id) if message_id > last_id else last]
    _store(tx, session_id, entry, started)


def rekinded(tx: Tx, session_id: str, old_kind: str, new_kind: str) -> None:
    entry = _entry(tx, session_id)
    entry[1][KINDS.index(old_kind)] -= 1
    entry[1][KINDS.index(new_kind)] += 1
    tx.txn.put(session_id.encode("utf-8"), codec.dumps(entry), db=tx.db(DB))


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
