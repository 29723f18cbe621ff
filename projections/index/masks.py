"""Facet lists as arrays: the documents that meet a filter's conditions, as a
bool array indexed by docno, kept for the store snapshot it was read from.

A filter that keeps a large share of the store (three kinds of six, say) is
asked of the best candidates one by one, on their ``docs`` rows — a few
microseconds each.  When a search has to ask many (the best candidates of a
query may be hundreds of near-copies that all fail), reading the condition's
facet lists whole is cheaper: a few milliseconds for a million messages, then
nothing per document.  The array is kept with the snapshot's name (the
store's caches' generation and LMDB's transaction id, which every committed
write changes: :meth:`eventstore.caches.Caches.snapshot`) in the store's
caches (:class:`Masks`), so any later search of the same snapshot reuses it,
and none of another.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from eventstore.transaction import Tx, WriteTx

from .arrays import Snapshot, tail_docnos
from .layout import DOCS, FACETS, docno_of

KEPT = 8                    # snapshots' masks kept (a few filters of the current snapshot)


class Masks:
    """The masks kept for one store (a slot of its caches): the ``KEPT`` last
    made, read-only, by snapshot and conditions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple, np.ndarray] = OrderedDict()

    def get(self, name: tuple | None) -> np.ndarray | None:
        if name is None:
            return None
        with self._lock:
            return self._kept.get(name)

    def put(self, name: tuple, mask: np.ndarray) -> None:
        with self._lock:
            self._kept[name] = mask
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)


def kept(tx: Tx, conditions: Sequence[Sequence[bytes]], changes: tuple[int, ...] | None = None) -> np.ndarray | None:
    """The mask of ``conditions`` if one is kept for this snapshot (see :func:`mask`)."""
    return tx.caches.slot(Masks).get(_name(tx, conditions, changes))


def mask(tx: Tx, conditions: Sequence[Sequence[bytes]], changes: tuple[int, ...] | None = None) -> np.ndarray:
    """Which merged documents meet every condition — each a list of facet
    keys, met by a document in any of their lists.

    ``changes``: the store's counts of updates and deletes.  With them a mask
    is kept not for one snapshot but for as long as the facet lists stay as
    they are: they change only when a merge adds to them (their entries grow),
    or an update or a delete changes a document's (those counts grow) — a
    write that merges nothing leaves the mask good."""
    name = _name(tx, conditions, changes)
    found = tx.caches.slot(Masks).get(name)
    if found is not None:
        return found
    lists = [[facet_docnos(tx, key) for key in keys] for keys in conditions]
    with tx.txn.cursor(db=tx.db(DOCS)) as cur:
        top = docno_of(cur.key()) if cur.last() else 0
    top = max([top, *(int(a.max()) for group in lists for a in group if len(a))])
    out = np.ones(top + 1, bool)
    for group in lists:
        meets = np.zeros(top + 1, bool)
        for docnos in group:
            meets[docnos] = True
        out &= meets
    out.flags.writeable = False
    if name is not None:
        tx.caches.slot(Masks).put(name, out)
    return out


def _name(tx: Tx, conditions: Sequence[Sequence[bytes]], changes: tuple[int, ...] | None) -> tuple | None:
    snap = snapshot(tx)
    if snap is None:
        return None
    state = snap[1] if changes is None else (tx.txn.stat(tx.db(FACETS))["entries"], *changes)
    return snap[0], state, tuple(tuple(keys) for keys in conditions)


def snapshot(tx: Tx) -> Snapshot | None:
    """The store snapshot a read transaction sees (None for a write
    transaction: its snapshot changes as it writes)."""
    if isinstance(tx, WriteTx):
        return None
    return tx.caches.snapshot(tx.txn.id())


def facet_docnos(tx: Tx, key: bytes) -> np.ndarray:
    """A facet list's docnos (6 bytes each, big-endian), read in one call."""
    with tx.txn.cursor(db=tx.db(FACETS)) as cur:
        raw = cur.getmulti([key], dupdata=True, dupfixed_bytes=6, keyfixed=True)
    return tail_docnos(raw, len(key) + 6)


def distinct(docnos: np.ndarray) -> np.ndarray:
    """``docnos`` sorted, each once."""
    out = np.sort(docnos)
    if len(out) > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out
