"""What the subcommands share: the store they open, and how they fail.

A read-only command opens an existing store only (:func:`open_existing`): a
missing path is reported, naming it, with exit 2, never created.  A path that
is a regular file is refused the same way by every command, ``serve`` included.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
from collections.abc import Iterator

from ..service import MemoryService, default_store_path

STORE_HELP = "store directory (default: $CONVMEM_STORE, else $XDG_DATA_HOME/convmem or ~/.local/share/convmem)"
DATA_FILE = "data.mdb"


class CommandError(Exception):
    """A failure the user can act on: printed as ``convmem: MESSAGE``, exit ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """The cyclic garbage collector off while a command runs, back on after.

    Used by the commands that run in a process of their own and end:
    ``serve`` and ``ui`` until the server has frozen its start-up heap
    (``_process.settle_heap`` turns the collector back on: the serving
    process collects as any other), and the one-shot ``replay`` and
    ``import``, whose bulk transactions keep up to a replay's worth of
    read-model work alive and would otherwise have the collector walk it
    again and again: 13% of a replay's CPU
    (``python -m tools.bench_store``, the replay with and without it).  A
    cycle made meanwhile is collected when the collector is back on or
    freed with the process.  Never used around serving: a serving
    process's bulk transactions (a replica catching up) keep the collector
    on (:mod:`eventstore.bulk`)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def store_path(args: argparse.Namespace) -> str:
    return os.path.abspath(os.path.expanduser(args.store or default_store_path()))


def check_usable(path: str) -> None:
    """Refuse a store path that exists but cannot be a store directory."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise CommandError(f"{path} is a file, not a store directory: pass --store a directory "
                           "(a new one is created) or move the file away")


def check_existing(path: str) -> None:
    """Refuse a path that holds no store (read-only commands never create one)."""
    check_usable(path)
    if not os.path.isfile(os.path.join(path, DATA_FILE)):
        what = "does not exist" if not os.path.exists(path) else f"has no {DATA_FILE}"
        raise CommandError(f"no store at {path} (the directory {what}); pass --store the store's "
                           "directory, or set CONVMEM_STORE")


def open_existing(path: str) -> MemoryService:
    check_existing(path)
    return MemoryService(path)
