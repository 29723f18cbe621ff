"""Posting lists gathered in memory, and written into ``postings``,
``exact`` and ``facets``.

:class:`PostingLists` collects postings per list (field, term) in docno
order, from records one at a time (the live path's merges; a bulk
transaction's batches are kept as columns: :mod:`.columns`), and writes
them: merged into the chunks already stored (:meth:`write`) or, into an
empty ``postings``, appended chunk by chunk (:meth:`append`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from itertools import repeat
from typing import TYPE_CHECKING

from eventstore.transaction import Tx

from .chunks import Change, boundary, cut_list, merge_list
from .layout import EXACT, FACETS, FIELDS, POSTINGS, docno_key, list_prefix
from .records import FieldEntry, Record, note_tfs

if TYPE_CHECKING:
    from .columns import ColumnLists


class PostingLists:
    """Postings gathered per list in docno order: per field, each term's
    docnos and its tfs above 1, and the field's length in each document (kept
    once a document, not once a posting: looked up per list when written)."""

    def __init__(self, cut: int) -> None:
        self.cut = cut
        self.docnos: list[defaultdict[str, list[int]]] = [defaultdict(list) for _ in FIELDS]
        self.lengths: list[dict[int, int]] = [{} for _ in FIELDS]
        self.tfs: list[dict[str, dict[int, int]]] = [{} for _ in FIELDS]
        self.remove: list[dict[str, set[int]]] = [{} for _ in FIELDS]
        self.bounds: set[int] = set()
        self.firsts: list[dict[str, int]] = [{} for _ in FIELDS]    # a list's first boundary: its index

    def add(self, field: int, docno: int, entry: FieldEntry) -> None:
        names = entry.terms
        if not names:
            return
        lists = self.docnos[field]
        if boundary(docno, self.cut):
            self.bounds.add(docno)
            firsts = self.firsts[field]
            for term in names:
                firsts.setdefault(term, len(lists[term]))
        self.lengths[field][docno] = entry.length
        for term in names:
            lists[term].append(docno)
        note_tfs(self.tfs[field], docno, entry)

    def drop(self, field: int, docno: int, entry: FieldEntry) -> None:
        for term in entry.terms:
            self.remove[field].setdefault(term, set()).add(docno)

    def count(self) -> int:
        """How many lists get postings."""
        return sum(map(len, self.docnos))

    def keys(self) -> list[tuple[int, str]]:
        """(field, term) of every list touched, in key order (a term's code
        points sort as its UTF-8 bytes)."""
        return [(field, term) for field in range(len(FIELDS))
                for term in sorted(self.docnos[field].keys() | self.remove[field].keys())]

    def change(self, field: int, term: str) -> tuple[bytes, Change]:
        """The key prefix of one list touched and what to do to it."""
        docnos = self.docnos[field].get(term, [])
        extra = self.tfs[field].get(term)
        return list_prefix(field, term), Change(
            docnos, list(map(extra.get, docnos, repeat(1))) if extra else None,
            list(map(self.lengths[field].__getitem__, docnos)), self.remove[field].get(term, set()),
            self.bounds, self.firsts[field].get(term, len(docnos)))

    def write(self, tx: Tx) -> None:
        """Merge every list into the chunks stored."""
        with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
            for key in self.keys():
                merge_list(cur, *self.change(*key), self.cut)

    def append(self, tx: Tx) -> None:
        """Write the lists into an empty ``postings``: each cut into its chunks
        at once, every chunk appended in key order (pages filled, no search)."""
        items = []
        for key in self.keys():
            prefix, (docnos, tfs, lengths, *_) = self.change(*key)
            items.extend(cut_list(prefix, docnos, tfs, lengths, self.cut, self.bounds))
        with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
            _, added = cur.putmulti(items, append=True)
        if added != len(items):
            raise AssertionError("posting chunks were not appended in key order")


def merge_records(tx: Tx, records: list[tuple[int, Record]], lists: ColumnLists,
                  exact: list[tuple[bytes, bytes]], facets: list[tuple[bytes, bytes]]) -> None:
    """Merge whole records (ascending docno) into postings, exact and facets,
    with what ``lists``, ``exact`` and ``facets`` already hold (a bulk replay's)."""
    for docno, rec in records:
        dk = docno_key(docno)
        for f, entry in enumerate(rec.fields):
            lists.add(f, docno, entry)
            exact.extend((k, dk) for k in entry.exact)
        facets.extend((k, dk) for k in rec.facets)
    lists.put(tx)
    put_dups(tx, EXACT, exact, newest=True)
    put_dups(tx, FACETS, facets, newest=True)


def add_fields(tx: Tx, cut: int, docno: int, entries: dict[int, FieldEntry]) -> None:
    """Put some fields of a merged document into postings and exact."""
    lists = PostingLists(cut)
    dk = docno_key(docno)
    for f, entry in entries.items():
        lists.add(f, docno, entry)
        put_dups(tx, EXACT, [(k, dk) for k in entry.exact])
    lists.write(tx)


def remove_fields(tx: Tx, cut: int, docno: int, entries: dict[int, FieldEntry]) -> None:
    """Take some fields of a merged document out of postings and exact."""
    lists = PostingLists(cut)
    dk = docno_key(docno)
    for f, entry in entries.items():
        lists.drop(f, docno, entry)
        delete_dups(tx, EXACT, ((k, dk) for k in entry.exact))
    lists.write(tx)


def put_dups(tx: Tx, db: str, items: list[tuple[bytes, bytes]], newest: bool = False) -> None:
    """Put (key, docno) pairs.  ``newest``: every docno is greater than any
    already under its key (a merge's), so each goes at the end of its key's
    duplicates (``MDB_APPENDDUP``: full pages left behind, not half-full ones);
    should one not, the pairs are put again the ordinary way."""
    if newest:
        put_appending(tx, db, items)
    elif items:
        items.sort()
        with tx.txn.cursor(db=tx.db(db)) as cur:
            cur.putmulti(items)


def put_appending(tx: Tx, db: str, items: list[tuple[bytes, bytes]]) -> None:
    """Put (key, value) pairs that usually all sort after what ``db`` holds:
    sorted and appended (``MDB_APPEND``/``MDB_APPENDDUP``: no search, pages
    left full); should one not, they are all put again the ordinary way."""
    items.sort()
    tx.put_last(db, items)


def delete_dups(tx: Tx, db: str, items: Iterable[tuple[bytes, bytes]]) -> None:
    handle = tx.db(db)
    for k, v in items:
        tx.txn.delete(k, v, db=handle)
