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
  ``set_mapsize(0)`` the same way (see :mod:`eventstore._locks`);
* indexes hold ids and sequence numbers, never copies of content.

Sub-databases owned here: ``events`` (8-byte big-endian sequence → CBOR event)
and ``meta`` (format version, projection schema version, watermark, last id,
sequence floor, logical I/O counters, cursor secret).  The read models are
owned by a *projector* passed in by the caller; it is applied to every event
inside the transaction that appends it, so no reader ever sees one without
the other.  Values a projector rewrites many times in one transaction (the
statistics) are kept decoded in the transaction's projector *state*
(:class:`TxState`) and written once, by :meth:`WriteTx.flush`, just before the
commit.

Several processes may open one store; each holds a shared ``flock`` for as
long as it is open, and compaction needs it exclusively (``BUSY`` otherwise).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import cbor2
import lmdb

from . import codec, ids
from ._locks import DirectoryLock, RemapGuard
from .errors import BusyError, ConvMemError, CorruptStoreError, StoreIOError, translate
from .events import Event

FORMAT_VERSION = 2
COMPACT_DIR = "compact.tmp"
DATA_FILE = "data.mdb"
_INITIAL_MAP = 64 << 20
_MAX_MAP = 1 << 40
_IO_KEYS = ("write_bytes", "write_calls", "flush_calls", "truncate_calls", "replace_calls")
_LOCK_BYTES = 128 + 256 * 64          # LMDB's lock file for 256 readers
_BATCH = 2000                         # events per transaction when writing a compacted file
_CARRIED = (b"last_id", b"secret")   # meta kept across compaction besides counters


class TxState(Protocol):
    """What a projector keeps for the length of one write transaction."""

    def flush(self, tx: WriteTx) -> None:
        """Write what was held back, just before the commit."""

    def close(self) -> None:
        """Release what was started (a process, a thread), committed or not."""


class Projector(Protocol):
    """What the store needs from the read side."""

    schema_version: int
    db_specs: dict[str, dict]

    def begin(self, tx: WriteTx, bulk: bool) -> TxState:
        """The state of a new write transaction; ``bulk`` for a full replay,
        whose work the projector may hold until the flush."""

    def apply(self, tx: WriteTx, seq: int, event: Event, size: int) -> None: ...


@dataclass
class Tx:
    """A transaction plus the sub-database handles, handed to projectors."""

    txn: lmdb.Transaction
    dbs: dict[str, object]

    def db(self, name: str):
        return self.dbs[name]

    def put_last(self, name: str, key: bytes, value: bytes) -> None:
        """Put a key that is usually greater than every key of ``name``:
        appended (``MDB_APPEND``: no search, pages left full), else put the
        ordinary way."""
        db = self.dbs[name]
        if not self.txn.put(key, value, db=db, append=True):
            self.txn.put(key, value, db=db)


@dataclass
class WriteTx(Tx):
    """A write transaction in which a command decides and appends its events.

    ``state`` is the projector's state for this transaction (begun on first
    use); the store flushes it before the commit and closes it afterwards.
    """

    store: EventStore = None  # type: ignore[assignment]
    bulk: bool = False                      # a full replay (set before the first event)
    appended: list[tuple[int, int]] = field(default_factory=list)
    watermark: int | None = None
    _next_seq: int | None = None
    _state: TxState | None = None

    @property
    def state(self) -> TxState:
        if self._state is None:
            self._state = self.store.projector.begin(self, self.bulk)
        return self._state

    def now_ms(self) -> int:
        return self.store.clock()

    def new_id(self, now_ms: int) -> str:
        last = self.txn.get(b"last_id", db=self.dbs["meta"])
        raw = ids.next_id(last, now_ms, self.store.rng.getrandbits(80))
        self.txn.put(b"last_id", raw, db=self.dbs["meta"])
        return ids.to_str(raw)

    def append(self, event: Event, project: bool = True) -> int:
        """Append ``event`` to the log and apply every projector to it (unless
        ``project`` is False: then the read models fall behind the log until
        a replay, as compaction does)."""
        raw = codec.encode_event(event)
        if self._next_seq is None:
            self._next_seq = self.store._last_seq(self.txn) + 1
        seq = self._next_seq
        if not self.txn.put(codec.seq_key(seq), raw, db=self.dbs["events"], append=True):
            raise CorruptStoreError("the event log's sequence numbers went backwards")
        self._next_seq = seq + 1
        if project:
            self.store.projector.apply(self, seq, event, len(raw))
            self.watermark = seq
        self.appended.append((seq, len(raw)))
        return seq

    def flush(self) -> None:
        """Just before the commit: the projector's state, then the watermark."""
        if self._state is not None:
            self._state.flush(self)
        if self.watermark is not None:
            _put_int(self.txn, self.dbs["meta"], b"watermark", self.watermark)

    def ended(self) -> None:
        """After the commit or abort."""
        if self._state is not None:
            self._state.close()


