"""The seven tools: input schemas, annotations, and argument → service call.

Each handler validates the raw ``arguments`` (the SDK does not), makes one
call into :class:`~server.service.MemoryService`, and returns the JSON body.
No ``mcp`` import here: :mod:`server.app` wraps these in MCP types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eventstore.errors import ValidationError
from eventstore.events import KINDS, RELATION_TYPES, ROLES, TIERS, Metadata
from projections.search import Filters

from . import validation as v
from .service import MemoryService

ULID_DOC = "canonical 26-character upper-case ULID"


def _s(desc: str, **extra) -> dict:
    return {"type": "string", "description": desc, **extra}


def _i(desc: str, lo: int, hi: int | None = None, default: int | None = None) -> dict:
    out = {"type": "integer", "description": desc, "minimum": lo}
    if hi is not None:
        out["maximum"] = hi
    if default is not None:
        out["default"] = default
    return out


def _schema(props: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": props, "required": list(required),
            "additionalProperties": False}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    schema: dict
    read_only: bool
    destructive: bool
    idempotent: bool
    writes: bool                 # runs on the single writer thread
    handler: Callable[[MemoryService, dict], dict]


# ---------------------------------------------------------------- handlers
def _opt(a: dict, key: str, check: Callable[[Any], Any], default: Any = None) -> Any:
    """``check(a[key])`` when the parameter is present (``null`` included), else ``default``."""
    return check(a[key]) if key in a else default


def _int(field: str, lo: int, hi: int | None = None) -> Callable[[Any], int]:
    return lambda value: v.integer(value, field, lo, hi)


def _content_text(value: Any) -> str:
    return v.text(value, "content", min_bytes=1, max_bytes=v.MAX_CONTENT)


def _write(svc: MemoryService, a: dict) -> dict:
    a = v.check_keys(a, {"session_id", "role", "content", "metadata_json"},
                     ("session_id", "role", "content"))
    sid = v.session_id(a["session_id"])
    role = v.role(a["role"])
    content = _content_text(a["content"])
    meta = v.apply_patch(Metadata(), _opt(a, "metadata_json", v.metadata_patch, {}))
    return svc.write_message(sid, role, content, meta)


def _update(svc: MemoryService, a: dict) -> dict:
    a = v.check_keys(a, {"message_id", "content", "metadata_json", "expected_revision"}, ("message_id",))
    mid = v.ulid(a["message_id"], "message_id")
    if "content" not in a and "metadata_json" not in a:
        raise ValidationError("content, metadata_json: at least one is required")
    content = _opt(a, "content", _content_text)
    patch = _opt(a, "metadata_json", v.metadata_patch, {})
    rev = _opt(a, "expected_revision", _int("expected_revision", 1))
    return svc.update_message(mid, content, patch, rev)


_VIEW_PARAMS = {
    "history": {"session_id", "limit", "cursor"},
    "content": {"message_id", "content_offset", "content_limit", "expected_revision"},
    "context": {"message_id", "before", "after", "relation_depth", "relation_types_json"},
    "sessions": {"limit", "cursor"},
}


def _read(svc: MemoryService, a: dict) -> dict:
    a = v.check_keys(a, set().union(*_VIEW_PARAMS.values()) | {"view"})
    view = _opt(a, "view", lambda x: v.choice(x, "view", tuple(_VIEW_PARAMS)), "history")
    for key in a:
        if key != "view" and key not in _VIEW_PARAMS[view]:
            raise ValidationError(f"{key}: is not a parameter of the {view} view")
    return _VIEWS[view](svc, a)


def _cursor(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError("cursor: must be a nextCursor returned by this view for the same session")
    return value


def _history(svc: MemoryService, a: dict) -> dict:
    v.check_keys(a, set(a), ("session_id",))
    sid = v.session_id(a["session_id"])
    limit = _opt(a, "limit", _int("limit", 1, 1000), 100)
    return svc.history(sid, limit, _opt(a, "cursor", _cursor))


def _content(svc: MemoryService, a: dict) -> dict:
    v.check_keys(a, set(a), ("message_id",))
    mid = v.ulid(a["message_id"], "message_id")
    offset = _opt(a, "content_offset", _int("content_offset", 0), 0)
    limit = _opt(a, "content_limit", _int("content_limit", 1, 65536), 4096)
    rev = _opt(a, "expected_revision", _int("expected_revision", 1))
    return svc.content_range(mid, offset, limit, rev)


def _context(svc: MemoryService, a: dict) -> dict:
    v.check_keys(a, set(a), ("message_id",))
    mid = v.ulid(a["message_id"], "message_id")
    before = _opt(a, "before", _int("before", 0, 10), 1)
    after = _opt(a, "after", _int("after", 0, 10), 1)
    depth = _opt(a, "relation_depth", _int("relation_depth", 0, 2), 1)
    types = _opt(a, "relation_types_json", v.relation_types, frozenset(RELATION_TYPES))
    return svc.context(mid, before, after, depth, types)


def _sessions(svc: MemoryService, a: dict) -> dict:
    limit = _opt(a, "limit", _int("limit", 1, 1000), 100)
    return svc.sessions(limit, _opt(a, "cursor", _cursor))


_VIEWS = {"history": _history, "content": _content, "context": _context, "sessions": _sessions}


def _search(svc: MemoryService, a: dict) -> dict:
    a = v.check_keys(a, {"query", "session_id", "filters_json", "min_importance", "context_size", "limit"},
                     ("query",))
    query = v.text(a["query"], "query", min_bytes=1, max_bytes=4096)
    f = _opt(a, "filters_json", v.filters, {})
    flt = Filters(session_id=_opt(a, "session_id", v.session_id),
                  kinds=f.get("kinds", frozenset()), tiers=f.get("tiers", frozenset()),
                  tags=f.get("tags", ()),
                  min_importance=_opt(a, "min_importance", _int("min_importance", 0, 100), 0))
    context_size = _opt(a, "context_size", _int("context_size", 0, 3), 0)
    limit = _opt(a, "limit", _int("limit", 1, 100), 20)
    return svc.search(query, flt, context_size, limit)


def _delete(svc: MemoryService, a: dict) -> dict:
    a = v.check_keys(a, {"message_id", "session_id"}, ("message_id",))
    mid = v.ulid(a["message_id"], "message_id")
    return svc.delete_message(mid, _opt(a, "session_id", v.session_id))


def _rebuild(svc: MemoryService, a: dict) -> dict:
    v.check_keys(a, set())
    return svc.rebuild()


def _health(svc: MemoryService, a: dict) -> dict:
    v.check_keys(a, set())
    return svc.health()


# ------------------------------------------------------------------ schemas
_METADATA_DOC = (
    "JSON object as a string. Fields: tool_call_id (string ≤256 bytes), tags (≤32 non-empty "
    f"strings ≤128 bytes), memory_tier ({'/'.join(TIERS)}), memory_kind ({'/'.join(KINDS)}), "
    "importance (integer 0-100), summary (string ≤4096 bytes; \"\" clears), relations (≤32 "
    f"{{\"type\",\"message_id\"}} with type {'/'.join(RELATION_TYPES)}), source_message_ids (≤64 ULIDs).")

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("write_message",
             "Store one conversation message or distilled memory durably. Returns the stored message "
             "with its server-generated id, timestamp and revision 1.",
             _schema({"session_id": _s("Session/conversation id, 1-256 UTF-8 bytes, no NUL."),
                      "role": _s("Who said it.", enum=list(ROLES)),
                      "content": _s("Message text, 1 byte to 1 MiB of UTF-8."),
                      "metadata_json": _s(_METADATA_DOC + " Default {}.")},
                     ("session_id", "role", "content")),
             False, False, False, True, _write),
    ToolSpec("update_message",
             "Change a message's content and/or metadata fields (fields absent from metadata_json are "
             "kept). An update that changes nothing returns changed:false and writes nothing.",
             _schema({"message_id": _s("Id of the message (" + ULID_DOC + ")."),
                      "content": _s("New content, 1 byte to 1 MiB."),
                      "metadata_json": _s("Metadata fields to replace. " + _METADATA_DOC),
                      "expected_revision": _i("Fail with CONFLICT unless this is the current revision.", 1)},
                     ("message_id",)),
             False, False, True, True, _update),
    ToolSpec("read_messages",
             "Read stored messages. view=history: a session's messages in order (session_id, limit, cursor). "
             "view=content: a byte range of one long message (message_id, content_offset, content_limit, "
             "expected_revision). view=context: a message with its neighbours and related messages "
             "(message_id, before, after, relation_depth, relation_types_json). view=sessions: all "
             "sessions with counts (limit, cursor).",
             _schema({"view": _s("Which view; default history.", enum=list(_VIEW_PARAMS), default="history"),
                      "session_id": _s("history: the session to read, 1-256 bytes."),
                      "limit": _i("history/sessions: page size.", 1, 1000, 100),
                      "cursor": _s("history/sessions: nextCursor from the previous page of the same view."),
                      "message_id": _s("content/context: the message (" + ULID_DOC + ")."),
                      "content_offset": _i("content: UTF-8 byte offset to start at (a code-point boundary).", 0,
                                           default=0),
                      "content_limit": _i("content: bytes to return at most.", 1, 65536, 4096),
                      "expected_revision": _i("content: fail with CONFLICT unless this is the current revision.",
                                              1),
                      "before": _i("context: earlier messages of the session to include.", 0, 10, 1),
                      "after": _i("context: later messages of the session to include.", 0, 10, 1),
                      "relation_depth": _i("context: how far to follow relations.", 0, 2, 1),
                      "relation_types_json": _s("context: JSON array of relation types to follow; default all.")}),
             True, False, True, False, _read),
    ToolSpec("search_messages",
             "Full-text search over content, summary and tags of live messages (English, Japanese and "
             "other scripts, code identifiers). Results are ranked by score (0-1) with a per-field breakdown.",
             _schema({"query": _s("What to look for, 1-4096 bytes."),
                      "session_id": _s("Only search this session."),
                      "filters_json": _s('JSON object string: {"kinds":[...],"tiers":[...],"tags":[...]}; '
                                         "kinds/tiers match any listed, tags must all be present."),
                      "min_importance": _i("Only messages at least this important.", 0, 100, 0),
                      "context_size": _i("Neighbouring messages to include around each result.", 0, 3, 0),
                      "limit": _i("Maximum number of results.", 1, 100, 20)},
                     ("query",)),
             True, False, True, False, _search),
    ToolSpec("delete_message",
             "Delete a message from every read and search at once. Returns status NOT_FOUND (not an error) "
             "when it is unknown, already deleted, or in another session than session_id. Its text leaves "
             "the disk at the next rebuild_index.",
             _schema({"message_id": _s("The message (" + ULID_DOC + ")."),
                      "session_id": _s("Guard: delete only if the message belongs to this session.")},
                     ("message_id",)),
             False, True, True, True, _delete),
    ToolSpec("rebuild_index",
             "Compact the store: drop deleted messages and old revisions for good, rebuild every index, "
             "and replace the data file atomically. Blocks other requests; BUSY if another process has "
             "the store open.",
             _schema({}), False, True, True, True, _rebuild),
    ToolSpec("get_system_health",
             "Report the store's state: message counts, sizes, I/O counters, integrity flags and the last error.",
             _schema({}), True, False, True, False, _health),
)

BY_NAME = {t.name: t for t in TOOLS}
