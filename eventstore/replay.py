"""Replay: the log from a sequence number on, applied to the read models a
batch of decoded events at a time (:meth:`Projector.apply`: the same
read models however the log is cut into batches)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice

from . import codec
from .bulk import settle
from .events import Event
from .transaction import Projector, Tx, WriteTx

PROGRESS_EVERY = 2000             # events between two progress reports
BATCH = 500                       # events handed to the projector at once (divides the above)


def batches(tx: Tx, start: int, size: int = BATCH) -> Iterator[list[tuple[int, Event, int]]]:
    """The log from ``start`` on as ``(seq, event, encoded size)``, ``size`` at a time."""
    decode, seq_of = codec.decode_event, codec.seq_of
    with tx.txn.cursor(db=tx.db("events")) as cur:
        if not cur.set_range(codec.seq_key(start)):
            return
        records = cur.iternext()
        while chunk := list(islice(records, size)):
            yield [(seq_of(key), decode(raw), len(raw)) for key, raw in chunk]


def apply_log(projector: Projector, w: WriteTx, start: int, total: int,
              progress: Callable[[int, int], None] | None = None) -> int:
    """Apply the log from ``start`` on; returns the events applied.
    ``progress(done, total)`` every :data:`PROGRESS_EVERY` events and at the end."""
    done = 0
    for batch in batches(w, start):
        projector.apply(w, batch)
        settle()
        done += len(batch)
        if progress and done % PROGRESS_EVERY == 0:
            progress(done, total)
    if progress:
        progress(done, total)
    return done
