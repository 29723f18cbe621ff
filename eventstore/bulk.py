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
    * ``gc.collect(1)`` then ``gc.freeze()``: the young garbage is collected
      (a full collection cost ~60 ms a replay, walking the whole heap), and
      every object still alive (the modules, the service, what earlier
      transactions keep) goes to the collector's permanent generation, so
      that its passes during the transaction walk only what the transaction
      makes.  The collector stays on — a serving replica catching up still
      collects every other thread's cycles.  Frozen objects are still freed
      by reference counting; a cycle among them that becomes garbage later is
      not collected.  Nor is a cycle that was already garbage in the oldest
      generation when it was frozen: at most what died there since the last
      full collection or freeze, each freeze taking only what is newer than
      the one before.  What the collector's passes still cost — ~13% of a
      replay's CPU, walking what the transaction keeps alive — is the price
      of leaving it on for every thread of a serving process; a one-shot
      ``convmem replay`` or ``import`` pauses it for the command instead
      (``server.commands._common.paused_collector``).
    """
    env.reserve(2 * env.used_bytes() + INITIAL_MAP)
    gc.collect(1)
    gc.freeze()
    yield


def settle() -> None:
    """Between the batches of a bulk transaction: what it has made alive so
    far (a replay's index work, held until the transaction's end) goes to
    the permanent generation too, as at its start.  Otherwise each pass of
    the collector walks all of it again, and a full pass comes every time
    it has grown by a quarter: ~55 ms of a 10,000-event replay's ~0.55 s of
    CPU with the collector on, ~30 ms with this (thread CPU 0.55 -> 0.49 s,
    3 runs each).  What is frozen here dies by reference counting when the
    transaction lets it go (three replays in a row leave the frozen count
    where the first left it)."""
    gc.freeze()
