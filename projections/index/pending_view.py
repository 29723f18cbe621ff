"""The pending records as a search reads them: looked up by term, whole-text
key, session and docno, not scanned.

Every search needs, of the documents written since the last merge, those
holding each query term (and their number), those whose field is the whole
query, the greatest docno, and each session's — and up to ``merge_at`` +
``merge_spread`` of them wait.  Decoding and scanning them all for every search cost more than
the rest of a search; so they are kept, decoded and inverted, between
searches.

Between two merges the pending records change in one way only as long as no
message is updated or deleted: records are added, with docnos greater than
any before.  An *epoch* is such a stretch: the same store's caches (kept in
them, :class:`Epochs`: compaction and replication open new environments, and
so new caches), the same first pending key (a merge empties
``pending``; the next first docno is new), and the same update and delete
counts.  Within an epoch the records are kept in one append-only
:class:`_Epoch`, and each search sees the prefix its own snapshot holds (its
number of pending records, checked against its last key), so searches of
older snapshots running alongside are never shown a newer record.  Anything
else builds a new epoch.

Search scores pending documents as it scores merged ones: a query term's
pending postings in one field are three arrays (docnos, tfs, lengths, in
docno order, :class:`~.arrays.Postings`), added to the sums in one array
step.  An epoch builds a term's arrays the first time a search asks for
them and extends them when records were added since, so a search pays a
Python step only for the postings no search has asked for yet.
"""

from __future__ import annotations

import threading
from bisect import bisect_left

import numpy as np

from eventstore.transaction import Tx, WriteTx

from .arrays import EMPTY, Postings
from .docs import DOC_TIME, raw_doc
from .layout import PENDING, docno_key, docno_of
from .records import Pending, parsed


class _Epoch:
    """The pending records of one epoch, decoded, in docno order, with their
    inverted lists (indexes into ``records``, ascending: append-only)."""

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.records: list[Pending] = []
        self.index: dict[int, int] = {}                    # docno → its index
        self.terms: list[dict[str, list[int]]] = [{}, {}, {}]   # per field: term → indexes
        self.exact: dict[bytes, list[int]] = {}             # whole-text key → indexes
        self.facets: dict[bytes, list[int]] = {}            # facet key → indexes
        self.times: list[int | None] = []                   # each one's timestamp (None: no docs row)
        self.docnos: list[int] = []                         # each one's docno
        self.arrays: dict[tuple[int, str], Postings] = {}   # (field, term) → the postings of a prefix of
                                                            # its records (see :meth:`postings`)

    def read(self, tx: Tx, cur, found: bool) -> None:
        """Add the records from the cursor's place on (``found``: it is on one)."""
        while found:
            self.add(tx, bytes(cur.key()), bytes(cur.value()))
            found = cur.next()

    def add(self, tx: Tx, key: bytes, raw: bytes) -> None:
        p = parsed(docno_of(key), raw)
        i = len(self.records)
        self.records.append(p)
        row = raw_doc(tx, p.docno)
        self.times.append(None if row is None else int.from_bytes(row[DOC_TIME:DOC_TIME + 8], "big"))
        self.index[p.docno] = i
        self.docnos.append(p.docno)
        for terms, tfs in zip(self.terms, p.tfs):
            for term in tfs:
                terms.setdefault(term, []).append(i)
        for k in p.exact:
            self.exact.setdefault(k, []).append(i)
        for k in p.facets:
            self.facets.setdefault(k, []).append(i)

    def postings(self, field: int, term: str) -> Postings:
        """The postings of every record kept with ``term`` in ``field``, as
        arrays (read-only: they are shared by the searches of the epoch).
        Built for the records not in the arrays yet, then kept."""
        found = self.terms[field].get(term)
        if not found:
            return EMPTY
        key = (field, term)
        kept = self.arrays.get(key, EMPTY)
        start, end = len(kept.docnos), len(found)   # another thread may be appending to ``found``
        if start >= end:
            return kept
        records = [self.records[i] for i in found[start:end]]
        new = (np.fromiter([p.docno for p in records], np.int64, len(records)),
               np.fromiter([p.tfs[field][term] for p in records], np.int64, len(records)),
               np.fromiter([p.lengths[field] for p in records], np.int64, len(records)))
        columns = [np.concatenate([old, more]) if start else more for old, more in zip(kept, new)]
        for column in columns:
            column.flags.writeable = False
        kept = self.arrays[key] = Postings(*columns)
        return kept


