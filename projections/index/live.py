"""The term index's projector: a message indexed, re-indexed or taken out,
within one write transaction.

A written message's record goes to ``pending`` (one put instead of ~35
postings scattered over the tree); the write after which the merge policy
(:class:`~.policy.MergePolicy`) finds a merge due merges the oldest records
into ``postings``, ``exact`` and ``facets`` in its own transaction, so the
cost of touching the tree is shared by the writes in between — and the
writes just before it do the merge's work ahead (:class:`~.merging.MergeWork`),
so that no one write pays for all of it.  When the merges happen depends on
the sequence of index operations alone, never on how they were grouped into
transactions.  In a replay (``bulk``) the same work is followed in memory by
:class:`~.bulk.BulkReplay` and written at the end.
"""

from __future__ import annotations

from typing import Protocol

from eventstore.events import Message
from eventstore.transaction import Tx

from . import docs
from .bulk import BulkReplay
from .config import IndexConfig
from .layout import FACETS, FIELDS, PENDING, docno_key
from .lists import add_fields, delete_dups, put_dups, remove_fields
from .merging import MergeWork
from .records import Record, count, entries_of, facet_keys, record_of, texts_of
from .worker import WorkerHold


class IndexWriter(Protocol):
    """What :class:`IndexWork` asks of the writer behind it: :class:`LiveIndex`
    (each operation written through) or :class:`~.bulk.BulkReplay` (a replay's,
    held in memory) — both merge when the same :class:`~.policy.MergePolicy`
    says so, and leave the same bytes."""

    def index(self, written: list[tuple[int, Message]]) -> None:
        """Index each written ``(docno, message)`` in turn (docnos only grow)."""

    def held(self, docno: int) -> tuple[Record | None, bool]:
        """(record, pending) of a document about to be updated or deleted, if
        not merged into the tree yet, else (None, False)."""

    def store_held(self, docno: int, rec: Record | None, pend: bool) -> None:
        """Replace (None: drop) the record of a document :meth:`held` returned."""

    def finish(self) -> dict[str, int]:
        """Write what is held; returns the field statistics to add."""

    def stop(self) -> None:
        """Release what the writer started, committed or not."""


class LiveIndex:
    """The live :class:`IndexWriter`: a record a write, merged when due."""

    def __init__(self, tx: Tx, config: IndexConfig) -> None:
        self.tx, self.policy = tx, config.policy
        self.deltas: dict[str, int] = {}
        self.work = tx.caches.slot(MergeWork)
        self.work.begin(tx, config.cut)

    def index(self, written: list[tuple[int, Message]]) -> None:
        tx, policy, work = self.tx, self.policy, self.work
        handle = tx.db(PENDING)
        for docno, msg in written:
            docs.put(tx, docno, msg, new=True)
            rec = record_of(msg)
            count(self.deltas, enumerate(rec.fields), +1)
            tx.txn.put(docno_key(docno), rec.stored(), db=handle)
            pending = tx.txn.stat(handle)["entries"]
            if policy.due(pending):
                work.merge(tx, policy.records)
            elif units := policy.share(pending, work.todo(policy.records)):
                work.advance(tx, policy.records, units)

    def held(self, docno: int) -> tuple[Record | None, bool]:
        self.work.changing(docno)       # the document is about to change
        raw = self.tx.txn.get(docno_key(docno), db=self.tx.db(PENDING))
        return (None, False) if raw is None else (Record.decode(raw), True)

    def store_held(self, docno: int, rec: Record | None, pend: bool) -> None:
        if rec is None:
            self.tx.txn.delete(docno_key(docno), db=self.tx.db(PENDING))
        else:
            self.tx.txn.put(docno_key(docno), rec.encode(), db=self.tx.db(PENDING))

    def finish(self) -> dict[str, int]:
        out, self.deltas = self.deltas, {}
        return out

    def stop(self) -> None:
        """Nothing runs beside a live write."""


class IndexWork:
    """The term index's part of one write transaction's state."""

    def __init__(self, config: IndexConfig, bulk: bool, hold: WorkerHold | None = None) -> None:
        self.config, self.bulk, self.hold = config, bulk, hold
        self.deltas: dict[str, int] = {}        # field statistics to add at the flush
        self.writer: IndexWriter | None = None

    def _writer(self, tx: Tx) -> IndexWriter:
        if self.writer is None:
            self.writer = BulkReplay(tx, self.config, self.hold) if self.bulk else LiveIndex(tx, self.config)
        return self.writer

    # ---------------------------------------------------------- operations
    def index(self, tx: Tx, written: list[tuple[int, Message]]) -> None:
        """Index each written ``(docno, message)`` in turn (one message is a batch of one)."""
        self._writer(tx).index(written)

    def unindex(self, tx: Tx, docno: int, msg: Message) -> None:
        rec, pend = self._writer(tx).held(docno)
        if rec is not None:
            self._writer(tx).store_held(docno, None, pend)
        else:
            rec = record_of(msg)
            remove_fields(tx, self.config.cut, docno, dict(enumerate(rec.fields)))
            delete_dups(tx, FACETS, ((k, docno_key(docno)) for k in rec.facets))
        docs.delete(tx, docno, msg.timestamp)
        count(self.deltas, enumerate(rec.fields), -1)

    def reindex(self, tx: Tx, docno: int, old: Message, new: Message, content_changed: bool) -> None:
        """Move an updated message's index entries from ``old`` to ``new``, touching
        only the fields that changed: the same bytes as unindex + index would leave
        in the tree, without re-tokenizing an unchanged content."""
        changed = [f for f, (was, now) in enumerate(zip(texts_of(old), texts_of(new)))
                   if (f or content_changed) and was != now]
        before, after = entries_of(old, changed), entries_of(new, changed)
        count(self.deltas, before.items(), -1)
        count(self.deltas, after.items(), +1)
        new_facets = facet_keys(new)
        rec, pend = self._writer(tx).held(docno)     # (in a replay, the docs rows held are written first)
        docs.put(tx, docno, new, new=False)
        if rec is not None:
            for f, entry in after.items():
                rec.fields[f] = entry
            rec.facets = new_facets
            self._writer(tx).store_held(docno, rec, pend)
            return
        remove_fields(tx, self.config.cut, docno, before)
        add_fields(tx, self.config.cut, docno, after)
        dk = docno_key(docno)
        gone, came = set(facet_keys(old)), set(new_facets)
        delete_dups(tx, FACETS, ((k, dk) for k in sorted(gone - came)))
        put_dups(tx, FACETS, [(k, dk) for k in sorted(came - gone)])

    # --------------------------------------------------- the transaction's end
    def finish(self, tx: Tx) -> dict[str, int]:
        """Write what the writer held; returns the field statistics to add."""
        if self.writer is not None:
            for k, v in self.writer.finish().items():
                self.deltas[k] = self.deltas.get(k, 0) + v
        out, self.deltas = self.deltas, {}
        return out

    def close(self) -> None:
        """Stop what the writer started (a replay's second process), committed
        or not, and let the writer go: it holds the transaction, which holds
        this, and the cycle would otherwise wait for the cyclic collector."""
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.stop()


__all__ = ["FIELDS", "IndexWork", "IndexWriter", "LiveIndex"]
