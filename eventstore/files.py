"""File-system helpers of the store: owner-only directories, syncs, preallocation.

A store directory is 0700 and every file in it 0600, whatever the umask:
messages are private.  Nothing here knows LMDB.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import IO


def make_private_dir(path: str) -> None:
    """Create ``path`` (and its parents) if missing; either way leave it private."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    chmod_private(path)


def chmod_private(path: str) -> None:
    """Directory 0700 and every file directly in it 0600, whatever the umask."""
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isfile(full) and os.stat(full).st_mode & 0o077:
            os.chmod(full, 0o600)


@contextlib.contextmanager
def private_replacement(path: str, tmp: str) -> Iterator[IO[str]]:
    """A UTF-8 text file written at ``tmp`` (0600, ``\\n`` line ends), synced and renamed
    over ``path`` when the block ends: a reader of ``path`` sees the old file or the whole
    new one.  When the block fails, ``tmp`` is removed and ``path`` left as it was."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with open(fd, "w", encoding="utf-8", newline="\n") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def preallocate(path: str, size: int) -> None:
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


def fsync_path(path: str) -> None:
    """``fsync`` a file or a directory (after a rename in it) by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
