"""The seven tools: each one's parameters, annotations and service call, declared once.

Each tool's parameter table is the single source of its ``inputSchema`` and of the
checks its arguments go through (:mod:`server.schema`); docs/tools.md documents the
same tables, and tests/test_docs_contract.py keeps the two equal.  A handler gets the
checked values and makes one call into :class:`~server.service.MemoryService`.
No ``mcp`` import here: :mod:`server.app` wraps these in MCP types.
"""

from __future__ import annotations

from collections.abc import Callable

from eventstore.codec import DEFAULT_METADATA
from eventstore.events import KINDS, RELATION_TYPES, ROLES, TIERS
from projections.query import Filters

from . import validation as v
from .principals import LOCAL, Principal
from .schema import Args, Param, ToolSpec
from .service import MemoryService

ULID_DOC = "canonical 26-character upper-case ULID"
_METADATA_DOC = (
    "JSON object as a string. Fields: tool_call_id (string ≤256 bytes), tags (≤32 non-empty "
    f"strings ≤128 bytes), memory_tier ({'/'.join(TIERS)}), memory_kind ({'/'.join(KINDS)}), "
    "importance (integer 0-100), summary (string ≤4096 bytes; \"\" clears), relations (≤32 "
    f"{{\"type\",\"message_id\"}} with type {'/'.join(RELATION_TYPES)}), source_message_ids (≤64 ULIDs).")
_ALL_RELATION_TYPES = '["' + '","'.join(RELATION_TYPES) + '"]'


# --------------------------------------------------------- shared parameters
def _session_id(description: str, **more) -> Param:
    return Param(name="session_id", type="string", description=description,
                 min_bytes=1, max_bytes=v.MAX_SESSION_ID, no_nul=True, **more)


def _message_id(description: str, **more) -> Param:
    return Param(name="message_id", type="string", description=description, required=True, check=v.ulid, **more)


def _content(description: str, **more) -> Param:
    return Param(name="content", type="string", description=description, min_bytes=1, max_bytes=v.MAX_CONTENT,
                 **more)


def _metadata_json(description: str) -> Param:
    return Param(name="metadata_json", type="string", description=description, default="{}",
                 check=v.metadata_patch, json_text="object")


def _expected_revision(description: str, **more) -> Param:
    return Param(name="expected_revision", type="integer", description=description, minimum=1, **more)


