"""The lock across processes around a store directory.

``DirectoryLock``: every process that has the store open
holds a shared ``flock`` on ``convmem.lock``; compaction and the clean-up of a
leftover compaction directory need it exclusively.  Linux turns a failed
non-blocking shared→exclusive conversion into *no lock at all* (the shared
lock is dropped first), so an attempt is made only while holding the
``convmem.gate`` lock, and the shared lock is taken back afterwards: while one
process tries, no other can, and no process ever works on the store unlocked
for longer than that attempt.

The lock within one process around the environment is
:class:`eventstore.environment.RemapGuard`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
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
