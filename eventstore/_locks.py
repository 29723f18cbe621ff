"""The two locks around an LMDB environment.

``DirectoryLock`` (across processes): every process that has the store open
holds a shared ``flock`` on ``convmem.lock``; compaction and the clean-up of a
leftover compaction directory need it exclusively.  Linux turns a failed
non-blocking shared→exclusive conversion into *no lock at all* (the shared
lock is dropped first), so an attempt is made only while holding the
``convmem.gate`` lock, and the shared lock is taken back afterwards: while one
process tries, no other can, and no process ever works on the store unlocked
for longer than that attempt.

``RemapGuard`` (across threads of one process): ``set_mapsize`` and ``close``
must not run while any transaction of this process is open (py-lmdb
invalidates them).  Transactions enter the guard shared; growing the map,
adopting another process's growth and closing wait until none is open.  It
prefers transactions, so a thread may nest them; it must never grow the map
while it holds one itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator

LOCK_FILE = "convmem.lock"
GATE_FILE = "convmem.gate"


def open_private(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    return fd


class DirectoryLock:
    def __init__(self, directory: str) -> None:
        self._fd = open_private(os.path.join(directory, LOCK_FILE))
        try:
            self._gate = open_private(os.path.join(directory, GATE_FILE))
            fcntl.flock(self._fd, fcntl.LOCK_SH)   # waits while another process compacts
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Yields True while this process holds the store alone, else False."""
        try:
            fcntl.flock(self._gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = True
            except BlockingIOError:
                alone = False
            try:
                yield alone
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)

    def close(self) -> None:
        for name in ("_fd", "_gate"):
            fd = getattr(self, name, None)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)


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
