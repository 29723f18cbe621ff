"""Checks of a store directory that the reliability tools (crash loop,
concurrency) and their tests share: owner-only files, ``replay --verify``, and
read models equal to a replay of the log."""

from __future__ import annotations

import contextlib
import os

from tools import _proc


def private_violations(store: str) -> list[str]:
    """Paths under ``store`` readable, writable or searchable by group or others."""
    bad = []
    for root, _dirs, files in os.walk(store):
        for path in [root] + [os.path.join(root, f) for f in files]:
            with contextlib.suppress(FileNotFoundError):
                mode = os.stat(path).st_mode & 0o777
                if mode & 0o077:
                    bad.append(f"{os.path.relpath(path, store)} has mode {mode:o}")
    return bad


async def replay_verify(store: str) -> tuple[int, str]:
    """``python -m tools.replay STORE --verify``: its exit code and the tail of its stderr."""
    done = await _proc.run_async(_proc.python("-m", "tools.replay", store, "--verify"), timeout=None)
    text = done.stderr[-2000:]
    if done.returncode < 0:
        text = f"{_proc.describe(done.returncode)} {text}"
    return done.returncode, text


_MATCH_REPLAY = """
import shutil, sys, tempfile
from eventstore.store import EventStore
from projections.registry import Projector
from tools.replay import dump_projections
scratch = tempfile.mkdtemp(prefix="convmem-check-")
try:
    with EventStore(sys.argv[1], Projector()) as live:
        expected = dump_projections(live)
        live.copy_to(scratch)
    with EventStore(scratch, Projector()) as copy:
        copy.rebuild_projections()
        got = dump_projections(copy)
    differ = [name for name in expected if expected[name] != got[name]]
    print(" ".join(differ))
    sys.exit(1 if differ else 0)
finally:
    shutil.rmtree(scratch, ignore_errors=True)
"""


async def read_models_match_replay(store: str) -> tuple[bool, str]:
    """What ``replay --verify`` checks, through a plain (not compacting) copy of
    the store, in a child process: whether the read models equal a replay of the log.

    (Written when ``tools.replay --verify`` copied with ``compact=True``, which
    crashes py-lmdb 3.0 on long posting lists; both now copy the same way.)
    """
    done = await _proc.run_async(_proc.python("-c", _MATCH_REPLAY, store), timeout=None)
    return done.returncode == 0, (done.stdout + done.stderr)[-2000:]
