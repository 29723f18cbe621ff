"""The projector: every read model, applied to each event in its write transaction.

Deterministic: a function of ``(transaction state, event)`` only — no clock, no
id generation — so replaying the log reproduces the live read models byte for
byte.  The one input besides the log, :class:`~projections.index.IndexConfig`,
decides bytes only through its layout knobs, which are part of the index
fingerprint kept in the store (a store opened with other ones is rebuilt).

**The order of the projectors is declared here, once**, because some read
models read others while they change:

* written — ``messages`` first (the state the others may look up), then
  ``history`` (``sessions.added`` asks it for the session's ends), then
  ``sessions``, ``relations``, the term index, and the statistics.
* updated — the old state is read before ``messages`` is overwritten;
  ``sessions.rekinded`` only counts; relations are removed then added; the
  term index moves only the fields that changed.
* deleted — the term index and ``relations`` first (they need the message's
  state), then ``history`` and ``messages`` lose it, and ``sessions.removed``
  comes **last**: it finds the session's new first and last message in
  ``history`` and reads their timestamps from ``messages``, both already
  without the deleted one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from itertools import groupby
from operator import attrgetter

import Stemmer

from eventstore.codec import DEFAULT_METADATA, metadata_size
from eventstore.errors import CorruptStoreError
from eventstore.events import Event, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from eventstore.store import TxState, WriteTx

from . import history, messages, relations, revisions, sessions, stats, tokens
from . import index as term_index
from .index import IndexConfig
from .index.live import IndexWork
from .index.worker import WorkerHold

SCHEMA_VERSION = 7


def _metadata_bytes(meta: Metadata) -> int:
    """The encoded size of a metadata value (the default one, which decoding
    gives as one object, known by identity)."""
    return _DEFAULT_SIZE if meta is DEFAULT_METADATA else metadata_size(meta)


_DEFAULT_SIZE = metadata_size(DEFAULT_METADATA)


class ProjectionState:
    """Everything the read models keep for the length of one write transaction:
    the statistics and session entries changed (written once, at the flush),
    and the term index's work (a replay's, held in memory)."""

    def __init__(self, config: IndexConfig, bulk: bool, hold: WorkerHold | None = None) -> None:
        self.counters = stats.Counters()
        self.sessions = sessions.OpenSessions()
        self.index = IndexWork(config, bulk, hold)

    def flush(self, tx: WriteTx) -> None:
        """Just before the commit: the index writes what it held (and hands
        over its field statistics), then the sessions and statistics."""
        deltas = self.index.finish(tx)
        if deltas:
            self.counters.add(tx, deltas)
        self.sessions.flush(tx)
        self.counters.flush(tx)

    def close(self) -> None:
        """After the commit or abort."""
        self.index.close()


class Projector:
    schema_version = SCHEMA_VERSION
    db_specs = {**messages.SPECS, **history.SPECS, **sessions.SPECS, **relations.SPECS,
                **term_index.SPECS, **stats.SPECS, **revisions.SPECS}

    def __init__(self, config: IndexConfig = term_index.DEFAULT) -> None:
        self.config = config
        self.fingerprint = fingerprint(config)
        self.hold = WorkerHold()

    def begin(self, tx: WriteTx, bulk: bool) -> ProjectionState:
        return ProjectionState(self.config, bulk, self.hold)

    @contextmanager
    def bulk_run(self) -> Iterator[None]:
        """A run of bulk transactions (an import's batches): they share the
        term index's second process, which would otherwise start again with
        each; it is stopped when the run ends.  Changes no byte."""
        self.hold.keep = True
        try:
            yield
        finally:
            self.hold.release()

    def apply(self, tx: WriteTx, seq: int, event: Event, size: int) -> None:
        state = tx.state
        if not isinstance(state, ProjectionState):
            raise TypeError("the transaction's state was not begun by this projector")
        if isinstance(event, MessageWritten):
            self._written(tx, state, seq, event)
        elif isinstance(event, MessageUpdated):
            self._updated(tx, state, seq, event, size)
        elif isinstance(event, MessageDeleted):
            self._deleted(tx, state, event, size)
        else:
            raise CorruptStoreError("the log holds an event no projector knows")

    def apply_many(self, tx: WriteTx, batch: Sequence[tuple[int, Event, int]]) -> None:
        """:meth:`apply` for each ``(seq, event, size)`` in turn: each run of
        written messages is projected at once, one call a read model (the same
        bytes: written messages read nothing another one writes, but for
        ``sessions.added``'s look into ``history``, which is brought up to
        date before any)."""
        run: list[tuple[int, Message]] = []
        by: list[tuple[Message, str | None]] = []
        for seq, event, size in batch:
            if isinstance(event, MessageWritten):
                run.append((seq, event.message))
                by.append((event.message, event.principal))
                continue
            if run:
                self._written_many(tx, tx.state, run)
                revisions.written_many(tx, by)
                run, by = [], []
            self.apply(tx, seq, event, size)
        if run:
            self._written_many(tx, tx.state, run)
            revisions.written_many(tx, by)

    @staticmethod
    def _written_many(tx: WriteTx, state: TxState, run: list[tuple[int, Message]]) -> None:
        if not isinstance(state, ProjectionState):
            raise TypeError("the transaction's state was not begun by this projector")
        messages.put_written_many(tx, run)
        opened, hist = state.sessions, []
        for sid, group in groupby([msg for _, msg in run], attrgetter("session_id")):   # a session's run
            written = list(group)
            keys = history.keys(sid, written)
            if sessions.added_newest_many(opened, sid, written):
                hist += keys
                continue
            for key, msg in zip(keys, written):
                hist.append(key)
                if not sessions.added_newest_many(opened, sid, [msg]):
                    history.put_many(tx, hist)     # what history lists when this message is counted
                    hist = []
                    sessions.added(tx, opened, sid, msg.message_id, msg.timestamp, msg.metadata.memory_kind)
        history.put_many(tx, hist)
        relations.add_many(tx, [msg for _, msg in run if msg.metadata.relations])
        state.index.index_many(tx, run)
        body = meta = 0
        for _, msg in run:
            body += len(msg.content.encode("utf-8"))
            meta += _metadata_bytes(msg.metadata)
        state.counters.add(tx, active=len(run), body_bytes=body, metadata_bytes=meta)

    @staticmethod
    def _written(tx: WriteTx, state: ProjectionState, seq: int, event: MessageWritten) -> None:
        msg = event.message
        messages.put_written(tx, msg.message_id, seq)
        history.add(tx, msg.session_id, msg.message_id)
        sessions.added(tx, state.sessions, msg.session_id, msg.message_id, msg.timestamp,
                       msg.metadata.memory_kind)
        relations.add(tx, msg.message_id, msg.metadata)
        revisions.written(tx, msg, event.principal)
        state.index.index(tx, seq, msg)
        state.counters.written(tx, len(msg.content.encode("utf-8")), _metadata_bytes(msg.metadata))

    @staticmethod
    def _updated(tx: WriteTx, state: ProjectionState, seq: int, event: MessageUpdated, size: int) -> None:
        old = _require(tx, event.message_id)
        changed = event.content is not None
        # an unchanged content is neither loaded nor re-indexed (see IndexWork.reindex)
        old_msg = messages.load(tx, old) if changed else messages.without_content(old)
        new = messages.after_update(old, seq, event, size)
        new_msg = replace(old_msg, content=event.content if event.content is not None else old_msg.content,
                          metadata=event.metadata, revision=event.revision, updated_at=event.updated_at)
        messages.put(tx, new)
        old_kind, new_kind = old.metadata.memory_kind, new.metadata.memory_kind
        if old_kind != new_kind:
            sessions.rekinded(tx, state.sessions, old.session_id, old_kind, new_kind)
        relations.remove(tx, old.message_id, old.metadata)
        relations.add(tx, new.message_id, new.metadata)
        revisions.updated(tx, old.metadata, event)
        state.index.reindex(tx, old.docno, old_msg, new_msg, changed)
        dead = size + (0 if old.dead_counted else old.log_bytes)
        state.counters.add(tx, updates=1, dead_bytes=dead, body_bytes=new.content_bytes - old.content_bytes,
                           metadata_bytes=_metadata_bytes(new.metadata) - _metadata_bytes(old.metadata))

    @staticmethod
    def _deleted(tx: WriteTx, state: ProjectionState, event: MessageDeleted, size: int) -> None:
        old = _require(tx, event.message_id)
        old_msg = messages.load(tx, old)
        state.index.unindex(tx, old.docno, old_msg)
        relations.remove(tx, old.message_id, old.metadata)
        revisions.deleted(tx, old.message_id)
        history.remove(tx, old.session_id, old.message_id)
        messages.remove(tx, old.message_id)
        sessions.removed(tx, state.sessions, old.session_id, old.message_id, old.metadata.memory_kind)
        dead = size + (0 if old.dead_counted else old.log_bytes)
        state.counters.add(tx, active=-1, deleted=1, dead_bytes=dead, body_bytes=-old.content_bytes,
                           metadata_bytes=-_metadata_bytes(old.metadata))


def fingerprint(config: IndexConfig) -> str:
    """What the read models' bytes depend on besides the log and the schema:
    the tokenizer's version, the stemmer's, the Unicode tables' (NFKC and case
    folding change with them) and the index layout knobs.  The store keeps it
    and rebuilds the read models when it differs, so upgrading PyStemmer or
    Python can never leave an index that disagrees with its queries."""
    return (f"tokens={tokens.VERSION} stemmer={Stemmer.version()} unicode={unicodedata.unidata_version} "
            f"{config.layout()}")


def _require(tx: WriteTx, message_id: str) -> messages.State:
    state = messages.get(tx, message_id)
    if state is None:
        raise CorruptStoreError("the log changes a message that does not exist")
    return state
