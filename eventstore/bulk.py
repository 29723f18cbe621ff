"""What a bulk transaction — a replay, an import's batch — gets before it
starts and while it runs, beyond an ordinary write (:func:`bulk_work`)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from .environment import INITIAL_MAP, Environment


@contextlib.contextmanager
def bulk_work(env: Environment) -> Iterator[None]:
    """Room in the map first, then the transaction with the cyclic garbage
    collector off (and left as it was found).

    * The map is grown, if need be, to twice what is used plus ``INITIAL_MAP``:
      a transaction that fills the map is aborted and run again from its
      start, which for a bulk one is seconds of work (a replay keeps the old
      read models until its commit; an import's batch doubles a small store).
    * Such a transaction keeps every message it has read or made until its
      flush, and each of the collector's full passes walks them all again:
      with it on, a 100,000-message import's writing process spent a sixth of
      its CPU there (``gc.callbacks``: 1.75 of 10.5 s).  What the transaction
      leaves behind in cycles is collected once it is back on.
    """
    env.reserve(2 * env.used_bytes() + INITIAL_MAP)
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
