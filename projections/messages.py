"""Read model: the current state of every live message.

``messages``: 16-byte id → CBOR state.  The state holds metadata and the
sequence number of the event that carries the current content (``c``), never
a copy of the content itself.  ``d`` is the document number: the sequence of
the event that created the message in this log, used by the other indexes.
A deleted message has no state.

A message never updated since its ``MessageWritten`` event (every message, after
a compaction) is stored as just its document number, a CBOR int: its whole state
is a function of that event, so it is read from there (most reads need the event
for the content anyway).  An updated message stores the whole state, a CBOR list.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import Event, Message, MessageUpdated, MessageWritten, Metadata
from eventstore.ids import to_bytes
from eventstore.store import Tx

DB = "messages"
SPECS: dict[str, dict] = {DB: {}}


@dataclass(frozen=True)
class State:
    message_id: str
    docno: int
    content_seq: int
    session_id: str
    role: str
    timestamp: int
    updated_at: int
    revision: int
    metadata: Metadata
    content_bytes: int
    log_bytes: int        # encoded bytes of this message's events in the log
    dead_counted: bool    # whether those bytes already count as dead
    text: str | None = field(default=None, compare=False, repr=False)   # the content, if read already

    @property
    def plain(self) -> bool:
        """True while the state is what its ``MessageWritten`` event alone gives."""
        return not self.dead_counted and self.content_seq == self.docno


def _encode(s: State) -> bytes:
    if s.plain:
        return codec.dumps_int(s.docno)
    return codec.dumps([s.docno, s.content_seq, s.session_id, s.role, s.timestamp,
                        s.updated_at, s.revision, codec.metadata_to_list(s.metadata),
                        s.content_bytes, s.log_bytes, s.dead_counted])


def _event(tx: Tx, seq: int) -> tuple[Event, int]:
    raw = tx.txn.get(codec.seq_key(seq), db=tx.db("events"))
    if raw is None:
        raise CorruptStoreError("a message points at an event missing from the log")
    return codec.decode_event(raw), len(raw)


_STATE_FIELDS = 11          # the fields of a stored state list (see :func:`_encode`)


def _decode(tx: Tx, message_id: str, raw: bytes) -> State:
    value = codec.loads(raw)
    if type(value) is int:
        return _plain(tx, message_id, value)
    if not (type(value) is list and len(value) == _STATE_FIELDS):
        raise CorruptStoreError("a message record is neither a document number nor a state")
    d, c, sess, role, ts, upd, rev, meta, nbytes, lb, dc = value
    if not (all(type(n) is int for n in (d, c, ts, upd, rev, nbytes, lb))
            and isinstance(sess, str) and isinstance(role, str) and isinstance(dc, bool)):
        raise CorruptStoreError("a message record has a field of the wrong type")
    return State(message_id, d, c, sess, role, ts, upd, rev, codec.metadata_from_list(meta), nbytes, lb, dc)


def _plain(tx: Tx, message_id: str, docno: int) -> State:
    """The state of a message stored as its document number: its ``MessageWritten`` event's."""
    if not 0 < docno < 1 << 64:
        raise CorruptStoreError("a message record's document number is out of range")
    event, size = _event(tx, docno)
    if not isinstance(event, MessageWritten) or event.message.message_id != message_id:
        raise CorruptStoreError("a message record points at another message's event")
    return from_written(docno, event, size)


def get(tx: Tx, message_id: str) -> State | None:
    raw = tx.txn.get(to_bytes(message_id), db=tx.db(DB))
    return None if raw is None else _decode(tx, message_id, raw)


def get_raw_id(tx: Tx, raw_id: bytes, message_id: str) -> State | None:
    raw = tx.txn.get(raw_id, db=tx.db(DB))
    return None if raw is None else _decode(tx, message_id, raw)


def exists(tx: Tx, message_id: str) -> bool:
    """Whether the message is live (without reading its state)."""
    return tx.txn.get(to_bytes(message_id), db=tx.db(DB)) is not None


def timestamp(tx: Tx, message_id: str) -> int:
    """The creation timestamp of a live message."""
    return required(get(tx, message_id)).timestamp


