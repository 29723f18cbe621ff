"""The projector: every read model, applied to each event in its write transaction.

Deterministic: a function of ``(transaction state, event)`` only — no clock, no
id generation, no configuration — so replaying the log reproduces the live
read models byte for byte.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from eventstore.codec import DEFAULT_METADATA, dumps, metadata_to_list
from eventstore.errors import CorruptStoreError
from eventstore.events import Event, MessageDeleted, MessageUpdated, MessageWritten
from eventstore.store import WriteTx as Tx

from . import history, messages, relations, sessions, stats, terms

SCHEMA_VERSION = 4


@lru_cache(maxsize=4096)
def _metadata_size(meta) -> int:
    return len(dumps(metadata_to_list(meta)))


def _metadata_bytes(meta) -> int:
    """The encoded size of a metadata value (values repeat a lot: cached by
    value; the default one, which decoding gives as one object, by identity)."""
    return _DEFAULT_SIZE if meta is DEFAULT_METADATA else _metadata_size(meta)


_DEFAULT_SIZE = _metadata_size(DEFAULT_METADATA)


class Projector:
    schema_version = SCHEMA_VERSION
    db_specs = {**messages.SPECS, **history.SPECS, **sessions.SPECS, **relations.SPECS,
                **terms.SPECS, **stats.SPECS}

    def apply(self, tx: Tx, seq: int, event: Event, size: int) -> None:
        if isinstance(event, MessageWritten):
            self._written(tx, seq, event, size)
        elif isinstance(event, MessageUpdated):
            self._updated(tx, seq, event, size)
        elif isinstance(event, MessageDeleted):
            self._deleted(tx, event, size)
        else:
            raise CorruptStoreError("the log holds an event no projector knows")

    def _written(self, tx: Tx, seq: int, event: MessageWritten, size: int) -> None:
        msg = event.message
        messages.put_written(tx, msg.message_id, seq)
        history.add(tx, msg.session_id, msg.message_id)
        sessions.added(tx, msg.session_id, msg.message_id, msg.timestamp, msg.metadata.memory_kind)
        relations.add(tx, msg.message_id, msg.metadata)
        terms.index(tx, seq, msg)
        stats.add(tx, active=1, body_bytes=len(msg.content.encode("utf-8")),
                  metadata_bytes=_metadata_bytes(msg.metadata))

    def _updated(self, tx: Tx, seq: int, event: MessageUpdated, size: int) -> None:
        old = self._require(tx, event.message_id)
        changed = event.content is not None
        # an unchanged content is neither loaded nor re-indexed (see terms.reindex)
        old_msg = messages.load(tx, old) if changed else messages.without_content(old)
        new = messages.after_update(old, seq, event, size)
        new_msg = replace(old_msg, content=event.content if changed else old_msg.content,
                          metadata=event.metadata, revision=event.revision, updated_at=event.updated_at)
        messages.put(tx, new)
        old_kind, new_kind = old.metadata.memory_kind, new.metadata.memory_kind
        if old_kind != new_kind:
            sessions.rekinded(tx, old.session_id, old_kind, new_kind)
        relations.remove(tx, old.message_id, old.metadata)
        relations.add(tx, new.message_id, new.metadata)
        terms.reindex(tx, old.docno, old_msg, new_msg, changed)
        dead = size + (0 if old.dead_counted else old.log_bytes)
        stats.add(tx, updates=1, dead_bytes=dead, body_bytes=new.content_bytes - old.content_bytes,
                  metadata_bytes=_metadata_bytes(new.metadata) - _metadata_bytes(old.metadata))

    def _deleted(self, tx: Tx, event: MessageDeleted, size: int) -> None:
        old = self._require(tx, event.message_id)
        old_msg = messages.load(tx, old)
        terms.unindex(tx, old.docno, old_msg)
        relations.remove(tx, old.message_id, old.metadata)
        history.remove(tx, old.session_id, old.message_id)
        messages.remove(tx, old.message_id)
        sessions.removed(tx, old.session_id, old.message_id, old.metadata.memory_kind)
        dead = size + (0 if old.dead_counted else old.log_bytes)
        stats.add(tx, active=-1, deleted=1, dead_bytes=dead, body_bytes=-old.content_bytes,
                  metadata_bytes=-_metadata_bytes(old.metadata))

    @staticmethod
    def _require(tx: Tx, message_id: str) -> messages.State:
        state = messages.get(tx, message_id)
        if state is None:
            raise CorruptStoreError("the log changes a message that does not exist")
        return state
