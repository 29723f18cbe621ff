"""Compaction (``rebuild_index``): the log rewritten as one event per live message.

The compacted store is written into ``compact.tmp/`` beside the live file by
a second, private store: its events carry the live messages' current state,
numbered so that they end at the old last sequence (which therefore never
goes back), and its meta carries the I/O counters (``replace_calls`` + 1),
the last id and the cursor secret; its read models are built by one bulk
replay after the events are in (each written once, densely).  Once synced,
``compact.tmp/data.mdb`` replaces ``data.mdb`` by one atomic ``rename``: a
crash before it leaves the old store whole (the leftover directory is removed
on the next open), a crash after it the new one.  Freed pages of the old
file, and with them the bytes of deleted and superseded text, go with the old
file.

Built on the public API of :class:`~eventstore.store.EventStore` only.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from functools import partial

from . import files
from .errors import BusyError, ConvMemError, CorruptStoreError, translate
from .events import Event
from .store import COMPACT_DIR, DATA_FILE, EventStore, Tx, WriteTx

BATCH = 2000                         # events per transaction when writing the compacted file
ACTION = "compacting the store"


def compact(store: EventStore, live: Callable[[Tx], tuple[int, Iterable[Event]]]) -> dict[str, int]:
    """Rewrite the log of ``store`` as one event per live message into a fresh file.

    ``live(tx)`` returns the number of live messages and an iterator of
    re-materialized events.  Needs the store alone (``BUSY`` otherwise).
    """
    with store.alone() as alone:
        if not alone:
            raise BusyError("rebuild_index needs the store alone: another process has it open")
        return _compact(store, live)


def _compact(store: EventStore, live) -> dict[str, int]:
    tmp = os.path.join(store.path, COMPACT_DIR)
    bytes_before = store.file_size()
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        records, written = _translated(lambda: _write_compacted(store, tmp, live), ACTION)
        _translated(lambda: store.replace_data_file(os.path.join(tmp, DATA_FILE)), "replacing the store file")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"messages_indexed": written, "records_removed": records - written,
            "bytes_before": bytes_before, "bytes_after": store.file_size()}


def _translated(fn: Callable[[], object], action: str):
    try:
        return fn()
    except ConvMemError:
        raise
    except Exception as exc:
        raise translate(exc, action) from exc


def _write_compacted(store: EventStore, tmp: str, live) -> tuple[int, int]:
    """The compacted store written and synced in ``tmp``: (events in the old log, events written)."""
    with store.read() as tx:
        old_last, records = store.last_sequence(tx), store.event_count(tx)
        io, carried = store.io_counters(tx.txn), store.carried_meta(tx)
        count, events = live(tx)
        with EventStore(tmp, store.projector, clock=store.clock, rng=store.rng,
                        map_size=store.map_size, private=True) as fresh:
            written = _write(fresh, old_last, count, events)
            _finish(fresh, old_last, dict(io, replace_calls=io["replace_calls"] + 1), carried)
    files.fsync_path(os.path.join(tmp, DATA_FILE))
    return records, written


def _write(fresh: EventStore, old_last: int, count: int, events: Iterable[Event]) -> int:
    """The events into ``fresh``, numbered to end at ``old_last``; then its read models."""
    fresh.maintain(lambda w: fresh.set_sequence_floor(w, old_last - count), ACTION)
    written, batch = 0, []
    for event in events:
        batch.append(event)
        if len(batch) == BATCH:
            written += fresh.maintain(partial(_append_all, events=batch), ACTION)
            batch = []
    written += fresh.maintain(partial(_append_all, events=batch), ACTION)
    if written != count:
        raise CorruptStoreError("compaction found a different number of live messages than counted")
    fresh.rebuild_projections()     # one bulk pass: every read model written once, packed
    return written


def _finish(fresh: EventStore, old_last: int, io: dict[str, int], carried: dict[bytes, bytes]) -> None:
    def finish(w: WriteTx) -> None:
        fresh.set_io_counters(w, io)
        fresh.set_sequence_floor(w, old_last)
        fresh.set_watermark(w, old_last)
        fresh.restore_meta(w, carried)
    fresh.maintain(finish, ACTION)
    fresh.sync()


def _append_all(w: WriteTx, events: list[Event]) -> int:
    w.append(events, project=False)
    return len(events)
