"""Who wrote what: the event log read as entries for a person (``convmem log``).

Each event is one entry: its sequence number, time, principal (as its event
records it; null for events from before principals, and for the messages a
compaction wrote whole), what happened (``written``, ``updated``,
``deleted``), the message and its session, and for an update what changed
(:func:`projections.revisions.changed`).  A deletion from before deletions
carried their time has none: ``--since`` keeps every entry from the first one
at or after that time on (the log is in commit order).  Reads the whole log in one read
transaction; the sessions of messages are learnt from their written events on
the way, so a deleted message's entries still name its session.
"""

from __future__ import annotations

from collections.abc import Iterator

from eventstore.events import MessageDeleted, MessageUpdated, MessageWritten, Metadata
from projections import revisions

from .service import MemoryService


def entries(service: MemoryService, principal: str | None = None, session: str | None = None,
            since: int | None = None) -> Iterator[dict]:
    """The log's entries, oldest first, that match every filter given."""
    with service.store.read() as tx:
        sessions: dict[str, str] = {}
        metadata: dict[str, Metadata] = {}
        started = since is None
        for seq, event, _size in service.store.iter_events(tx):
            entry = _entry(seq, event, sessions, metadata)
            if not started and entry["at"] is not None and entry["at"] >= since:
                started = True
            if not started or (principal is not None and entry["principal"] != principal) \
                    or (session is not None and entry["session_id"] != session):
                continue
            yield entry


def _entry(seq: int, event, sessions: dict[str, str], metadata: dict[str, Metadata]) -> dict:
    if isinstance(event, MessageWritten):
        m = event.message
        sessions[m.message_id], metadata[m.message_id] = m.session_id, m.metadata
        return {"sequence": seq, "at": m.updated_at, "principal": event.principal, "event": "written",
                "message_id": m.message_id, "session_id": m.session_id, "revision": m.revision, "changed": []}
    if isinstance(event, MessageUpdated):
        old = metadata.get(event.message_id, event.metadata)
        metadata[event.message_id] = event.metadata
        return {"sequence": seq, "at": event.updated_at, "principal": event.principal, "event": "updated",
                "message_id": event.message_id, "session_id": sessions.get(event.message_id),
                "revision": event.revision, "changed": revisions.changed(old, event)}
    if isinstance(event, MessageDeleted):
        metadata.pop(event.message_id, None)
        return {"sequence": seq, "at": event.deleted_at, "principal": event.principal, "event": "deleted",
                "message_id": event.message_id, "session_id": sessions.pop(event.message_id, None),
                "revision": None, "changed": []}
    raise TypeError(f"not an event: {type(event).__name__}")
