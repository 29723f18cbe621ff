"""What the process keeps between transactions of one open environment.

The read side keeps things between searches — the ``times`` index as arrays,
the pending records decoded and inverted, filter masks, decoded posting
lists, zeroed sum arrays — each only good for the store it was read from.
They live here, in one :class:`Caches` per environment opening (reached as
``tx.caches``), not in modules: closing or reopening the environment, or
replacing its data file, starts a fresh one, so nothing kept can outlive the
store it describes, and two stores open in one process never see each
other's.

Each kept thing is a *slot*: the one object its factory made for this
opening, made on first use.  The slot's own class bounds it and checks each
value against the snapshot asking (another process may have committed since);
what it hands out is immutable (read-only arrays, tuples, frozen records).
A snapshot is named by :meth:`Caches.snapshot`: the cache's generation and
LMDB's transaction id, which every commit to the file advances, whichever
process made it — a process-local count of commits would miss other
processes' writes.  :meth:`Caches.invalidate` — called when the read models
are rebuilt wholesale — drops every slot and starts a new generation, so
nothing kept from before can be taken for what came after.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Caches:
    """The slots of one environment opening."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[Callable[[], object], object] = {}
        self.generation = 0           # times every slot was dropped

    def slot(self, make: Callable[[], T]) -> T:
        """The object ``make()`` gave for this opening (made now, the first time).
        ``make`` is the slot's name too: a class, or a module-level function."""
        found = self._slots.get(make)
        if found is None:
            with self._lock:
                found = self._slots.get(make)
                if found is None:
                    found = self._slots[make] = make()
        return found  # type: ignore[return-value]

    def snapshot(self, txn_id: int) -> tuple[int, int]:
        """The name of the snapshot a read transaction with id ``txn_id`` sees."""
        return self.generation, txn_id

    def invalidate(self) -> None:
        """Drop every slot (the read models were rebuilt or replaced)."""
        with self._lock:
            self._slots = {}
            self.generation += 1
