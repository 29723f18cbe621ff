"""Compaction (``rebuild_index``): the log rewritten as one event per live message.

The compacted store is written into ``compact.tmp/`` beside the live file by
a second environment: its events carry the live messages' current state,
numbered so that they end at the old last sequence (which therefore never
goes back), and its meta carries the I/O counters (``replace_calls`` + 1),
the last id and the cursor secret; its read models are built by one bulk
replay after the events are in (each written once, densely).  Once synced,
``compact.tmp/data.mdb`` replaces ``data.mdb`` by one atomic ``rename``: a
crash before it leaves the old store whole (the leftover directory is removed
on the next open), a crash after it the new one.  Freed pages of the old file, and with them the bytes of
deleted and superseded text, go with the old file.

The caller (:meth:`EventStore.compact`) holds the store alone.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

from . import codec
from .errors import ConvMemError, CorruptStoreError, translate
from .events import Event
from .store import (
    _BATCH,
    _CARRIED,
    COMPACT_DIR,
    DATA_FILE,
    EventStore,
    WriteTx,
    _fsync_path,
    _make_private_dir,
    _put_int,
)


def compact(store: EventStore, live) -> dict[str, int]:
    """Compact ``store``, which this process holds alone."""
    tmp = os.path.join(store.path, COMPACT_DIR)
    bytes_before = store.file_size()
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        _make_private_dir(tmp)
        with store.read() as tx:
            old_last = store._last_seq(tx.txn)
            records = tx.txn.stat(tx.db("events"))["entries"]
            io = store.io_counters(tx.txn)
            carried = {k: tx.txn.get(k, db=tx.db("meta")) for k in _CARRIED}
            count, events = live(tx)
            written = _write_fresh(store, tmp, old_last, count, events, io, carried)
        _fsync_path(os.path.join(tmp, DATA_FILE))
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, ConvMemError) or not isinstance(exc, Exception):
            raise
        raise translate(exc, "compacting the store") from exc
    _swap_in(store, tmp)
    return {"messages_indexed": written, "records_removed": records - written,
            "bytes_before": bytes_before, "bytes_after": store.file_size()}


def _write_fresh(store: EventStore, tmp: str, old_last: int, count: int, events: Iterable[Event],
                 io: dict[str, int], carried: dict[bytes, bytes | None]) -> int:
    """Write the compacted store into ``tmp``: its events end at ``old_last``."""
    fresh = EventStore.__new__(EventStore)
    fresh._setup(tmp, store.projector, store.clock, store.rng, store._env.info()["map_size"])
    fresh._open_env(lock=False)     # no lock.mdb: a sparse mmap that SIGBUSes on a full disk
    try:
        fresh._run(fresh._initialize, "compacting the store")
        floor = lambda w, n: _put_int(w.txn, w.db("meta"), b"seq_floor", n)
        fresh._run(lambda w: floor(w, old_last - count), "compacting the store")
        written, batch = 0, []
        for event in events:
            batch.append(event)
            if len(batch) == _BATCH:
                written += fresh._run(lambda w: _append_all(w, batch), "compacting the store")
                batch = []
        written += fresh._run(lambda w: _append_all(w, batch), "compacting the store")
        if written != count:
            raise CorruptStoreError("compaction found a different number of live messages than counted")
        fresh.rebuild_projections()     # one bulk pass: every read model written once, packed

        def finish(w: WriteTx) -> None:
            w.txn.put(b"io", codec.dumps(dict(io, replace_calls=io["replace_calls"] + 1)),
                      db=w.db("meta"))
            floor(w, old_last)
            w.watermark = old_last
            for k, v in carried.items():
                if v is not None:
                    w.txn.put(k, v, db=w.db("meta"))
        fresh._run(finish, "compacting the store")
        fresh._env.sync(True)
        return written
    finally:
        fresh.close()


def _append_all(w: WriteTx, events: list[Event]) -> int:
    for event in events:
        w.append(event, project=False)
    return len(events)


def _swap_in(store: EventStore, tmp: str) -> None:
    """Close, atomically replace data.mdb by the compacted file, reopen."""
    with store._guard.exclusive():
        store._env.close()
        store._env = None
        try:
            os.replace(os.path.join(tmp, DATA_FILE), os.path.join(store.path, DATA_FILE))
            _fsync_path(store.path)
            shutil.rmtree(tmp, ignore_errors=True)
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            store._open_env()     # the old file is still in place
            raise translate(exc, "replacing the store file") from exc
        try:
            store._open_env()
        except Exception as exc:
            raise translate(exc, "reopening the compacted store") from exc
