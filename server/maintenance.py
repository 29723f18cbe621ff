"""Maintenance of a store from the command line: rebuild or verify the read models.

``replay`` drops every read model and rebuilds it from the event log (the
repair for damaged read models); ``differences`` rebuilds a scratch copy and
compares it, sub-database by sub-database, byte for byte, with the live read
models.  ``convmem replay`` and ``python -m tools.replay`` both run
:func:`run`.  Progress (a bar, on a terminal only) and results go to stderr.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import traceback

from eventstore.errors import ConvMemError, InternalError
from eventstore.store import EventStore
from projections.registry import Projector

from .progress import replay_bar


def report(prog: str, exc: ConvMemError) -> None:
    """An error on stderr: its code and message; for ``INTERNAL_ERROR`` (a bug)
    the traceback too."""
    if isinstance(exc, InternalError):
        traceback.print_exception(exc, file=sys.stderr)
    print(f"{prog}: {exc.code}: {exc.message}", file=sys.stderr)


def replay(path: str) -> int:
    """Rebuild the projections of the store at ``path``; returns events applied."""
    with EventStore(path, Projector(), repair=True) as store, replay_bar() as bar:
        return store.rebuild_projections(progress=bar)


def dump_projections(store: EventStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every projection sub-database's (key, value) pairs, duplicates included."""
    out = {}
    with store.read() as tx:
        for name in store.projector.db_specs:
            with tx.txn.cursor(db=tx.db(name)) as cur:
                pairs = cur.iternext(keys=True, values=True) if cur.first() else ()
                out[name] = [(bytes(k), bytes(v)) for k, v in pairs]
    return out


def differences(path: str) -> list[str]:
    """Names of the read models whose replayed bytes differ from the live ones."""
    scratch = tempfile.mkdtemp(prefix="convmem-verify-")
    try:
        with EventStore(path, Projector()) as live:
            expected = dump_projections(live)
            live.copy_to(scratch)
        with EventStore(scratch, Projector()) as copy:
            with replay_bar("verify") as bar:
                copy.rebuild_projections(progress=bar)
            got = dump_projections(copy)
        return [name for name in expected if expected[name] != got[name]]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(path: str, verify: bool = False) -> int:
    """Replay (or, with ``verify``, check) the store at ``path``; the exit code."""
    if not os.path.isdir(path):
        print(f"replay: no store at {path}", file=sys.stderr)
        return 2
    if verify:
        diff = differences(path)
        for name in diff:
            print(f"replay: read model '{name}' differs from a replay of the log", file=sys.stderr)
        print("replay: verify " + ("FAILED" if diff else "OK: every read model equals its replay") + f" ({path})",
              file=sys.stderr)
        return 1 if diff else 0
    done = replay(path)
    print(f"replay: rebuilt the read models from {done} events ({path})", file=sys.stderr)
    return 0
