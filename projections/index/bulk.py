"""A full replay's index work, kept in memory and written in large steps.

A replay runs in *bulk* mode: the merges the live path would do are followed
in memory (which documents are pending, which merged), and the chunks are
written at the end of the transaction (and every ``bulk_hold`` merged
documents) — the same bytes, without re-reading and re-writing chunks every
``merge_at`` documents.

A written message's postings come gathered with its batch (:mod:`.worker`):
until they are written the message itself stands in the pending or merged
dict.  A message needed earlier (an update or delete reached it), or still
pending at the end, gets its record built here, and its batch's postings are
left out of the lists.  Each message's statistics are counted once: from its
batch, or when its record is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

from eventstore.events import Message
from eventstore.transaction import Tx

from .config import IndexConfig
from .docs import doc_value
from .layout import DOCS, PENDING, TIMES, docno_key, docno_of, time_key
from .lists import merge_records, put_appending
from .records import Record, count, count_lengths, facet_keys, record_of
from .worker import Builder, WorkerHold


class BulkReplay:
    def __init__(self, tx: Tx, config: IndexConfig, hold: WorkerHold | None = None) -> None:
        self.tx, self.config = tx, config
        self.pending: dict[int, Record | Message] = {}
        self.merged: dict[int, Record | Message] = {}     # merged, not yet written
        self.deltas: dict[str, int] = {}
        self.rows: list[tuple[bytes, bytes]] = []          # docs rows of written messages, not written yet
        self.times: list[tuple[bytes, bytes]] = []         # and their times keys
        self.builder = Builder(config, hold)
        with tx.txn.cursor(db=tx.db(PENDING)) as cur:
            self.pending.update((docno_of(k), Record.decode(v)) for k, v in cur)
        tx.txn.drop(tx.db(PENDING), delete=False)

    def index(self, docno: int, msg: Message) -> None:
        key = docno_key(docno)
        self.rows.append((key, doc_value(key, msg)))
        self.times.append((time_key(msg.timestamp, docno), b""))
        self.pending[docno] = msg
        self.builder.add(docno, msg)
        if len(self.pending) >= self.config.merge_at:
            self.merged.update(self.pending)
            self.pending.clear()
            if len(self.merged) >= self.config.bulk_hold:
                self._write_merged()

    def index_many(self, written: list[tuple[int, Message]]) -> None:
        """:meth:`index` for each ``(docno, message)`` in turn."""
        rows, times, pending, add = self.rows, self.times, self.pending, self.builder.add
        merge_at = self.config.merge_at
        for docno, msg in written:
            key = docno_key(docno)
            rows.append((key, doc_value(key, msg)))
            times.append((time_key(msg.timestamp, docno), b""))
            pending[docno] = msg
            add(docno, msg)
            if len(pending) >= merge_at:
                self.merged.update(pending)
                pending.clear()
                if len(self.merged) >= self.config.bulk_hold:
                    self._write_merged()
                    rows, times = self.rows, self.times

    def held(self, docno: int) -> tuple[Record | None, bool]:
        """(record, pending) of a document not written yet, else (None, False).
        Its docs row is about to be read or changed: the rows held are written."""
        self._write_rows()
        for where, pend in ((self.pending, True), (self.merged, False)):
            rec = where.get(docno)
            if isinstance(rec, Message):
                rec = self._built(docno, rec)   # its batch's postings are left out
            if rec is not None:
                return rec, pend
        return None, False

    def store_held(self, docno: int, rec: Record | None, pend: bool) -> None:
        where = self.pending if pend else self.merged
        if rec is None:
            del where[docno]
        else:
            where[docno] = rec

    def _built(self, docno: int, msg: Message) -> Record:
        """Build the record ``msg`` stands in for, put it in its place, and count it."""
        rec = record_of(msg)
        count(self.deltas, enumerate(rec.fields), +1)
        where = self.pending if self.pending.get(docno) is msg else self.merged
        where[docno] = rec
        return rec

    def _write_merged(self) -> None:
        """Write every merged document: those still standing in as messages
        from their batch's gathered postings, the rest record by record."""
        lists, done = self.builder.lists()
        exact: list[tuple[bytes, bytes]] = []
        facets: list[tuple[bytes, bytes]] = []
        invalid: set[int] = set()
        merged = self.merged
        lengths: Sequence[int]             # a batch's array, or the part of it still live
        for items, docnos, fields in done:
            live = [merged.get(d) is m for d, m in items]
            invalid.update(d for d, ok in zip(docnos, live) if not ok)
            dks = list(map(docno_key, docnos))
            for f, (lengths, keys) in enumerate(fields):
                if not all(live):
                    lengths = [x for x, ok in zip(lengths, live) if ok]
                    keys = [x if ok else () for x, ok in zip(keys, live)]
                count_lengths(self.deltas, f, lengths, keys)
                exact.extend((k, dk) for dk, found in zip(dks, keys) for k in found)
            for (docno, msg), dk, ok in zip(items, dks, live):
                if ok:
                    facets.extend(zip(facet_keys(msg), repeat(dk)))
                    del merged[docno]
        if invalid:
            lists.exclude(invalid)
        for docno, held in list(self.pending.items()):
            if isinstance(held, Message):
                self._built(docno, held)
        records = [(d, r) for d, r in sorted(self.merged.items())   # built early (an update or
                   if isinstance(r, Record)]                        # delete came), or loaded
        if len(records) != len(self.merged):
            raise AssertionError("a merged message was neither written from its batch nor built")
        self.merged.clear()
        merge_records(self.tx, self.config.cut, records, lists, exact, facets)

    def _write_rows(self) -> None:
        """The docs rows (and times keys) of the messages written since the last
        time, put at once: the same rows as :func:`.docs.put` writes one by one."""
        if self.rows:
            put_appending(self.tx, DOCS, self.rows)
            put_appending(self.tx, TIMES, self.times)
            self.rows, self.times = [], []

    def finish(self) -> dict[str, int]:
        """Write everything held; returns the statistics to add."""
        self._write_rows()
        self._write_merged()
        with self.tx.txn.cursor(db=self.tx.db(PENDING)) as cur:
            cur.putmulti(sorted((docno_key(d), r.encode()) for d, r in self.pending.items()
                                if isinstance(r, Record)))
        self.pending.clear()
        return self.deltas

    def stop(self) -> None:
        self.builder.stop()