class PendingView:
    """The first ``n`` records of an epoch: what one snapshot holds."""

    def __init__(self, epoch: _Epoch, n: int) -> None:
        self._epoch, self._n = epoch, n
        self.records = epoch.records[:n]
        self.top = self.records[-1].docno if n else 0
        self._docnos: np.ndarray | None = None

    def __len__(self) -> int:
        return self._n

    def _upto(self, found: list[int] | None) -> list[int]:
        """The indexes of ``found`` within this view, as a list of their own
        (another thread may be appending to ``found`` for a newer snapshot)."""
        if not found:
            return []
        k = len(found)
        if found[k - 1] >= self._n:
            k = bisect_left(found, self._n, 0, k)
        return found[:k]

    def df(self, field: int, term: str) -> int:
        """How many pending documents hold ``term`` in ``field``."""
        return len(self._upto(self._epoch.terms[field].get(term)))

    def postings(self, field: int, term: str) -> Postings:
        """The postings of ``term`` in ``field`` of the pending documents, in docno order."""
        found = self._epoch.postings(field, term)
        docnos = found.docnos
        if not len(docnos) or docnos[-1] <= self.top:
            return found
        k = int(np.searchsorted(docnos, self.top, side="right"))
        return Postings(docnos[:k], found.tfs[:k], found.lengths[:k])

    def with_whole(self, key: bytes) -> list[int]:
        """The docnos (ascending) of the pending documents with a field whose whole text has ``key``."""
        docnos = self._epoch.docnos
        return [docnos[i] for i in self._upto(self._epoch.exact.get(key))]

    def in_session(self, key: bytes) -> list[int]:
        """The docnos (ascending) of the pending documents of the session with facet key ``key``."""
        docnos = self._epoch.docnos
        return [docnos[i] for i in self._upto(self._epoch.facets.get(key))]

    def get(self, docno: int) -> Pending | None:
        i = self._epoch.index.get(docno)
        return self._epoch.records[i] if i is not None and i < self._n else None

    def __contains__(self, docno: int) -> bool:
        i = self._epoch.index.get(docno)
        return i is not None and i < self._n

    def docnos(self) -> np.ndarray:
        """Every pending docno, ascending."""
        if self._docnos is None:
            self._docnos = np.array(self._epoch.docnos[:self._n], np.int64)
        return self._docnos

    def passing(self, conditions: list[frozenset[bytes]], window: tuple[int, int] | None) -> np.ndarray:
        """The docnos (ascending) of the documents that have, for each of
        ``conditions``, one of its facet keys, and a timestamp in ``window``
        (first allowed, first past) when one is given."""
        if not conditions and window is None:
            return self.docnos()
        chosen: set[int] | None = None
        for keys in conditions:
            found: set[int] = set()
            for k in keys:
                found.update(self._upto(self._epoch.facets.get(k)))
            chosen = found if chosen is None else chosen & found
        docnos, times = self._epoch.docnos, self._epoch.times
        if window is None:
            picked = sorted(chosen or ())
        else:
            lo, hi = window
            picked = [i for i in (range(self._n) if chosen is None else sorted(chosen))
                      if (t := times[i]) is not None and lo <= t < hi]
        return np.array([docnos[i] for i in picked], np.int64)


class Epochs:
    """The current epoch of one store (a slot of its caches)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: _Epoch | None = None


def pending_view(tx: Tx, stats: dict[str, int]) -> PendingView:
    """The pending records ``tx`` sees (``stats``: the statistics it sees).
    A write transaction's are read whole and not kept: it may yet abort."""
    epochs = tx.caches.slot(Epochs)
    handle = tx.db(PENDING)
    n = tx.txn.stat(handle)["entries"]
    with tx.txn.cursor(db=handle) as cur:
        if isinstance(tx, WriteTx):
            return _whole(tx, cur, ())
        first = bytes(cur.key()) if cur.first() else b""
        last = docno_of(cur.key()) if cur.last() else -1
        key = (first, stats["updates"], stats["deleted"])
        with epochs.lock:
            epoch = epochs.current
            if epoch is None or epoch.key != key:
                epoch = _Epoch(key)
            if len(epoch.records) < n:       # those after the epoch's last
                after = docno_key(epoch.records[-1].docno + 1) if epoch.records else b""
                epoch.read(tx, cur, cur.set_range(after))
            if n and not (len(epoch.records) >= n and epoch.records[n - 1].docno == last):
                return _whole(tx, cur, key)     # not what this snapshot holds: nothing kept
            epochs.current = epoch
    return PendingView(epoch, n)


def _whole(tx: Tx, cur, key: tuple) -> PendingView:
    epoch = _Epoch(key)
    epoch.read(tx, cur, cur.first())
    return PendingView(epoch, len(epoch.records))
