"""What a bulk transaction — a replay, an import's batch — gets before it
starts and while it runs, beyond an ordinary write (:func:`bulk_work`)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from .environment import INITIAL_MAP, Environment


@contextlib.contextmanager
def bulk_work(env: Environment) -> Iterator[None]:
    """Room in the map, and what is alive moved out of the collector's way,
    before the transaction starts.

    * The map is grown, if need be, to twice what is used plus
      ``INITIAL_MAP``: a transaction that fills the map is aborted and run
      again from its start, which for a bulk one is seconds of work (a replay
      keeps the old read models until its commit; an import's batch doubles a
      small store).
    * ``gc.collect()`` then ``gc.freeze()``: the garbage is collected, and
      every object still alive (the modules, the service, what earlier
      transactions keep) goes to the collector's permanent generation, so
      that its passes during the transaction walk only what the transaction
      makes.  The collector stays on — a serving replica catching up still
      collects every other thread's cycles.  Frozen objects are still freed
      by reference counting; a cycle among them that becomes garbage later is
      not collected (nothing garbage is frozen, and the objects frozen are at
      most the heap alive at that moment; after the first freeze the
      collection walks only what is newer).  What the collector's passes still
      cost — about 3% of a one-process replay's work beside it off — is the
      price of leaving it on for every thread.
    """
    env.reserve(2 * env.used_bytes() + INITIAL_MAP)
    gc.collect(1)
    gc.freeze()
    yield