# ------------------------------------------------------------------ handlers
def _write(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    patch = a["metadata_json"]
    # default metadata is the codec's one object: the projections know its size by identity
    meta = v.apply_patch(DEFAULT_METADATA, patch) if patch else DEFAULT_METADATA
    return svc.write_message(a["session_id"], a["role"], a["content"], meta, principal=p)


def _update(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.update_message(a["message_id"], a["content"], a["metadata_json"], a["expected_revision"],
                              principal=p)


def _history(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.history(a["session_id"], a["limit"], a["cursor"], principal=p)


def _content_range(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.content_range(a["message_id"], a["content_offset"], a["content_limit"], a["expected_revision"],
                             principal=p)


def _context(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.context(a["message_id"], a["before"], a["after"], a["relation_depth"], a["relation_types_json"],
                       principal=p)


def _sessions(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.sessions(a["limit"], a["cursor"], principal=p)


def _revisions(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.revisions(a["message_id"], principal=p)


_VIEWS: dict[str, tuple[str, Callable[[MemoryService, Args, Principal], dict]]] = {
    "history": ("a session's messages in order", _history),
    "content": ("a byte range of one long message", _content_range),
    "context": ("a message with its neighbours and related messages", _context),
    "sessions": ("all sessions with counts", _sessions),
    "revisions": ("one message's revisions, oldest first, with who made each and what it changed", _revisions),
}


def _read(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return _VIEWS[a["view"]][1](svc, a, p)


def _search(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    f = a["filters_json"]
    flt = Filters(session_id=a["session_id"], kinds=f.get("kinds", frozenset()), tiers=f.get("tiers", frozenset()),
                  tags=f.get("tags", ()), min_importance=a["min_importance"], roles=f.get("roles", frozenset()),
                  after=f.get("after"), before=f.get("before"))
    return svc.search(a["query"], flt, a["context_size"], a["limit"], superseded=f.get("superseded", "include"),
                      principal=p)


def _delete(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.delete_message(a["message_id"], a["session_id"], principal=p)


def _rebuild(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.rebuild(principal=p)


def _health(svc: MemoryService, a: Args, p: Principal = LOCAL) -> dict:
    return svc.health(principal=p)


# ------------------------------------------------------------- the tables
_READ_PARAMS = (
    Param(name="view", type="string", description="Which view; default history.", enum=tuple(_VIEWS),
          default="history"),
    _session_id("history: the session to read, 1-256 bytes.", required=True, views=("history",)),
    Param(name="limit", type="integer", description="history/sessions: page size.", minimum=1, maximum=1000,
          default=100, views=("history", "sessions")),
    Param(name="cursor", type="string", description="history/sessions: nextCursor from the previous page of the "
          "same view.", check=v.cursor, views=("history", "sessions")),
    _message_id("content/context/revisions: the message (" + ULID_DOC + ").",
                views=("content", "context", "revisions")),
    Param(name="content_offset", type="integer", description="content: UTF-8 byte offset to start at (a "
          "code-point boundary).", minimum=0, default=0, views=("content",)),
    Param(name="content_limit", type="integer", description="content: bytes to return at most.", minimum=1,
          maximum=65536, default=4096, views=("content",)),
    _expected_revision("content: fail with CONFLICT unless this is the current revision.", views=("content",)),
    Param(name="before", type="integer", description="context: earlier messages of the session to include.",
          minimum=0, maximum=10, default=1, views=("context",)),
    Param(name="after", type="integer", description="context: later messages of the session to include.",
          minimum=0, maximum=10, default=1, views=("context",)),
    Param(name="relation_depth", type="integer", description="context: how far to follow relations.", minimum=0,
          maximum=2, default=1, views=("context",)),
    Param(name="relation_types_json", type="string", description="context: JSON array of relation types to "
          "follow; default all.", default=_ALL_RELATION_TYPES, check=v.relation_types, json_text="array",
          views=("context",)),
)


def _read_description() -> str:
    parts = ["Read stored messages."]
    for view, (what, _handler) in _VIEWS.items():
        names = ", ".join(p.name for p in _READ_PARAMS if view in p.views)
        parts.append(f"view={view}: {what} ({names}).")
    return " ".join(parts)


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="write_message",
        description="Store one conversation message or distilled memory durably. Returns the stored message "
                    "with its server-generated id, timestamp and revision 1.",
        params=(
            _session_id("Session/conversation id, 1-256 UTF-8 bytes, no NUL.", required=True),
            Param(name="role", type="string", description="Who said it.", required=True, enum=ROLES),
            _content("Message text, 1 byte to 1 MiB of UTF-8.", required=True),
            _metadata_json(_METADATA_DOC + " Default {}."),
        ),
        handler=_write, read_only=False, destructive=False, idempotent=False, writes=True, brief=True),
    ToolSpec(
        name="update_message",
        description="Change a message's content and/or metadata fields (fields absent from metadata_json are "
                    "kept). An update that changes nothing returns changed:false and writes nothing.",
        params=(
            _message_id("Id of the message (" + ULID_DOC + ")."),
            _content("New content, 1 byte to 1 MiB."),
            _metadata_json("Metadata fields to replace. " + _METADATA_DOC),
            _expected_revision("Fail with CONFLICT unless this is the current revision."),
        ),
        at_least_one=("content", "metadata_json"),
        handler=_update, read_only=False, destructive=False, idempotent=True, writes=True, brief=True),
    ToolSpec(
        name="read_messages",
        description=_read_description(),
        params=_READ_PARAMS, selector="view",
        handler=_read, read_only=True, destructive=False, idempotent=True, writes=False),
    ToolSpec(
        name="search_messages",
        description="Full-text search over content, summary and tags of live messages (English, Japanese and "
                    "other scripts, code identifiers). Results are ranked by score (0-1) with a per-field "
                    "breakdown.",
        params=(
            Param(name="query", type="string", description="What to look for, 1-4096 bytes.", required=True,
                  min_bytes=1, max_bytes=4096),
            _session_id("Only search this session."),
            Param(name="filters_json", type="string", description='JSON object string: {"kinds":[...],'
                  '"tiers":[...],"tags":[...],"roles":[...],"after":ms,"before":ms,'
                  '"superseded":"include"|"exclude"|"only"}; '
                  'kinds/tiers/roles match any listed, tags must all be present, after <= timestamp < before (ms '
                  'since the epoch); superseded: keep, leave out, or keep only messages a live message supersedes '
                  '(default include).',
                  default="{}", check=v.filters, json_text="object"),
            Param(name="min_importance", type="integer", description="Only messages at least this important.",
                  minimum=0, maximum=100, default=0),
            Param(name="context_size", type="integer", description="Neighbouring messages to include around "
                  "each result.", minimum=0, maximum=3, default=0),
            Param(name="limit", type="integer", description="Maximum number of results.", minimum=1, maximum=100,
                  default=20),
        ),
        handler=_search, read_only=True, destructive=False, idempotent=True, writes=False),
    ToolSpec(
        name="delete_message",
        description="Delete a message from every read and search at once. Returns status NOT_FOUND (not an "
                    "error) when it is unknown, already deleted, or in another session than session_id. Its "
                    "text leaves the disk at the next rebuild_index.",
        params=(
            _message_id("The message (" + ULID_DOC + ")."),
            _session_id("Guard: delete only if the message belongs to this session."),
        ),
        handler=_delete, read_only=False, destructive=True, idempotent=True, writes=True, brief=True),
    ToolSpec(
        name="rebuild_index",
        description="Compact the store: drop deleted messages and old revisions for good, rebuild every index, "
                    "and replace the data file atomically. Blocks other requests; BUSY if another process has "
                    "the store open.",
        params=(),
        handler=_rebuild, read_only=False, destructive=True, idempotent=True, writes=True),
    ToolSpec(
        name="get_system_health",
        description="Report the store's state: message counts, sizes, I/O counters, integrity flags and the "
                    "last error.",
        params=(),
        handler=_health, read_only=True, destructive=False, idempotent=True, writes=False),
)

BY_NAME = {t.name: t for t in TOOLS}