def _get_int(txn, db, key: bytes, default: int | None = None) -> int | None:
    raw = txn.get(key, db=db)
    return default if raw is None else int.from_bytes(raw, "big")


def _put_int(txn, db, key: bytes, value: int) -> None:
    txn.put(key, value.to_bytes(8, "big"), db=db)


def _system_clock() -> int:
    return time.time_ns() // 1_000_000


class EventStore:
    """An open store directory.  Close it (or use ``with``) before reopening."""

    def __init__(self, path: str, projector: Projector, *, clock: Callable[[], int] = _system_clock,
                 rng: random.Random | None = None, map_size: int = _INITIAL_MAP,
                 repair: bool = False) -> None:
        """``repair=True`` (the replay tool) opens a store whose read models are
        ahead of its log or out of date without refusing or recovering it: the
        caller is about to rebuild them all with :meth:`rebuild_projections`."""
        self._setup(path, projector, clock, rng or random.SystemRandom(), map_size)
        self._repair = repair
        self._open()

    def _setup(self, path, projector, clock, rng, map_size) -> None:
        self.path = os.path.abspath(path)
        self.projector = projector
        self.clock = clock
        self.rng = rng
        self.recovered_tail = False
        self._repair = False
        self._map_size = map_size
        self._env: lmdb.Environment | None = None
        self._dbs: dict[str, object] = {}
        self._lock: DirectoryLock | None = None
        self._guard = RemapGuard()

    # ----------------------------------------------------------------- opening
    def _open(self) -> None:
        try:
            _make_private_dir(self.path)
            self._lock = DirectoryLock(self.path)
            self._remove_leftover()
            self._open_env()
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
            with self._lock.exclusive() as alone:
                if alone:
                    shutil.rmtree(leftover)
                    self.recovered_tail = True

    def _open_env(self, lock: bool = True) -> None:
        """Open the environment; ``lock=False`` only for a private file no other
        process can see (it then has no ``lock.mdb``)."""
        names = ["events", "meta", *self.projector.db_specs]
        if lock:
            _preallocate(os.path.join(self.path, "lock.mdb"), _LOCK_BYTES)
        self._env = lmdb.open(self.path, map_size=self._map_size, max_dbs=len(names) + 4,
                              subdir=True, sync=True, metasync=True, mode=0o600,
                              max_readers=256, readahead=False, lock=lock)
        _chmod_private(self.path)
        if lock:
            self._env.reader_check()
        specs = {"events": {}, "meta": {}, **self.projector.db_specs}
        with self._env.begin(write=True) as txn:
            self._dbs = {n: self._env.open_db(n.encode(), txn=txn, **flags)
                         for n, flags in specs.items()}

    def _verify_and_recover(self) -> None:
        with self.read() as tx:
            meta = tx.db("meta")
            version = _get_int(tx.txn, meta, b"format_version")
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
                watermark = _get_int(tx.txn, meta, b"watermark", 0)
                schema = _get_int(tx.txn, meta, b"schema_version", 0)
                if watermark > last and not self._repair:
                    raise CorruptStoreError("projection watermark is ahead of the event log; "
                                            "run `convmem replay` to rebuild the read models")
        if fresh:
            self._run(self._initialize, "creating the store")
        elif self._repair:
            pass                      # the caller rebuilds every read model itself
        elif schema != self.projector.schema_version:
            self.rebuild_projections()
            self.recovered_tail = True
        elif watermark < last:
            self._run(lambda w: self._replay_into(w, watermark + 1), "replaying the log's tail")
            self.recovered_tail = True

    def _initialize(self, w: WriteTx) -> None:
        meta = w.db("meta")
        _put_int(w.txn, meta, b"format_version", FORMAT_VERSION)
        _put_int(w.txn, meta, b"schema_version", self.projector.schema_version)
        _put_int(w.txn, meta, b"watermark", 0)
        w.txn.put(b"io", codec.dumps({k: 0 for k in _IO_KEYS}), db=meta)
        w.txn.put(b"secret", os.urandom(32), db=meta)

    # ------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def read(self) -> Iterator[Tx]:
        """A short read transaction (adopts a map grown by another process)."""
        with self._transaction(write=False) as txn:
            try:
                yield Tx(txn, self._dbs)
            except ConvMemError:
                raise
            except (lmdb.BadTxnError, ValueError, struct.error) as exc:
                # stored bytes of the wrong shape (a key of the wrong length, a value
                # that is not UTF-8, a page LMDB cannot use): the store is damaged
                raise CorruptStoreError("reading the store: a stored record is damaged "
                                        f"({type(exc).__name__}); run `convmem replay`") from exc
            except (lmdb.Error, OSError, cbor2.CBORDecodeError) as exc:
                raise translate(exc, "reading the store") from exc

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[lmdb.Transaction]:
        """Begin; on leaving, commit a write that raised nothing, abort anything else."""
        txn = self._begin(write)
        try:
            yield txn
            if write:
                txn.commit()
        finally:
            txn.abort()              # no effect after a commit
            self._guard.leave()

    def _begin(self, write: bool) -> lmdb.Transaction:
        """A new transaction, entered in the remap guard (the caller leaves it)."""
        for _ in range(8):
            self._guard.enter()
            try:
                if self._env is None:
                    raise StoreIOError("the store is closed")
                return self._env.begin(write=write)
            except lmdb.MapResizedError:
                self._guard.leave()
            except lmdb.ReadersFullError:
                self._guard.leave()
                if self._env.reader_check() == 0:      # no dead process's slot to reclaim
                    raise StoreIOError("too many processes or threads have the store open at once")
                continue
            except BaseException:
                self._guard.leave()
                raise
            with self._guard.exclusive():
                self._env.set_mapsize(0)
        raise StoreIOError("the map keeps being resized by another process")

    def execute(self, command: Callable[[WriteTx], object]):
        """Run ``command`` in one durable write transaction and return its result.

        The command reads state, decides, and appends events; projectors,
        watermark and I/O counters are updated in the same transaction; the
        commit is synced before this returns.  On a full map the transaction
        is aborted, the map grown, and the command run again.
        """
        return self._run(command, "writing to the store", count_io=True)

    def _run(self, fn: Callable[[WriteTx], object], action: str, count_io: bool = False):
        """``fn`` in one write transaction, retried after growing a full map.

        Maintenance (replay, compaction) passes ``count_io=False``: only
        commands count as logical writes.
        """
        for _ in range(64):
            try:
                with self._transaction(write=True) as txn:
                    w = WriteTx(txn, self._dbs, store=self)
                    try:
                        result = fn(w)
                        if count_io and w.appended:
                            self._count_io(w)
                        w.flush()
                    finally:
                        w.ended()
                return result
            except lmdb.MapFullError:
                self._grow()
            except ConvMemError:
                raise
            except Exception as exc:
                raise translate(exc, action) from exc
        raise StoreIOError(f"{action}: the map could not grow enough")

    def _count_io(self, w: WriteTx) -> None:
        io = self.io_counters(w.txn)
        io["write_calls"] += 1
        io["write_bytes"] += sum(size for _, size in w.appended)
        io["flush_calls"] += 1
        w.txn.put(b"io", codec.dumps(io), db=w.db("meta"))

    def _grow(self, at_least: int = 0) -> None:
        with self._guard.exclusive():
            size = max(self._env.info()["map_size"] * 2, _INITIAL_MAP)
            while size < at_least:
                size *= 2
            if size > _MAX_MAP:
                raise StoreIOError("writing to the store: the map reached its maximum size")
            self._env.set_mapsize(size)
            self._map_size = size

    # ------------------------------------------------------------------ reads
    def _last_seq(self, txn) -> int:
        """The newest sequence number; never goes back, compaction included."""
        floor = _get_int(txn, self._dbs["meta"], b"seq_floor", 0)
        with txn.cursor(db=self._dbs["events"]) as cur:
            return max(codec.seq_of(cur.key()) if cur.last() else 0, floor)

    def _check_newest_event(self, tx: Tx) -> None:
        with tx.txn.cursor(db=tx.db("events")) as cur:
            if cur.last():
                codec.decode_event(cur.value())

    def last_sequence(self, tx: Tx) -> int:
        return self._last_seq(tx.txn)

    def secret(self, tx: Tx) -> bytes:
        """A random per-store key (for signing cursors); stable across compaction."""
        return tx.txn.get(b"secret", db=tx.db("meta")) or b""

    def watermark(self, tx: Tx) -> int:
        return _get_int(tx.txn, tx.db("meta"), b"watermark", 0)

    def io_counters(self, txn) -> dict[str, int]:
        raw = txn.get(b"io", db=self._dbs["meta"])
        found = codec.loads(raw) if raw else {}
        return {k: found.get(k, 0) for k in _IO_KEYS}

    def iter_events(self, tx: Tx, start: int = 1) -> Iterator[tuple[int, Event, int]]:
        with tx.txn.cursor(db=tx.db("events")) as cur:
            if not cur.set_range(codec.seq_key(start)):
                return
            for key, raw in cur:
                yield codec.seq_of(key), codec.decode_event(raw), len(raw)

    def db_bytes(self, tx: Tx, name: str) -> int:
        st = tx.txn.stat(tx.db(name))
        pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        return pages * st["psize"]

    def file_size(self) -> int:
        try:
            return os.path.getsize(os.path.join(self.path, DATA_FILE))
        except OSError:
            return 0

    # ----------------------------------------------------------------- replay
    def rebuild_projections(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Drop every read model and rebuild it from the log alone.

        One write transaction: readers see the old read models or the new
        ones, and no other writer can interleave events with the replay.
        """
        def rebuild(w: WriteTx) -> int:
            for name in self.projector.db_specs:
                w.txn.drop(w.db(name), delete=False)
            self._drop_obsolete(w)
            _put_int(w.txn, w.db("meta"), b"schema_version", self.projector.schema_version)
            w.bulk = True               # projectors may hold their work until the flush
            return self._replay_into(w, 1, progress)
        # the old read models stay until the commit: room for both, so the
        # replay is not run out of map (and started again) half way
        info = self._env.info()
        used = (info["last_pgno"] + 1) * self._env.stat()["psize"]
        if info["map_size"] < 2 * used + _INITIAL_MAP:
            self._grow(2 * used + _INITIAL_MAP)
        return self._run(rebuild, "rebuilding the read models")

    def _drop_obsolete(self, w: WriteTx) -> None:
        """Delete sub-databases an older projection schema left behind (they may
        hold text of deleted messages, e.g. a former tag index)."""
        with w.txn.cursor() as cur:
            names = [k.decode("utf-8", "replace") for k in cur.iternext(values=False)]
        for name in set(names) - set(self._dbs):
            for flags in ({}, {"dupsort": True}, {"dupsort": True, "dupfixed": True}):
                try:
                    handle = self._env.open_db(name.encode(), txn=w.txn, create=False, **flags)
                except lmdb.IncompatibleError:
                    continue
                w.txn.drop(handle, delete=True)
                break

    def _replay_into(self, w: WriteTx, start: int, progress=None) -> int:
        """Apply the log from ``start`` on; the watermark ends at the last sequence.

        ``progress(done, total)`` counts events, whatever their sequence numbers.
        """
        last, done = self._last_seq(w.txn), 0
        total = w.txn.stat(w.db("events"))["entries"] if progress else 0
        for seq, event, size in self.iter_events(w, start):
            self.projector.apply(w, seq, event, size)
            done += 1
            if progress and done % _BATCH == 0:
                progress(done, total)
        if progress:
            progress(done, total)
        w.watermark = last
        return done

    # ------------------------------------------------------------- compaction
    def compact(self, live: Callable[[Tx], tuple[int, Iterable[Event]]]) -> dict[str, int]:
        """Rewrite the log as one event per live message into a fresh file.

        ``live(tx)`` returns the number of live messages and an iterator of
        re-materialized events.  Needs the store alone (``BUSY`` otherwise).
        See :mod:`eventstore._compaction`.
        """
        from ._compaction import compact
        if self._lock is None:
            raise StoreIOError("the store is closed")
        with self._lock.exclusive() as alone:
            if not alone:
                raise BusyError("rebuild_index needs the store alone: another process has it open")
            return compact(self, live)

    # ---------------------------------------------------------------- closing
    def close(self) -> None:
        if self._env is not None:
            with self._guard.exclusive():
                self._env.close()
                self._env = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _make_private_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    _chmod_private(path)


def _chmod_private(path: str) -> None:
    """Directory 0700 and every file directly in it 0600, whatever the umask."""
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isfile(full) and os.stat(full).st_mode & 0o077:
            os.chmod(full, 0o600)


def _preallocate(path: str, size: int) -> None:
    """Create ``path`` with ``size`` allocated bytes, unless it exists.

    LMDB creates its lock file sparse and maps it: on a full disk the first
    touch of a page kills the process with SIGBUS.  Allocating it here turns
    that into ``ENOSPC`` (``IO_ERROR``).  An existing file is left alone: it
    may be open in this process, and closing any descriptor of it would drop
    LMDB's POSIX locks.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        written = 0
        while written < size:                  # zeros, not a hole: the blocks get allocated
            written += os.write(fd, bytes(size - written))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

