"""The event log on LMDB: one environment per store directory.

LMDB discipline, followed everywhere in this package:

* every transaction lives in a ``with`` block; read transactions are short;
* all writes of a process come from one thread (the caller's writer thread),
  and a thread never writes while it holds a read transaction;
* an environment is never used across ``fork()``;
* only named sub-databases are used; keys stay ≤ 511 bytes;
* ``MapFullError`` aborts the transaction, the map is grown once no
  transaction of this process is open, and the whole command is retried;
  ``MapResizedError`` (another process grew the map) is adopted with
  ``set_mapsize(0)`` the same way (see :mod:`eventstore.environment`);
* indexes hold ids and sequence numbers, never copies of content.

Sub-databases owned here: ``events`` (8-byte big-endian sequence → CBOR event)
and ``meta`` (see :mod:`eventstore.meta`).  The read models are owned by a
*projector* (:mod:`eventstore.transaction`), applied to every event inside the
transaction that appends it, so no reader ever sees one without the other.

Errors: :meth:`EventStore.read` and the write transactions translate what
LMDB and the OS raise (and CBOR that does not decode) into our tree; stored
bytes of the wrong shape are reported as ``CORRUPT_STORE`` by the code that
decodes them (:func:`eventstore.errors.decoding`); anything else is a bug and
is not taken for damage.

Several processes may open one store; each holds a shared ``flock`` for as
long as it is open, and compaction needs it exclusively (``BUSY`` otherwise).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import cbor2
import lmdb

from . import codec, files, meta, replay
from .bulk import bulk_work
from .environment import DATA_FILE, INITIAL_MAP, DbHandle, Environment
from .errors import ConvMemError, CorruptStoreError, StoreIOError, translate
from .events import Event
from .locks import DirectoryLock
from .meta import FORMAT_VERSION
from .transaction import Projector, Tx, TxState, WriteTx

__all__ = ["COMPACT_DIR", "DATA_FILE", "FORMAT_VERSION", "EventStore", "Projector", "Tx", "TxState", "WriteTx"]

COMPACT_DIR = "compact.tmp"
# what the storage itself raises; anything else inside a transaction is not damage
_STORAGE_ERRORS = (lmdb.Error, OSError, cbor2.CBORDecodeError)


log = logging.getLogger("convmem")
T = TypeVar("T")


class _Abandoned(Exception):
    """A command of a group failed after appending: the group is run again command by command."""


def _log_progress(done: int, total: int) -> None:
    log.info("rebuilding the read models: %d/%d events", done, total)


def _system_clock() -> int:
    return time.time_ns() // 1_000_000


class EventStore:
    """An open store directory.  Close it (or use ``with``) before reopening."""

    def __init__(self, path: str, projector: Projector, *, clock: Callable[[], int] = _system_clock,
                 rng: random.Random | None = None, map_size: int = INITIAL_MAP,
                 repair: bool = False, private: bool = False) -> None:
        """``repair=True`` (the replay tool) opens a store whose read models are
        ahead of its log or out of date without refusing or recovering it: the
        caller is about to rebuild them all with :meth:`rebuild_projections`.

        ``private=True`` opens a directory no other process ever sees (the
        fresh store compaction writes): no directory lock and no ``lock.mdb``
        (LMDB maps it sparse, and on a full disk that kills the process).
        """
        self.path = os.path.abspath(path)
        self.projector = projector
        self.clock = clock
        self.rng = rng or random.SystemRandom()
        self.recovered_tail = False
        self._repair = repair
        self._private = private
        specs = {"events": {}, "meta": {}, **projector.db_specs}
        self._env = Environment(self.path, specs, map_size, lock=not private)
        self._lock: DirectoryLock | None = None
        self._open()

    @property
    def _dbs(self) -> dict[str, DbHandle]:
        return self._env.dbs

    # ----------------------------------------------------------------- opening
    def _open(self) -> None:
        try:
            files.make_private_dir(self.path)
            if not self._private:
                self._lock = DirectoryLock(self.path)
                self._remove_leftover()
            self._env.open()
            self._verify_and_recover()
        except BaseException as exc:
            self.close()
            if isinstance(exc, ConvMemError):
                raise
            raise translate(exc, "opening the store") from exc

    def _remove_leftover(self) -> None:
        """Delete what an interrupted compaction left (only when alone)."""
        leftover = os.path.join(self.path, COMPACT_DIR)
        if os.path.exists(leftover):
            with self.alone() as alone:
                if alone:
                    shutil.rmtree(leftover)
                    self.recovered_tail = True

    def _verify_and_recover(self) -> None:
        with self.read() as tx:
            db = tx.db("meta")
            version = meta.find_int(tx.txn, db, b"format_version")
            last = self._last_seq(tx.txn)
            if version is None:
                if last:
                    raise CorruptStoreError("the store has events but no format version")
                fresh = True
            else:
                fresh = False
                if version != FORMAT_VERSION:
                    raise CorruptStoreError(
                        f"unsupported store format version {version} (expected {FORMAT_VERSION})")
                self._check_newest_event(tx)
                watermark = meta.get_int(tx.txn, db, b"watermark")
                built_by = (meta.get_int(tx.txn, db, b"schema_version"),
                            meta.find_text(tx.txn, db, b"fingerprint"))
                if watermark > last and not self._repair:
                    raise CorruptStoreError("projection watermark is ahead of the event log; "
                                            "run `convmem replay` to rebuild the read models")
        if fresh:
            self._run(self._initialize, "creating the store")
        elif self._repair:
            pass                      # the caller rebuilds every read model itself
        elif built_by != (self.projector.schema_version, self.projector.fingerprint):
            log.warning("the read models were built by other code (schema %s, %s); this code needs "
                        "schema %s, %s: rebuilding them from the log", built_by[0],
                        built_by[1] or "no fingerprint", self.projector.schema_version, self.projector.fingerprint)
            self.rebuild_projections(progress=_log_progress)
            self.recovered_tail = True
        elif watermark < last:
            self._run(lambda w: self._replay_into(w, watermark + 1), "replaying the log's tail")
            self.recovered_tail = True

    def _initialize(self, w: WriteTx) -> None:
        meta.initialize(w.txn, w.db("meta"), self.projector.schema_version, self.projector.fingerprint)

    # ------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def read(self) -> Iterator[Tx]:
        """A short read transaction (adopts a map grown by another process).

        What LMDB or the OS raise inside is translated (a transaction LMDB
        gave up on, after meeting a damaged page, is ``CORRUPT_STORE``);
        anything else passes through unchanged: damaged records are reported
        by their decoders, and any other exception is a bug, not damage.
        """
        try:
            with self._env.transaction(write=False) as txn:
                yield Tx(txn, self._dbs, self._env.caches)
        except lmdb.BadTxnError as exc:
            raise CorruptStoreError("reading the store: LMDB gave up on a damaged page "
                                    f"({type(exc).__name__}); run `convmem replay`") from exc
        except _STORAGE_ERRORS as exc:
            raise translate(exc, "reading the store") from exc

    def execute(self, command: Callable[[WriteTx], object], *, bulk: bool = False):
        """Run ``command`` in one durable write transaction and return its result.

        The command reads state, decides, and appends events; projectors,
        watermark and I/O counters are updated in the same transaction; the
        commit is synced before this returns.  On a full map the transaction
        is aborted, the map grown, and the command run again.

        ``bulk=True`` (an import appending many events at once) lets the
        projectors hold their work until the flush, as a replay does; the
        read models end with the same bytes as when each event is written
        in a transaction of its own.
        """
        return self._run(command, "writing to the store", count_io=True, bulk=bulk)

    def execute_many(self, commands: Sequence[Callable[[WriteTx], object]]) -> list[tuple[bool, object]]:
        """Group commit: run ``commands`` in order in one write transaction and one
        durable sync; ``(True, result)`` or ``(False, the ConvMemError)`` for each.

        Each command runs in a nested transaction: one that refuses (not found,
        conflict) before appending is undone alone, and later commands see the
        earlier ones' events.  A command that fails after appending, or a group
        the storage fails, is abandoned and every command run alone with
        :meth:`execute`: always what one writer running them in turn gives.
        """
        if len(commands) > 1:
            def group(w: WriteTx) -> list[tuple[bool, object]]:
                parent = w.txn
                return [self._nested(w, parent, c) for c in commands]
            for _ in range(64):
                try:
                    return self._transaction(group)
                except lmdb.MapFullError:
                    self._env.grow()
                except Exception:               # _Abandoned, or the storage failed the group
                    break
        return [self._alone(c) for c in commands]

    def _alone(self, command: Callable[[WriteTx], object]) -> tuple[bool, object]:
        try:
            return True, self.execute(command)
        except ConvMemError as exc:
            return False, exc

    def _nested(self, w: WriteTx, parent, command: Callable[[WriteTx], object]) -> tuple[bool, object]:
        before = len(w.appended)
        w.txn = self._env.child(parent)
        try:
            result = command(w)
            if len(w.appended) > before:
                self._count_io(w, w.appended[before:], first=before == 0)
        except ConvMemError as exc:
            w.txn.abort()
            if len(w.appended) != before:
                raise _Abandoned from exc
            return False, exc
        except BaseException:
            w.txn.abort()
            raise
        else:
            w.txn.commit()
            return True, result
        finally:
            w.txn = parent

    def maintain(self, fn: Callable[[WriteTx], object], action: str, *, bulk: bool = False):
        """Like :meth:`execute`, for maintenance (compaction, a replica applying
        the stream): not counted as a logical write; ``action`` names the work
        in error messages.  ``bulk``: as for :meth:`execute` (many events at once)."""
        return self._run(fn, action, bulk=bulk)

    def _run(self, fn: Callable[[WriteTx], object], action: str, count_io: bool = False, bulk: bool = False):
        """``fn`` in one write transaction, retried after growing a full map;
        ``count_io=False`` for maintenance (only commands are logical writes);
        ``bulk``: a bulk transaction (:class:`WriteTx`), run in :func:`bulk_work`.
        What LMDB and the OS raise is translated; any other exception (a bug)
        becomes ``INTERNAL_ERROR`` with it as the cause — never ``CORRUPT_STORE``."""
        def counted(w: WriteTx) -> object:
            result = fn(w)
            if count_io and w.appended:
                self._count_io(w, w.appended)
            return result
        with bulk_work(self._env) if bulk else contextlib.nullcontext():
            for _ in range(64):
                try:
                    return self._transaction(counted, bulk)
                except lmdb.MapFullError:
                    self._env.grow()
                except ConvMemError:
                    raise
                except Exception as exc:
                    raise translate(exc, action) from exc
        raise StoreIOError(f"{action}: the map could not grow enough")

    def _transaction(self, body: Callable[[WriteTx], T], bulk: bool = False) -> T:
        """``body`` in one synced write transaction, the projector state flushed before."""
        with self._env.transaction(write=True) as txn:
            w = WriteTx(txn, self._dbs, self._env.caches, store=self, bulk=bulk)
            try:
                result = body(w)
                w.flush()
            finally:
                w.ended()
        return result

    def _count_io(self, w: WriteTx, appended: list[tuple[int, int]], first: bool = True) -> None:
        """One logical write of ``appended``; a flush for the first of a commit's writes."""
        io = self.io_counters(w.txn)
        io["write_calls"] += 1
        io["write_bytes"] += sum(size for _, size in appended)
        io["flush_calls"] += int(first)
        self.set_io_counters(w, io)

    # ------------------------------------------------------------------ reads
    def _last_seq(self, txn) -> int:
        """The newest sequence number; never goes back, compaction included."""
        floor = meta.get_int(txn, self._dbs["meta"], b"seq_floor")
        with txn.cursor(db=self._dbs["events"]) as cur:
            return max(codec.seq_of(cur.key()) if cur.last() else 0, floor)

    def _check_newest_event(self, tx: Tx) -> None:
        with tx.txn.cursor(db=tx.db("events")) as cur:
            if cur.last():
                codec.decode_event(cur.value())

    def last_sequence(self, tx: Tx) -> int:
        return self._last_seq(tx.txn)

    def event_count(self, tx: Tx) -> int:
        """Events in the log (fewer than :meth:`last_sequence` after a compaction)."""
        return tx.txn.stat(tx.db("events"))["entries"]

    def format_version(self, tx: Tx) -> int:
        """The format version the store was written in (checked when it opened)."""
        return meta.get_int(tx.txn, tx.db("meta"), b"format_version", FORMAT_VERSION)

    def secret(self, tx: Tx) -> bytes:
        """A random per-store key (for signing cursors); stable across compaction."""
        return bytes(tx.txn.get(b"secret", db=tx.db("meta")) or b"")

    def watermark(self, tx: Tx) -> int:
        return meta.get_int(tx.txn, tx.db("meta"), b"watermark")

    def io_counters(self, txn) -> dict[str, int]:
        return meta.io_counters(txn, self._dbs["meta"])

    def iter_events(self, tx: Tx, start: int = 1) -> Iterator[tuple[int, Event, int]]:
        for batch in replay.batches(tx, start):
            yield from batch

    def db_bytes(self, tx: Tx, name: str) -> int:
        st = tx.txn.stat(tx.db(name))
        return (st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]) * st["psize"]

    def file_size(self) -> int:
        try:
            return os.path.getsize(os.path.join(self.path, DATA_FILE))
        except OSError:
            return 0

    @property
    def map_size(self) -> int:
        return self._env.map_size

    def used_bytes(self) -> int:
        """Bytes of the data file up to the highest page in use (the file may be longer)."""
        return self._env.used_bytes()

    # ------------------------------------------------------------------ meta
    def carried_meta(self, tx: Tx) -> dict[bytes, bytes]:
        """The meta a compacted copy keeps besides the counters (see :meth:`restore_meta`)."""
        return meta.carried(tx.txn, tx.db("meta"))

    def restore_meta(self, w: WriteTx, carried: dict[bytes, bytes]) -> None:
        meta.put_all(w.txn, w.db("meta"), carried)

    def raise_last_id(self, w: WriteTx, top: bytes) -> None:   # ``top``: an id given (an export's, a node's)
        meta.raise_last_id(w.txn, w.db("meta"), top)

    def caller_values(self, tx: Tx, prefix: bytes) -> dict[bytes, bytes]:
        """A caller's own values in the meta: those whose keys start with ``prefix`` (under ``follow/``)."""
        return meta.caller_values(tx.txn, tx.db("meta"), prefix)

    def set_caller_value(self, w: WriteTx, key: bytes, value: bytes) -> None:
        """Keep ``value`` under ``key`` (``follow/…``) in this transaction."""
        meta.put_caller_value(w.txn, w.db("meta"), key, value)

    def set_io_counters(self, w: WriteTx, io: dict[str, int]) -> None:
        meta.put_io_counters(w.txn, w.db("meta"), io)

    def set_sequence_floor(self, w: WriteTx, seq: int) -> None:
        """The last sequence is at least ``seq`` from now on (even without events)."""
        meta.put_int(w.txn, w.db("meta"), b"seq_floor", seq)

    def set_watermark(self, w: WriteTx, seq: int) -> None:
        """The read models are up to date with the log up to ``seq`` (written at the flush)."""
        w.watermark = seq

    # ----------------------------------------------------------------- replay
    def rebuild_projections(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Drop every read model and rebuild it from the log alone.

        One write transaction: readers see the old read models or the new
        ones, and no other writer can interleave events with the replay.
        """
        def rebuild(w: WriteTx) -> int:
            for name in self.projector.db_specs:
                w.txn.drop(w.db(name), delete=False)
            self._env.drop_unknown(w.txn)   # an older schema's (may hold deleted text)
            meta.put_projection(w.txn, w.db("meta"), self.projector.schema_version, self.projector.fingerprint)
            return self._replay_into(w, 1, progress)
        # bulk: projectors may hold their work until the flush, and there is room
        # for the old read models too (they stay until the commit)
        done = self._run(rebuild, "rebuilding the read models", bulk=True)
        self._env.caches.invalidate()       # nothing kept of the old read models
        return done

    def _replay_into(self, w: WriteTx, start: int, progress=None) -> int:
        """Apply the log from ``start`` on; the watermark ends at the last sequence.

        ``progress(done, total)`` counts events, whatever their sequence numbers.
        """
        last = self._last_seq(w.txn)
        done = replay.apply_log(self.projector, w, start, self.event_count(w) if progress else 0, progress)
        self.set_watermark(w, last)
        return done

    # ------------------------------------------------------ the files
    @contextlib.contextmanager
    def alone(self) -> Iterator[bool]:
        """Yields True while this process holds the store alone (no other
        process has it open, nor can open it), else False."""
        if self._lock is None:
            raise StoreIOError("the store is closed")
        with self._lock.exclusive() as alone:
            yield alone

    def replace_data_file(self, source: str) -> None:
        """Atomically replace the store's data file by ``source`` (written by a
        ``private`` store, closed) and reopen it; no transaction of this process
        may be open.  On a failure before the rename the old file stays in use."""
        self._env.replace_data_file(source)

    def copy_to(self, target: str, compact: bool = False) -> None:
        """A consistent copy of the store's data into the empty directory ``target`` (``compact``: no free pages)."""
        (self._env.copy_compact if compact else self._env.copy)(target)

    def sync(self) -> None:
        """Flush everything to disk (a ``private`` store commits without a lock file)."""
        self._env.sync()

    # ---------------------------------------------------------------- closing
    def close(self) -> None:
        self._env.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
