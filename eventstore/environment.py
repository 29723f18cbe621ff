"""One LMDB environment: opening it, its transactions, its map, copies of it.

``RemapGuard`` (across the threads of one process): ``set_mapsize`` and
``close`` must not run while any transaction of this process is open
(py-lmdb invalidates them).  Transactions enter the guard shared; growing the
map, adopting another process's growth and closing wait until none is open.
It prefers transactions, so a thread may nest them; it must never grow the map
while it holds one itself.

Map growth: ``MapFullError`` aborts the transaction; the caller then calls
:meth:`Environment.grow` (with no transaction of its own open) and runs the
transaction again.  Another process's growth shows as ``MapResizedError`` when
a transaction begins: :meth:`Environment.transaction` adopts it
(``set_mapsize(0)``) and begins again.

Errors: LMDB's and the OS's exceptions pass through untranslated (the store
translates them, once); a closed environment and a reader table that stays
full are ``IO_ERROR``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

import lmdb

from . import files
from .caches import Caches
from .errors import StoreIOError

DATA_FILE = "data.mdb"
INITIAL_MAP = 64 << 20
MAX_MAP = 1 << 40
LOCK_BYTES = 128 + 256 * 64          # LMDB's lock file for 256 readers
_BEGIN_ATTEMPTS = 8
# A named sub-database's handle (``Environment.open_db``); py-lmdb gives its
# type no public name, so it is typed by what is done with it.
DbHandle: TypeAlias = Any


class RemapGuard:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open = 0
        self.waiting = 0          # threads waiting to remap or close (for tests and health)

    def enter(self) -> None:
        with self._cond:
            self._open += 1

    def leave(self) -> None:
        with self._cond:
            self._open -= 1
            if not self._open:
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """No transaction of this process is open, nor can one begin, inside."""
        with self._cond:
            self.waiting += 1
            while self._open:
                self._cond.wait()
            self.waiting -= 1
            yield


class Environment:
    """The LMDB environment of one directory and the handles of its named sub-databases."""

    def __init__(self, path: str, specs: dict[str, dict], map_size: int = INITIAL_MAP, *,
                 lock: bool = True) -> None:
        """Nothing is opened until :meth:`open`.  ``specs`` maps each sub-database
        to its flags; ``lock=False`` only for a private file no other process can
        see (it then has no ``lock.mdb``)."""
        self.path = path
        self.specs = specs
        self.lock = lock
        self.guard = RemapGuard()
        self.dbs: dict[str, DbHandle] = {}
        self.caches = Caches()            # what is kept between transactions: a fresh one each opening
        self._map_size = map_size
        self._env: lmdb.Environment | None = None

    # ----------------------------------------------------------- open, close
    def open(self) -> None:
        if self.lock:
            files.preallocate(os.path.join(self.path, "lock.mdb"), LOCK_BYTES)
        env = lmdb.open(self.path, map_size=self._map_size, max_dbs=len(self.specs) + 4,
                        subdir=True, sync=True, metasync=True, mode=0o600,
                        max_readers=256, readahead=False, lock=self.lock)
        try:
            files.chmod_private(self.path)
            if self.lock:
                env.reader_check()
            with env.begin(write=True) as txn:
                self.dbs = {n: env.open_db(n.encode(), txn=txn, **flags) for n, flags in self.specs.items()}
        except BaseException:
            env.close()
            raise
        self.caches = Caches()
        self._env = env

    def close(self) -> None:
        with self.guard.exclusive():
            self._close()

    def _close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def replace_data_file(self, source: str) -> None:
        """Close, atomically replace ``data.mdb`` by the file ``source``, reopen.

        A failure before the rename leaves the old file, opened again; the
        directory is synced after it, so the new file survives a crash.
        """
        with self.guard.exclusive():
            self._close()
            try:
                os.replace(source, os.path.join(self.path, DATA_FILE))
                files.fsync_path(self.path)
            except BaseException:
                self.open()
                raise
            self.open()

    def _live(self) -> lmdb.Environment:
        if self._env is None:
            raise StoreIOError("the store is closed")
        return self._env

    # ---------------------------------------------------------- transactions
    @contextlib.contextmanager
    def transaction(self, write: bool) -> Iterator[lmdb.Transaction[bytes]]:
        """Begin; on leaving, commit a write that raised nothing, abort anything else."""
        txn = self._begin(write)
        try:
            yield txn
            if write:
                txn.commit()
        finally:
            txn.abort()              # no effect after a commit
            self.guard.leave()

    def child(self, parent: lmdb.Transaction[bytes]) -> lmdb.Transaction[bytes]:
        """A nested write transaction inside ``parent`` (same thread): its commit
        merges into the parent, its abort undoes only its own changes."""
        return self._live().begin(write=True, parent=parent)

    def _begin(self, write: bool) -> lmdb.Transaction[bytes]:
        """A new transaction, entered in the remap guard (the caller leaves it)."""
        for _ in range(_BEGIN_ATTEMPTS):
            self.guard.enter()
            try:
                return self._live().begin(write=write)
            except lmdb.MapResizedError:
                self.guard.leave()
            except lmdb.ReadersFullError:
                self.guard.leave()
                if self._live().reader_check() == 0:      # no dead process's slot to reclaim
                    raise StoreIOError("too many processes or threads have the store open at once") from None
                continue
            except BaseException:
                self.guard.leave()
                raise
            with self.guard.exclusive():
                self._live().set_mapsize(0)
        raise StoreIOError("the map keeps being resized by another process")

    def drop_unknown(self, txn: lmdb.Transaction[bytes]) -> None:
        """Delete the sub-databases not in :attr:`specs` (an older schema's),
        inside the write transaction ``txn``."""
        env = self._live()
        with txn.cursor() as cur:
            names = [bytes(k).decode("utf-8", "replace") for k in cur.iternext(values=False)]
        for name in set(names) - set(self.dbs):
            for flags in ({}, {"dupsort": True}, {"dupsort": True, "dupfixed": True}):
                try:
                    handle = env.open_db(name.encode(), txn=txn, create=False, **flags)
                except lmdb.IncompatibleError:
                    continue
                txn.drop(handle, delete=True)
                break

    # ------------------------------------------------------------------ map
    @property
    def map_size(self) -> int:
        return self._live().info()["map_size"]

    def used_bytes(self) -> int:
        """Bytes up to the highest page in use (the file may be longer)."""
        env = self._live()
        return (env.info()["last_pgno"] + 1) * env.stat()["psize"]

    def grow(self, at_least: int = 0) -> None:
        """Double the map, or more until it holds ``at_least`` bytes; waits until
        no transaction of this process is open (the caller must hold none)."""
        with self.guard.exclusive():
            env = self._live()
            size = max(env.info()["map_size"] * 2, INITIAL_MAP)
            while size < at_least:
                size *= 2
            if size > MAX_MAP:
                raise StoreIOError("writing to the store: the map reached its maximum size")
            env.set_mapsize(size)
            self._map_size = size

    def reserve(self, size: int) -> None:
        """Grow the map now if it is smaller than ``size`` bytes."""
        if self.map_size < size:
            self.grow(size)

    # ------------------------------------------------------------ the files
    def copy(self, target: str) -> None:
        """A consistent copy of the environment into the empty directory ``target``
        (not compacted: ``compact=True`` crashes py-lmdb 3.0 on big dupsort lists)."""
        self._live().copy(target)

    def copy_compact(self, target: str) -> None:
        """A consistent copy into the empty directory ``target`` without free
        pages: every record of every sub-database, read in one read
        transaction, appended in key order to a fresh private file (pages
        filled).  Sub-databases of an older schema are left out."""
        fresh = Environment(target, self.specs, self.map_size, lock=False)
        fresh.open()
        try:
            with self.transaction(write=False) as src, fresh.transaction(write=True) as dst:
                for name, handle in self.dbs.items():
                    with src.cursor(db=handle) as cur, dst.cursor(db=fresh.dbs[name]) as out:
                        out.putmulti(cur.iternext(), dupdata=True, append=True)
            fresh.sync()
        finally:
            fresh.close()

    def sync(self) -> None:
        self._live().sync(True)

    def info(self) -> Mapping[str, Any]:
        """LMDB's ``env.info()`` (map size, last page number, readers)."""
        return self._live().info()

    def stat(self) -> Mapping[str, Any]:
        """LMDB's ``env.stat()`` of the main database (``psize`` among them)."""
        return self._live().stat()
