"""Events: one frozen dataclass per fact.  ``TYPE`` is the fact's name (the
type tag of schema version 1; :mod:`eventstore.codec` owns the byte layout).

A command decides everything non-deterministic (id, clock, revision) and puts
it in the event, so applying events is a pure function of the log.

``MessageWritten`` is both "a message was created" and, after compaction,
"this message exists with this current state" (a re-materialized event).
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("conversation", "episode", "semantic", "procedure", "preference", "summary")
TIERS = ("short", "mid", "long", "discard")
ROLES = ("user", "assistant", "system")
RELATION_TYPES = ("depends_on", "derived_from", "supersedes", "related_to")


@dataclass(frozen=True)
class Metadata:
    tags: tuple[str, ...] = ()
    memory_tier: str = "short"
    memory_kind: str = "conversation"
    importance: int = 50
    tool_call_id: str | None = None
    summary: str | None = None
    relations: tuple[tuple[str, str], ...] = ()   # (type, target message id)
    source_message_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Message:
    message_id: str
    session_id: str
    role: str
    content: str
    timestamp: int
    updated_at: int
    revision: int = 1
    metadata: Metadata = field(default_factory=Metadata)


@dataclass(frozen=True)
class MessageWritten:
    TYPE = "MessageWritten"
    message: Message
    principal: str | None = None       # who wrote it (a name, never a secret); None in older logs


@dataclass(frozen=True)
class MessageUpdated:
    """``content`` is None when the content did not change; metadata is whole."""

    TYPE = "MessageUpdated"
    message_id: str
    revision: int
    updated_at: int
    content: str | None
    metadata: Metadata
    principal: str | None = None


@dataclass(frozen=True)
class MessageDeleted:
    TYPE = "MessageDeleted"
    message_id: str
    principal: str | None = None
    deleted_at: int | None = None      # ms since the epoch; None in older logs


Event = MessageWritten | MessageUpdated | MessageDeleted


# -------------------------------------------------- built without __init__
# A frozen dataclass's ``__init__`` sets each field through
# ``object.__setattr__``: a fifth of decoding an event, and as much of
# building one for each imported turn.  These build the same objects with
# their ``__dict__`` given at once: a dict made whole, set in one step (the
# ``__dict__`` an object hands out when asked would do too, but the
# attributes of an object whose dict was asked for are read at about half
# the speed, and every read model reads a message's).  A test compares them
# with the constructors', and checks that no class has slots or a
# ``__post_init__`` this would skip.  The caller passes values of the fields' types.
_new = object.__new__
_set = object.__setattr__


def written(message_id: str, session_id: str, role: str, content: str, timestamp: int,
            updated_at: int, revision: int, metadata: Metadata, principal: str | None = None) -> MessageWritten:
    """``MessageWritten(Message(...))``, built at once."""
    m = _new(Message)
    _set(m, "__dict__", {"message_id": message_id, "session_id": session_id, "role": role, "content": content,
                         "timestamp": timestamp, "updated_at": updated_at, "revision": revision,
                         "metadata": metadata})
    event = _new(MessageWritten)
    _set(event, "__dict__", {"message": m, "principal": principal})
    return event


def metadata(tags: tuple[str, ...], memory_tier: str, memory_kind: str, importance: int,
             tool_call_id: str | None, summary: str | None, relations: tuple[tuple[str, str], ...],
             source_message_ids: tuple[str, ...]) -> Metadata:
    """``Metadata(...)`` with every field given, built at once."""
    meta = _new(Metadata)
    _set(meta, "__dict__", {"tags": tags, "memory_tier": memory_tier, "memory_kind": memory_kind,
                            "importance": importance, "tool_call_id": tool_call_id, "summary": summary,
                            "relations": relations, "source_message_ids": source_message_ids})
    return meta
