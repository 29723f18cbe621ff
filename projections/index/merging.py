"""A live merge's work, done ahead by the writes before it.

A merge of 2,048 pending records costs ~50 ms of CPU: reading and inverting
the records (~20 ms), then, for each of the ~2,400 posting lists they touch,
decoding the list's tail and encoding it again with the new postings
(~25 ms), and sorting the ``exact`` and ``facets`` pairs.  Done by the one
write that finds the merge due, that is the write tail.  The merge policy
(:class:`~.policy.MergePolicy`) lets the ``spread`` writes before the merge
do it ahead, each an even share: :class:`MergeWork` gathers the records to
merge a slice at a time, then computes each list's new chunks a slice at a
time, and keeps them; the write that merges only puts them (LMDB puts in one
call, no decoding) and moves the records out of ``pending``.

Nothing a search reads changes before the merge: the chunks computed wait
here, in memory.  They are the bytes the merge would have computed itself,
as long as nothing it read has changed since — the records gathered and the
lists' tails.  The work is dropped when that may not hold, and done again by
the writes left (at worst all by the merging write, as without spreading):

* a write transaction that does not follow the one that last used the work
  (LMDB's transaction id: an abort, another process's commit, a transaction
  that did not touch the index, a replay, a compaction);
* an update or delete of a document merged or gathered already (it changes
  a posting list or a gathered record).

The work lives in the open store's caches (:class:`~eventstore.caches.Caches`):
a fresh environment opening starts with none.
"""

from __future__ import annotations

from eventstore.transaction import Tx

from .chunks import appended, merge_list
from .layout import EXACT, FACETS, PENDING, POSTINGS, docno_key, docno_of
from .lists import PostingLists
from .records import Record


class MergeWork:
    """The work done ahead for the next merge of one store's live writer (a
    :class:`~eventstore.caches.Caches` slot; only the writer uses it)."""

    def __init__(self) -> None:
        self.txn_id, self.cut = -1, 0
        self.clear()

    def clear(self) -> None:
        """Drop what was done."""
        self.lists = PostingLists(self.cut)
        self.next = b""                          # the pending key to gather from
        self.gathered = 0                        # records gathered (the oldest pending)
        self.last = -1                           # the docno of the last of them
        self.exact: dict[bytes, list[bytes]] = {}     # a whole-text key → the docno keys that have it
        self.facets: dict[bytes, list[bytes]] = {}    # a facet key → the docno keys that have it
        self.pairs: list[list[tuple[bytes, bytes]]] = []  # (key, docno key) to put in exact, facets: in order
        self.keys: list[tuple[int, str]] | None = None   # every list touched, once all are gathered
        self.done = 0                            # of them: computed
        self.chunks: list[tuple[bytes, bytes]] = []      # what to put in ``postings``, in key order
        self.others: list[tuple[int, str]] = []  # lists not appended to (merged the general way)

    def begin(self, tx: Tx, cut: int) -> None:
        """A write transaction starts using the work (lists cut by ``cut``): it
        is kept only if the transaction follows the last one that used it
        (see the module's doc)."""
        txn_id = tx.txn.id()
        if txn_id != self.txn_id + 1 or cut != self.cut:
            self.cut = cut
            self.clear()
        self.txn_id = txn_id

    def changing(self, docno: int) -> None:
        """The document ``docno`` is about to be updated or deleted."""
        if docno <= self.last:
            self.clear()

    def todo(self, records: int) -> int:
        """Units of work left for a merge of ``records`` records: a record to
        gather, a list to compute (about a list for each record not gathered
        yet), and sorting the lists and pairs once all are gathered (about an
        eighth of computing them)."""
        if self.keys is not None:
            return len(self.keys) - self.done
        lists = self.lists.count()
        return 2 * (records - self.gathered) + lists + lists // 8

    def advance(self, tx: Tx, records: int, units: int) -> None:
        """Do ``units`` units of the work for a merge of the oldest ``records``
        pending records: gather them first, then compute their lists."""
        units -= self._gather(tx, records, units)
        if self.keys is None and self.gathered == records:
            cost = self.lists.count() // 8
            if units < cost:
                return                  # the next write's
            units -= cost
            self._sealed()
        if self.keys is not None and units > 0:
            self._compute(tx, units)

    def _sealed(self) -> None:
        """Every record is gathered: the lists to compute are known, and the
        pairs in order (each key's docno keys came in order: only the keys
        are sorted)."""
        self.keys = self.lists.keys()
        self.pairs = [[(k, dk) for k in sorted(by_key) for dk in by_key[k]] for by_key in (self.exact, self.facets)]

    def merge(self, tx: Tx, records: int) -> None:
        """Merge the oldest ``records`` pending records (what is left of the work done now)."""
        self.advance(tx, records, 1 << 62)
        if not self.gathered:
            return
        if self.keys is None:               # fewer pending than ``records``
            self._sealed()
            self._compute(tx, 1 << 62)
        with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
            cur.putmulti(self.chunks)
            for key in self.others:
                merge_list(cur, *self.lists.change(*key), self.cut)
        exact, facets = self.pairs
        tx.put_last(EXACT, exact)
        tx.put_last(FACETS, facets)
        handle = tx.db(PENDING)
        with tx.txn.cursor(db=handle) as cur:
            rest = list(cur.iternext() if cur.set_range(self.next) else ())
        tx.txn.drop(handle, delete=False)
        tx.put_last(PENDING, rest)
        self.clear()

    def _gather(self, tx: Tx, records: int, units: int) -> int:
        """Gather up to ``units`` more of the oldest ``records`` pending records; returns how many."""
        want = min(units, records - self.gathered)
        if want <= 0:
            return 0
        lists, exact, facets = self.lists, self.exact, self.facets
        with tx.txn.cursor(db=tx.db(PENDING)) as cur:
            found = cur.set_range(self.next)
            got = 0
            while found and got < want:
                docno, rec = docno_of(cur.key()), Record.loaded(cur.value())
                dk = docno_key(docno)
                for f, entry in enumerate(rec.fields):
                    lists.add(f, docno, entry)
                    for k in entry.exact:
                        exact.setdefault(k, []).append(dk)
                for k in rec.facets:
                    facets.setdefault(k, []).append(dk)
                got += 1
                self.last = docno
                found = cur.next()
            self.next = docno_key(self.last + 1)
        self.gathered += got
        return got

    def _compute(self, tx: Tx, units: int) -> None:
        """Compute the new chunks of up to ``units`` more lists (once all are gathered)."""
        keys, lists = self.keys or [], self.lists
        end = min(self.done + units, len(keys))
        with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
            for key in keys[self.done:end]:
                prefix, change = lists.change(*key)
                items = appended(cur, prefix, change, self.cut) if change.docnos and not change.remove else None
                if items is None:
                    self.others.append(key)
                else:
                    self.chunks += items
        self.done = end
