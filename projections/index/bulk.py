"""A full replay's index work, kept in memory and written in large steps.

A replay runs in *bulk* mode: the merges the live path would do (the same
:class:`~.policy.MergePolicy` decides them) are followed in memory (which
documents are pending, which merged), and the chunks are written at the end
of the transaction (and every ``bulk_hold`` merged documents) — the same
bytes, without re-reading and re-writing chunks at every merge.

A written message's postings come gathered with its batch (:mod:`.worker`):
until they are written the message itself stands in the pending or merged
dict.  A message needed earlier (an update or delete reached it) gets its
record built here, one still pending at a write gets it from its batch's
gathered postings (not tokenized again), and either way its batch's
postings are left out of the lists.  Each message's statistics are counted
once: from its batch, or when its record is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat
from operator import itemgetter
from typing import NamedTuple

from eventstore.events import Message
from eventstore.transaction import Tx

from .config import IndexConfig
from .docs import doc_value
from .gather import GatheredField
from .layout import DOCS, PENDING, TIMES, docno_key, docno_of, time_key
from .lists import merge_records, put_appending
from .records import Record, count, count_lengths, facet_keys, record_of
from .worker import Builder, WorkerHold

Fields = Sequence[GatheredField]         # a batch's gathered postings, per field


class BulkReplay:
    def __init__(self, tx: Tx, config: IndexConfig, hold: WorkerHold | None = None) -> None:
        self.tx, self.config, self.policy = tx, config, config.policy
        self.pending: dict[int, Record | Message] = {}
        self.merged: dict[int, Record | Message] = {}     # merged, not yet written
        self.deltas: dict[str, int] = {}
        self.rows: list[tuple[bytes, bytes]] = []          # docs rows of written messages, not written yet
        self.times: list[tuple[bytes, bytes]] = []         # and their times keys
        self.builder = Builder(config, hold)
        self.keyed: list[_Keys] = []                        # the keys of the builder's first batches done
        with tx.txn.cursor(db=tx.db(PENDING)) as cur:
            self.pending.update((docno_of(k), Record.loaded(v)) for k, v in cur)
        tx.txn.drop(tx.db(PENDING), delete=False)

    def index(self, written: list[tuple[int, Message]]) -> None:
        """Index each written ``(docno, message)`` in turn: the docs rows of
        all at once, the rest a merge's worth of messages at a time."""
        keys = [docno_key(d) for d, _ in written]
        self.rows += zip(keys, map(doc_value, keys, [m for _, m in written]))
        self.times += [(time_key(m.timestamp, d), b"") for d, m in written]
        if len(self.rows) >= self.config.build_batch:
            # during the replay, not in the write at its end; the times keys wait (they
            # need not come in docno order: appended at once, their pages stay full)
            put_appending(self.tx, DOCS, self.rows)
            self.rows = []
        pending, policy, at = self.pending, self.policy, 0
        while at < len(written):
            part = written[at:at + policy.room(len(pending))]
            at += len(part)
            pending.update(part)
            self.builder.add_many(part)
            if policy.due(len(pending)):
                for docno in sorted(pending)[:policy.records]:       # the oldest
                    self.merged[docno] = pending.pop(docno)
                if len(self.merged) >= self.config.bulk_hold:
                    self._write_merged()
        done = self.builder.done
        self.keyed += [_batch_keys(*batch) for batch in done[len(self.keyed):]]

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

    def _built(self, docno: int, msg: Message, rec: Record | None = None) -> Record:
        """Build the record ``msg`` stands in for (unless given), put it in its place, and count it."""
        if rec is None:
            rec = record_of(msg)
        count(self.deltas, enumerate(rec.fields), +1)
        where = self.pending if self.pending.get(docno) is msg else self.merged
        where[docno] = rec
        return rec

    def _write_merged(self, last: bool = False) -> None:
        """Write every merged document: those still standing in as messages
        from their batch's gathered postings, the rest record by record
        (``last``: the transaction's last write, see :meth:`.Builder.lists`)."""
        lists, done = self.builder.lists(last)
        keyed, self.keyed = self.keyed, []
        exact: list[tuple[bytes, bytes]] = []
        facets: dict[tuple[bytes, ...], list[bytes]] = {}      # a document's facet keys → the docno keys that have them
        invalid: set[int] = set()
        merged = self.merged
        for i, (items, docnos, fields) in enumerate(done):
            pre = keyed[i] if i < len(keyed) else _batch_keys(items, docnos, fields)
            live = [merged.get(d) is m for d, m in items]
            if all(live):              # the usual case: its keys were found during the replay
                for f, field in enumerate(fields):
                    count_lengths(self.deltas, f, field.lengths, field.exact)
                exact += pre.exact
                for key, dks in pre.facets.items():
                    facets.setdefault(key, []).extend(dks)
            else:
                invalid.update(d for d, ok in zip(docnos, live) if not ok)
                self._some_live(items, fields, pre.dks, live, exact, facets)
                self._pending_of(items, fields)
            for (docno, _), ok in zip(items, live):
                if ok:
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
        exact.sort(key=itemgetter(0))      # stable: each key's docnos stay in order, as a sort of the pairs leaves
        # them (each batch's pairs come sorted already: this sort merges the runs)
        merge_records(self.tx, records, lists, exact, _pairs(facets))

    def _some_live(self, items: list[tuple[int, Message]], fields: Fields, dks: list[bytes], live: list[bool],
                   exact: list[tuple[bytes, bytes]], facets: dict[tuple[bytes, ...], list[bytes]]) -> None:
        """What a batch some of whose messages changed since adds: its live ones' statistics and keys."""
        for f, field in enumerate(fields):
            lengths = [x for x, ok in zip(field.lengths, live) if ok]
            keys = [x if ok else () for x, ok in zip(field.exact, live)]
            count_lengths(self.deltas, f, lengths, keys)
            exact.extend((k, dk) for dk, found in zip(dks, keys) for k in found)
        for (_, msg), dk, ok in zip(items, dks, live):
            if ok:
                facets.setdefault(tuple(facet_keys(msg)), []).append(dk)

    def _pending_of(self, items: list[tuple[int, Message]], fields: Fields) -> None:
        """The records of a batch's messages still pending, from its gathered
        postings (what :func:`~.records.record_of` gives, without tokenizing
        again): the batch's last messages, usually, at the transaction's end."""
        pending = self.pending
        at = [j for j, (docno, msg) in enumerate(items) if pending.get(docno) is msg]
        if not at:
            return
        per_field = [field.entries(at) for field in fields]
        for j, *entries in zip(at, *per_field):
            docno, msg = items[j]
            self._built(docno, msg, Record(entries, facet_keys(msg)))

    def _write_rows(self) -> None:
        """The docs rows (and times keys) of the messages written since the last
        time, put at once: the same rows as :func:`.docs.put` writes one by one."""
        if self.times:                  # (every row has its times key; some rows are written already)
            put_appending(self.tx, DOCS, self.rows)
            put_appending(self.tx, TIMES, self.times)
            self.rows, self.times = [], []

    def finish(self) -> dict[str, int]:
        """Write everything held; returns the statistics to add."""
        self._write_rows()
        self._write_merged(last=True)
        with self.tx.txn.cursor(db=self.tx.db(PENDING)) as cur:
            cur.putmulti(sorted((docno_key(d), r.stored()) for d, r in self.pending.items()
                                if isinstance(r, Record)))
        self.pending.clear()
        return self.deltas

    def stop(self) -> None:
        self.builder.stop()


