"""Read model: one entry per session with at least one live message.

``sessions``: ``session_id`` → CBOR ``[message_count, kind_counts[6],
started_at, last_message_at]`` (:class:`SessionEntry`).  ``session_order``:
8-byte ``started_at`` + ``session_id`` → empty, the stable order of the
sessions view.  The representative summary is not stored: it is read from the
session's latest live message (the last key of its history range) when asked
for.

Within a write transaction each touched entry is decoded once and kept, with
the id of its newest message, in the transaction's :class:`OpenSessions`, so
a message newer than that needs no history lookup; the entry is written once,
when the transaction flushes (at once when it is created or deleted, so the
entry count is right).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from eventstore import codec
from eventstore.errors import CorruptStoreError, decoding
from eventstore.events import KINDS, Message
from eventstore.memo import Memo
from eventstore.store import Tx

from . import history, messages

DB = "sessions"
ORDER = "session_order"
SPECS: dict[str, dict] = {DB: {}, ORDER: {}}
_TS = struct.Struct(">Q")


class SessionEntry(NamedTuple):
    message_count: int
    kind_counts: list[int]        # per kind, in ``KINDS`` order
    started_at: int | None        # None only while an entry is being emptied
    last_message_at: int | None

    def encode(self) -> bytes:
        """The entry's bytes; it is remembered by them, as the session's next
        write reads them back (:meth:`decode`)."""
        raw = codec.dumps(list(self))
        count, kinds, started, last = self
        if started is not None and last is not None:
            _WRITTEN.keep(raw, (count, tuple(kinds), started, last))
        return raw

    @classmethod
    def decode(cls, raw: bytes) -> SessionEntry:
        """The entry stored as ``raw``: one this process encoded is rebuilt from
        what it was made of, without decoding (its kind counts a list of its own)."""
        known = _WRITTEN.get(raw)
        if known is not None:
            return cls(known[0], list(known[1]), known[2], known[3])
        value = codec.loads(raw)
        if not (type(value) is list and len(value) == 4):
            raise CorruptStoreError("a session record is not a list of four fields")
        count, kinds, started, last = value
        if not (type(count) is int and type(kinds) is list and len(kinds) == len(KINDS)
                and all(type(k) is int for k in kinds) and type(started) is int and type(last) is int):
            raise CorruptStoreError("a session record has a field of the wrong type")
        return cls(count, kinds, started, last)


_EMPTY = SessionEntry(0, [0] * len(KINDS), None, None)
_WRITTEN: Memo[bytes, tuple[int, tuple[int, ...], int, int]] = Memo(4096)     # bytes encoded here → their entry


@dataclass(slots=True)
class _Open:
    """An entry being changed in a write transaction, with the id of the
    session's newest message (None until known)."""

    entry: SessionEntry
    newest: str | None = None


class OpenSessions:
    """The session entries one write transaction has changed, written at its flush."""

    def __init__(self) -> None:
        self.opened: dict[str, _Open] = {}
        self.unwritten: dict[bytes, _Open] = {}     # key → entry to write at the flush

    def open(self, tx: Tx, session_id: str) -> _Open:
        opened = self.opened.get(session_id)
        if opened is None:
            raw = tx.txn.get(session_id.encode("utf-8"), db=tx.db(DB))
            entry = SessionEntry.decode(raw) if raw is not None else _EMPTY._replace(kind_counts=[0] * len(KINDS))
            opened = self.opened[session_id] = _Open(entry)
        return opened

    def flush(self, tx: Tx) -> None:
        handle = tx.db(DB)
        for key, opened in self.unwritten.items():
            tx.txn.put(key, opened.entry.encode(), db=handle)
        self.unwritten.clear()


def get(tx: Tx, session_id: str, changes: OpenSessions | None = None) -> SessionEntry | None:
    """A session's entry (as ``changes`` has it, when this write transaction changed it)."""
    opened = changes.opened.get(session_id) if changes is not None else None
    if opened is not None:
        entry = opened.entry
        return entry._replace(kind_counts=list(entry.kind_counts)) if entry.message_count else None
    raw = tx.txn.get(session_id.encode("utf-8"), db=tx.db(DB))
    return None if raw is None else SessionEntry.decode(raw)


