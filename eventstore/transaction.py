"""Transactions as the store hands them out, and what it asks of the read side.

A :class:`Tx` is an LMDB transaction plus the sub-database handles; a
:class:`WriteTx` is one in which a command decides (id, clock) and appends its
events.  Each batch of events appended is applied at once by the :class:`Projector`,
whose per-transaction state (:class:`TxState`: values held back to be written
once, a replay's work in memory) is flushed just before the commit and closed
after it, committed or not.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import lmdb

from . import codec, ids, meta
from .caches import Caches
from .environment import DbHandle
from .errors import CorruptStoreError
from .events import Event


class TxState(Protocol):
    """What a projector keeps for the length of one write transaction."""

    def flush(self, tx: WriteTx) -> None:
        """Write what was held back, just before the commit."""

    def close(self) -> None:
        """Release what was started (a process, a thread), committed or not."""


class Owner(Protocol):
    """What a write transaction needs of its store (:class:`~eventstore.store.EventStore`)."""

    projector: Projector
    clock: Callable[[], int]
    rng: random.Random

    def last_sequence(self, tx: Tx) -> int: ...


class Projector(Protocol):
    """What the store needs from the read side."""

    schema_version: int
    fingerprint: str          # whatever else the read models' bytes depend on (versions, knobs)
    db_specs: dict[str, dict]

    def begin(self, tx: WriteTx, bulk: bool) -> TxState:
        """The state of a new write transaction; ``bulk`` for a full replay or a bulk import,
        whose work the projector may hold until the flush."""

    def apply(self, tx: WriteTx, batch: Sequence[tuple[int, Event, int]]) -> None:
        """Project each ``(seq, event, encoded size)`` of ``batch``, in order,
        within ``tx``; the read models do not depend on how a log is cut
        into batches (one event is a batch of one)."""


@dataclass
class Tx:
    """A transaction plus the sub-database handles and what the process keeps
    for their environment opening (:mod:`eventstore.caches`), handed to projectors."""

    txn: lmdb.Transaction[bytes]      # never opened with buffers=True: keys and values are bytes
    dbs: dict[str, DbHandle]
    caches: Caches = field(default_factory=Caches)

    def db(self, name: str) -> DbHandle:
        return self.dbs[name]

    def put_last(self, name: str, items: list[tuple[bytes, bytes]]) -> None:
        """Put (key, value) ``items`` that usually come in increasing order after
        every key of ``name``: appended (``MDB_APPEND``: no search, pages left
        full); should one not, all are put again the ordinary way (the same
        pairs stored)."""
        if items:
            cur = self.txn.cursor(db=self.dbs[name])    # closed when dropped (a single write's cheaper than a with)
            if cur.putmulti(items, append=True)[1] != len(items):
                cur.putmulti(items)


@dataclass
class WriteTx(Tx):
    """A write transaction in which a command decides and appends its events.

    ``state`` is the projector's state for this transaction (begun on first
    use); the store flushes it before the commit and closes it afterwards.
    ``before_commit`` holds callables run last, just before the commit (after
    the flush): one that raises aborts the transaction (a replicated store
    publishes the events appended there, and commits only if that worked).
    """

    store: Owner = None  # type: ignore[assignment]
    bulk: bool = False                      # a replay or a bulk import (set before the first event)
    appended: list[tuple[int, int]] = field(default_factory=list)     # (seq, encoded size) of each event appended
    appended_events: list[Event] = field(default_factory=list)       # and the events themselves, in that order
    watermark: int | None = None
    before_commit: list[Callable[[WriteTx], None]] = field(default_factory=list)
    _next_seq: int | None = None
    _state: TxState | None = None

    @property
    def state(self) -> TxState:
        if self._state is None:
            self._state = self.store.projector.begin(self, self.bulk)
        return self._state

    def now_ms(self) -> int:
        return self.store.clock()

    def new_ids(self, times: Sequence[int]) -> list[str]:
        """A new message id stamped with each of ``times``, in turn, each after
        the one before and after every id given so far (a single write asks
        for one); the last id is read and written once, and the OS's
        randomness read once (a seeded generator, as tests give, drawn from
        id by id)."""
        if not times:
            return []
        meta = self.dbs["meta"]
        rng = self.store.rng
        pool = (os.urandom(10 * len(times)) if type(rng) is random.SystemRandom
                else b"".join(rng.getrandbits(80).to_bytes(10, "big") for _ in times))
        newest, texts = ids.next_texts(self.txn.get(b"last_id", db=meta), times, pool)
        if newest is not None:
            self.txn.put(b"last_id", newest, db=meta)
        return texts

    def append(self, events: Sequence[Event], raws: Sequence[bytes] | None = None,
               project: bool = True) -> int:
        """Append ``events`` to the log, numbered in turn, and apply the
        projector to them as one batch (:meth:`Projector.apply`); a single
        event is a batch of one.  Unless ``project`` is False: then the read
        models fall behind the log until a replay, as compaction does.
        ``raws``: the events' encodings, when the caller has them (a replica
        storing the bytes it was sent).  Returns the first event's sequence
        number (the next one, if ``events`` is empty)."""
        if self._next_seq is None:
            self._next_seq = self.store.last_sequence(self) + 1
        first = self._next_seq
        if not events:
            return first
        raws = list(map(codec.encode_event, events)) if raws is None else raws
        seqs = range(first, first + len(raws))
        with self.txn.cursor(db=self.dbs["events"]) as cur:
            if cur.putmulti(list(zip(map(codec.seq_key, seqs), raws)), append=True)[1] != len(raws):
                raise CorruptStoreError("the event log's sequence numbers went backwards")
        self._next_seq = first + len(raws)
        sizes = list(map(len, raws))
        if project:
            self.store.projector.apply(self, list(zip(seqs, events, sizes)))
            self.watermark = seqs[-1]
        self.appended.extend(zip(seqs, sizes))
        self.appended_events.extend(events)
        return first

    def flush(self) -> None:
        """Just before the commit: the projector's state, the watermark, then ``before_commit``."""
        if self._state is not None:
            self._state.flush(self)
        if self.watermark is not None:
            meta.put_int(self.txn, self.dbs["meta"], b"watermark", self.watermark)
        for hook in self.before_commit:
            hook(self)

    def ended(self) -> None:
        """After the commit or abort."""
        if self._state is not None:
            self._state.close()
