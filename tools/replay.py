"""Rebuild every read model from the event log.

    python -m tools.replay STORE            drop the projections and replay the log
    python -m tools.replay STORE --verify   replay into a scratch copy and compare it,
                                            sub-database by sub-database, byte for byte,
                                            with the live read models (exit 1 on a difference)

Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from eventstore.store import EventStore
from projections.registry import Projector


class _Progress:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        rate = done / max(time.perf_counter() - self.start, 1e-9)
        sys.stderr.write(f"\rreplay [{'#' * filled}{'.' * (width - filled)}] {done}/{total} events "
                         f"({rate:,.0f}/s)")
        sys.stderr.flush()


def replay(path: str) -> int:
    """Rebuild the projections of the store at ``path``; returns events applied."""
    with EventStore(path, Projector(), repair=True) as store:
        done = store.rebuild_projections(progress=_Progress())
    sys.stderr.write("\n")
    return done


def dump_projections(store: EventStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every projection sub-database's (key, value) pairs, duplicates included."""
    out = {}
    with store.read() as tx:
        for name in store.projector.db_specs:
            with tx.txn.cursor(db=tx.db(name)) as cur:
                out[name] = list(cur.iternext(keys=True, values=True)) if cur.first() else []
    return out


def differences(path: str) -> list[str]:
    """Names of the read models whose replayed bytes differ from the live ones."""
    scratch = tempfile.mkdtemp(prefix="convmem-verify-")
    try:
        with EventStore(path, Projector()) as live:
            expected = dump_projections(live)
            live._env.copy(scratch)  # compact=True crashes py-lmdb 3.0 on big dupsort lists
        with EventStore(scratch, Projector()) as copy:
            copy.rebuild_projections(progress=_Progress())
            sys.stderr.write("\n")
            got = dump_projections(copy)
        return [name for name in expected if expected[name] != got[name]]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run(path: str, verify: bool = False) -> int:
    if not os.path.isdir(path):
        print(f"replay: no store at {path}", file=sys.stderr)
        return 2
    if verify:
        diff = differences(path)
        for name in diff:
            print(f"replay: read model '{name}' differs from a replay of the log", file=sys.stderr)
        print("replay: verify " + ("FAILED" if diff else "OK: every read model equals its replay"),
              file=sys.stderr)
        return 1 if diff else 0
    done = replay(path)
    print(f"replay: rebuilt the read models from {done} events", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.replay", description=__doc__.split("\n")[1])
    p.add_argument("store", help="store directory")
    p.add_argument("--verify", action="store_true",
                   help="replay into a scratch copy and compare byte for byte; exit 1 on a difference")
    args = p.parse_args(argv)
    from eventstore.errors import ConvMemError
    try:
        return run(os.path.abspath(args.store), verify=args.verify)
    except ConvMemError as exc:
        print(f"replay: {exc.code}: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
