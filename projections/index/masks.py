"""Facet lists as arrays: the documents that meet a filter's conditions, as a
bool array indexed by docno, kept for the store snapshot it was read from.

A filter that keeps a large share of the store (three kinds of six, say) is
asked of the best candidates one by one, on their ``docs`` rows — a few
microseconds each.  When a search has to ask many (the best candidates of a
query may be hundreds of near-copies that all fail), reading the condition's
facet lists whole is cheaper: a few milliseconds for a million messages, then
nothing per document.  The array is kept with the snapshot's identity — the
environment opening (its sub-database handles, held so their identity cannot
be reused) and LMDB's transaction id, which every committed write changes —
so any later search of the same snapshot reuses it, and none of another.
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

_lock = threading.Lock()
_kept: OrderedDict[tuple, tuple[dict, np.ndarray]] = OrderedDict()


def kept(tx: Tx, conditions: Sequence[Sequence[bytes]], changes: tuple[int, ...] | None = None) -> np.ndarray | None:
    """The mask of ``conditions`` if one is kept for this snapshot (see :func:`mask`)."""
    return _lookup(tx, _name(tx, conditions, changes))


def _lookup(tx: Tx, name: tuple | None) -> np.ndarray | None:
    if name is None:
        return None
    with _lock:
        found = _kept.get(name)
    return found[1] if found is not None and found[0] is tx.dbs else None


def mask(tx: Tx, conditions: Sequence[Sequence[bytes]], changes: tuple[int, ...] | None = None) -> np.ndarray:
    """Which merged documents meet every condition — each a list of facet
    keys, met by a document in any of their lists.

    ``changes``: the store's counts of updates and deletes.  With them a mask
    is kept not for one snapshot but for as long as the facet lists stay as
    they are: they change only when a merge adds to them (their entries grow),
    or an update or a delete changes a document's (those counts grow) — a
    write that merges nothing leaves the mask good."""
    name = _name(tx, conditions, changes)
    found = _lookup(tx, name)
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
        with _lock:
            _kept[name] = (tx.dbs, out)
            while len(_kept) > KEPT:
                _kept.popitem(last=False)
    return out


def _name(tx: Tx, conditions: Sequence[Sequence[bytes]], changes: tuple[int, ...] | None) -> tuple | None:
    snap = snapshot(tx)
    if snap is None:
        return None
    state = snap[1] if changes is None else (tx.txn.stat(tx.db(FACETS))["entries"], *changes)
    return id(snap[0]), state, tuple(tuple(keys) for keys in conditions)


def snapshot(tx: Tx) -> Snapshot | None:
    """The store snapshot a read transaction sees (None for a write
    transaction: its snapshot changes as it writes)."""
    if isinstance(tx, WriteTx):
        return None
    return tx.dbs, tx.txn.id()


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
