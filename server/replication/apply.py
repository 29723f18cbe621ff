"""Stream messages into the local store, exactly once.

The events of a batch are appended to the local log and projected by the
existing projectors in one write transaction, which also stores the stream
sequence reached (the store's ``repl_sequence``): a crash keeps all of it or
none of it, and a message at or below the stored sequence is skipped, so a
redelivery changes nothing.  The local log numbers events as the stream does
(this store's sequence is the stream's plus the generation's ``offset``, so
that it never goes back across generations), which is checked on every
transaction: a store written by something else than this node's replication
(another process writing without the stream) is refused, not silently forked.

Another process may write the same store *through* the stream — an import
into a served node's store (:func:`server.replication.open_visitor`): both
then apply the stream, so each transaction starts from the position stored
in the store (:func:`where`), not from the one its process last wrote, and
skips what the other process applied already.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from eventstore import codec, meta
from eventstore.bulk import settle
from eventstore.errors import CorruptStoreError
from eventstore.events import MessageWritten
from eventstore.ids import to_bytes
from eventstore.replay import BATCH
from eventstore.store import EventStore, Tx, WriteTx

from . import layout
from .layout import Record

ACTION = "applying the stream's events"


@dataclass(frozen=True)
class Position:
    """The generation this store follows, the last stream sequence it includes, and the
    offset of its local sequence numbers (local = ``offset`` + stream sequence)."""

    generation: int
    sequence: int
    offset: int = 0


def read_position(tx: Tx) -> Position | None:
    """None for a store that never followed a stream."""
    found = meta.stream_position(tx.txn, tx.db("meta"))
    return None if found is None else Position(*found)


def write_position(w: WriteTx, position: Position) -> None:
    meta.put_stream_position(w.txn, w.db("meta"), position.generation, position.sequence, position.offset)


def write_node(w: WriteTx, servers: tuple[str, ...], stream: str) -> None:
    """Record where this node's stream is (what an import into its store publishes to)."""
    meta.put_node_settings(w.txn, w.db("meta"), ",".join(servers), stream)


def check_aligned(store: EventStore, tx: Tx, position: Position, sealed: bool) -> None:
    """The local log ends where the stream position says (one less after a seal)."""
    last = store.last_sequence(tx)
    if last != position.offset + position.sequence - int(sealed):
        raise CorruptStoreError(f"the local log ends at {last} but the stream position is {position.sequence}: "
                                "the store was written outside replication; start this node on an empty store")


def where(store: EventStore, tx: Tx, position: Position, sealed: bool) -> tuple[Position, bool]:
    """Where the store is in the stream: ``position`` (``sealed``: at its seal), or further
    on in the same generation when another process of this store applied more; checked
    against the local log."""
    stored = read_position(tx)
    if stored is not None and stored.generation == position.generation and stored.sequence > position.sequence:
        position = stored
        sealed = store.last_sequence(tx) == stored.offset + stored.sequence - 1
    check_aligned(store, tx, position, sealed)
    return position, sealed


@dataclass
class Applied:
    """What one batch did: the new position, whether it met the seal, the event ids it carried."""

    position: Position
    sealed: bool = False
    ids: set[str] = field(default_factory=set)


def apply_records(store: EventStore, position: Position, sealed: bool, records: Sequence[Record]) -> Applied:
    """Append and project ``records`` (consecutive, starting right after ``position``, or
    before where the store is when another process applied them: those are skipped):
    many at once in bulk mode, each run of :data:`~eventstore.replay.BATCH` projected
    together, as a replay projects the log."""
    with store.read() as tx:
        at, at_seal = where(store, tx, position, sealed)
    if records and records[-1].seq <= at.sequence:      # all applied by another process: no write
        return Applied(at, at_seal)

    def body(w: WriteTx) -> Applied:
        at, at_seal = where(store, w, position, sealed)
        out, raws = _taken(Applied(at, at_seal), [r for r in records if r.seq > at.sequence])
        local, top = at.offset + at.sequence + 1, b""     # the first event's local sequence
        for start in range(0, len(raws), BATCH):
            if start:
                settle()            # a bulk apply: what the runs before keep alive, out of the collector's way
            run = raws[start:start + BATCH]
            events = [codec.decode_event(raw) for raw in run]
            if w.append(events, run) != local:
                raise CorruptStoreError("the local log and the stream number events differently")
            local += len(run)
            top = max([top, *(to_bytes(e.message.message_id) for e in events if isinstance(e, MessageWritten))])
        store.raise_last_id(w, top)         # new ids of this node stay after every id written anywhere
        if out.position != at:
            write_position(w, out.position)
        return out
    return store.maintain(body, ACTION, bulk=len(records) > 1)


def _taken(out: Applied, records: Sequence[Record]) -> tuple[Applied, list[bytes]]:
    """``out`` moved past ``records`` (checked consecutive from it), and their events' bytes."""
    seq, raws = out.position.sequence, []
    for record in records:
        if out.sealed:
            raise CorruptStoreError("the stream has messages after its seal")
        if record.seq != seq + 1:
            raise CorruptStoreError("stream messages are not consecutive")
        seq = record.seq
        if record.msg_id:
            out.ids.add(record.msg_id)
        if record.kind == layout.SEAL:
            out.sealed = True
            continue
        raws.append(record.data)
    out.position = replace(out.position, sequence=seq)
    return out, raws
