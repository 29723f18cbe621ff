"""The projector: every read model, applied to each batch of events in its write transaction.

Deterministic: a function of ``(transaction state, event)`` only — no clock, no
id generation — so replaying the log reproduces the live read models byte for
byte.  It has one entry, :meth:`Projector.apply`, which takes a batch (a live
write is a batch of one); each read model takes a run of written messages in
one call, and how the log is cut into batches changes no byte.  The one
input besides the log, :class:`~projections.index.IndexConfig`, decides bytes
only through its layout knobs, which are part of the index fingerprint kept
in the store (a store opened with other ones is rebuilt).

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

import Stemmer

from eventstore.codec import DEFAULT_METADATA, metadata_size
from eventstore.errors import CorruptStoreError
from eventstore.events import Event, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from eventstore.store import WriteTx

from . import history, messages, relations, revisions, sessions, stats, tokens
from . import index as term_index
from .index import IndexConfig
from .index.live import IndexWork
from .index.worker import WorkerHold

SCHEMA_VERSION = 8


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

    def apply(self, tx: WriteTx, batch: Sequence[tuple[int, Event, int]]) -> None:
        """Project each ``(seq, event, size)`` of ``batch`` in turn; each run of
        written messages at once, one call a read model (the same bytes as one
        at a time: a written message reads nothing another one writes, but for
        ``sessions.added``'s look into ``history``, whose answer does not
        depend on how many of the run it lists already)."""
        state = tx.state
        if not isinstance(state, ProjectionState):
            raise TypeError("the transaction's state was not begun by this projector")
        run: list[tuple[int, MessageWritten]] = []
        for seq, event, size in batch:
            if isinstance(event, MessageWritten):
                run.append((seq, event))
                continue
            if run:
                self._written(tx, state, run)
                run = []
            if isinstance(event, MessageUpdated):
                self._updated(tx, state, seq, event, size)
            elif isinstance(event, MessageDeleted):
                self._deleted(tx, state, event, size)
            else:
                raise CorruptStoreError("the log holds an event no projector knows")
        if run:
            self._written(tx, state, run)

    @staticmethod
    def _written(tx: WriteTx, state: ProjectionState, run: list[tuple[int, MessageWritten]]) -> None:
        docs = [(seq, event.message) for seq, event in run]
        written = [msg for _, msg in docs]
        messages.put_written(tx, docs)
        history.add(tx, written)
        by_session: dict[str, list[Message]] = {}
        for msg in written:
            by_session.setdefault(msg.session_id, []).append(msg)
        for sid, group in by_session.items():
            sessions.added(tx, state.sessions, sid, group)
        relations.add(tx, [(msg.message_id, msg.metadata) for msg in written])
        state.index.index(tx, docs)
        body = meta = 0
        for msg in written:
            body += len(msg.content.encode("utf-8"))
            meta += _metadata_bytes(msg.metadata)
        state.counters.add(tx, active=len(run), body_bytes=body, metadata_bytes=meta)

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
        relations.add(tx, [(new.message_id, new.metadata)])
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
