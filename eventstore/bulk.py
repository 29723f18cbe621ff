"""What a bulk transaction — a replay, an import's batch — gets before it
starts and while it runs, beyond an ordinary write (:func:`bulk_work`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .environment import INITIAL_MAP, Environment


@contextlib.contextmanager
def bulk_work(env: Environment) -> Iterator[None]:
    """Room in the map first: grown, if need be, to twice what is used plus
    ``INITIAL_MAP``.  A transaction that fills the map is aborted and run
    again from its start, which for a bulk one is seconds of work (a replay
    keeps the old read models until its commit; an import's batch doubles a
    small store)."""
    env.reserve(2 * env.used_bytes() + INITIAL_MAP)
    yield