def put(tx: Tx, state: State) -> None:
    tx.txn.put(to_bytes(state.message_id), _encode(state), db=tx.db(DB))


def put_written(tx: Tx, written: list[tuple[int, Message]]) -> None:
    """The state of each ``(docno, message)`` just written (what :func:`from_written`
    gives): its document number alone, appended (a new message has the greatest id)."""
    dumps_int = codec.dumps_int
    tx.put_last(DB, [(to_bytes(m.message_id), dumps_int(docno)) for docno, m in written])


def remove(tx: Tx, message_id: str) -> None:
    tx.txn.delete(to_bytes(message_id), db=tx.db(DB))


def content(tx: Tx, state: State) -> str:
    """The current content, read from the event that carries it."""
    if state.text is not None:
        return state.text
    event, _ = _event(tx, state.content_seq)
    if isinstance(event, MessageWritten) and event.message.message_id == state.message_id:
        return event.message.content
    if isinstance(event, MessageUpdated) and event.message_id == state.message_id and event.content is not None:
        return event.content
    raise CorruptStoreError("a message record points at an event that does not carry its content")


def written_event(tx: Tx, state: State) -> MessageWritten:
    """The ``MessageWritten`` event that made the message (at its docno in the log)."""
    event, _ = _event(tx, state.docno)
    if not (isinstance(event, MessageWritten) and event.message.message_id == state.message_id):
        raise CorruptStoreError("a message record's docno is not the event that wrote it")
    return event


def required(state: State | None) -> State:
    """``state``, which an index said exists (None: its record is missing)."""
    if state is None:
        raise CorruptStoreError("an index lists a message whose record is missing")
    return state


def load(tx: Tx, state: State | None) -> Message:
    """The whole message; ``state`` None means an index pointed at a missing record."""
    state = required(state)
    return Message(state.message_id, state.session_id, state.role, content(tx, state),
                   state.timestamp, state.updated_at, state.revision, state.metadata)


def without_content(state: State) -> Message:
    """The message with an empty content: for index work that leaves content alone."""
    return Message(state.message_id, state.session_id, state.role, "", state.timestamp,
                   state.updated_at, state.revision, state.metadata)


def from_written(seq: int, event: MessageWritten, size: int) -> State:
    m = event.message
    return State(m.message_id, seq, seq, m.session_id, m.role, m.timestamp, m.updated_at,
                 m.revision, m.metadata, len(m.content.encode("utf-8")), size, False, m.content)


def after_update(old: State, seq: int, event: MessageUpdated, size: int) -> State:
    new = replace(old, revision=event.revision, updated_at=event.updated_at, metadata=event.metadata,
                  log_bytes=old.log_bytes + size, dead_counted=True)
    if event.content is None:
        return new
    return replace(new, content_seq=seq, content_bytes=len(event.content.encode("utf-8")), text=event.content)


DAY_MS = 86_400_000


def per_day(tx: Tx, days: int) -> dict[int, int]:
    """Live messages by UTC day (days since the epoch) of the time their id begins with — when
    they were written (an imported turn: its own time, where the id order allows) — for the
    ``days`` days up to the newest message's.

    Ids are time-ordered keys: one seek to the first of those days, then the keys from there
    (never a record) counted as one array.  For the browser's health chart."""
    import numpy as np  # as the ranker does: not at start-up
    with tx.txn.cursor(db=tx.db(DB)) as cur:
        if not cur.last():
            return {}
        first = (int.from_bytes(cur.key()[:6], "big") // DAY_MS - days + 1) * DAY_MS
        cur.set_range(max(first, 0).to_bytes(6, "big"))
        keys = b"".join(cur.iternext(values=False))
    stamps = np.zeros((len(keys) // 16, 8), dtype=np.uint8)
    stamps[:, 2:] = np.frombuffer(keys, dtype=np.uint8).reshape(-1, 16)[:, :6]
    day, count = np.unique(stamps.view(">u8").ravel() // DAY_MS, return_counts=True)
    return dict(zip(day.tolist(), count.tolist()))