class _Keys(NamedTuple):
    """A batch's docno keys, and what it adds to ``exact`` and ``facets``
    if all its messages are still live when written (found during the
    replay, while the second process gathers, not in the write at its end)."""

    dks: list[bytes]
    exact: list[tuple[bytes, bytes]]
    facets: dict[tuple[bytes, ...], list[bytes]]


def _batch_keys(items: list[tuple[int, Message]], docnos: list[int],
                fields: Fields) -> _Keys:
    dks = list(map(docno_key, docnos))
    facets: dict[tuple[bytes, ...], list[bytes]] = {}
    for (_, msg), dk in zip(items, dks):
        facets.setdefault(tuple(facet_keys(msg)), []).append(dk)
    exact = [(k, dk) for field in fields for dk, found in zip(dks, field.exact) for k in found]
    exact.sort(key=itemgetter(0))       # stable (see _write_merged)
    return _Keys(dks, exact, facets)


def _pairs(groups: dict[tuple[bytes, ...], list[bytes]]) -> list[tuple[bytes, bytes]]:
    """(key, docno key) pairs in order, from the docno keys (each list in
    order) of the documents that have the same keys.  Documents share their
    facet keys by the hundred (a session's, a source's): sorting the keys
    alone costs about half of what sorting every pair would."""
    by_key: dict[bytes, list[list[bytes]]] = {}
    for keys, dks in groups.items():
        for k in keys:
            by_key.setdefault(k, []).append(dks)
    out: list[tuple[bytes, bytes]] = []
    for k in sorted(by_key):
        runs = by_key[k]
        out.extend(zip(repeat(k), runs[0] if len(runs) == 1 else sorted(chain.from_iterable(runs))))
    return out