def order_key(started_at: int, session_id: str) -> bytes:
    return _TS.pack(started_at) + session_id.encode("utf-8")


def split_order_key(k: bytes) -> tuple[int, str]:
    """(started_at, session_id) of a ``session_order`` key; ``CORRUPT_STORE`` if damaged."""
    with decoding("a session order key"):
        return _TS.unpack(k[:8])[0], k[8:].decode("utf-8")


def _store(tx: Tx, changes: OpenSessions, session_id: str, opened: _Open, old_count: int,
           old_start: int | None) -> None:
    count, _, started, _ = opened.entry
    key = session_id.encode("utf-8")
    if old_start != started or not count:
        if old_start is not None:
            tx.txn.delete(order_key(old_start, session_id), db=tx.db(ORDER))
        if count and started is not None:
            tx.txn.put(order_key(started, session_id), b"", db=tx.db(ORDER))
    if not count:
        changes.unwritten.pop(key, None)          # a put at the flush must not bring it back
        tx.txn.delete(key, db=tx.db(DB))
        return
    if not old_count:
        tx.txn.put(key, opened.entry.encode(), db=tx.db(DB))
    changes.unwritten[key] = opened


def added(tx: Tx, changes: OpenSessions, session_id: str, written: list[Message]) -> None:
    """Count messages of the session, in log order, that ``history`` already
    lists.  When each is newer than the newest this transaction knows of the
    session (a replay's, an import's, a live write's usual case), only the
    count and the end move; else the session's ends are read from ``history``
    (an end moved iff it is one of ``written``: the same entry as counting
    them one at a time)."""
    opened = changes.open(tx, session_id)
    count, kinds, started, last = opened.entry
    for msg in written:
        kinds[KINDS.index(msg.metadata.memory_kind)] += 1
    if count and opened.newest is not None and _newer_in_turn(opened.newest, written):
        opened.entry = SessionEntry(count + len(written), kinds, started, written[-1].timestamp)
        opened.newest = written[-1].message_id
        changes.unwritten[session_id.encode("utf-8")] = opened
        return
    ends = history.first_last(tx, session_id)
    if ends is None:
        raise CorruptStoreError("history does not list the messages just written")
    first_id, last_id = ends
    times = {msg.message_id: msg.timestamp for msg in written}
    opened.entry = SessionEntry(count + len(written), kinds, times.get(first_id, started),
                                times.get(last_id, last))
    opened.newest = last_id
    _store(tx, changes, session_id, opened, count, started)


def _newer_in_turn(newest: str, written: list[Message]) -> bool:
    """Whether each of ``written`` has a greater id than the one before it, the first than ``newest``."""
    for msg in written:
        if not msg.message_id > newest:
            return False
        newest = msg.message_id
    return True


def removed(tx: Tx, changes: OpenSessions, session_id: str, message_id: str, kind: str) -> None:
    """Uncount a message already gone from ``history`` and ``messages``."""
    opened = changes.open(tx, session_id)
    count, kinds, started, last = opened.entry
    kinds[KINDS.index(kind)] -= 1
    ends = history.first_last(tx, session_id)
    if ends is None:
        opened.entry, opened.newest = SessionEntry(0, kinds, None, None), None
        _store(tx, changes, session_id, opened, count, started)
        return
    first_id, last_id = ends        # ids sort like creation: an end moved iff it was removed
    opened.entry = SessionEntry(count - 1, kinds,
                                messages.timestamp(tx, first_id) if message_id < first_id else started,
                                messages.timestamp(tx, last_id) if message_id > last_id else last)
    opened.newest = last_id
    _store(tx, changes, session_id, opened, count, started)


def rekinded(tx: Tx, changes: OpenSessions, session_id: str, old_kind: str, new_kind: str) -> None:
    opened = changes.open(tx, session_id)
    kinds = opened.entry.kind_counts
    kinds[KINDS.index(old_kind)] -= 1
    kinds[KINDS.index(new_kind)] += 1
    changes.unwritten[session_id.encode("utf-8")] = opened


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
