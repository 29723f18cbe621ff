"""Argument validation for the seven tools (the MCP SDK validates nothing).

Every check raises :class:`ValidationError` with a message that names the
field and the constraint and never repeats the value.  Nothing here touches
the store, so a rejected request cannot change anything.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import replace
from functools import lru_cache
from typing import Any

from eventstore.errors import ValidationError
from eventstore.events import KINDS, RELATION_TYPES, ROLES, TIERS, Message, Metadata
from eventstore.ids import is_canonical

# The limits of a message (docs/tools.md): every writer checks them here.
MAX_CONTENT = 1 << 20
MAX_SESSION_ID = 256
MAX_TAG = 128
MAX_TAGS = 32
MAX_SUMMARY = 4096
MAX_TOOL_CALL_ID = 256
MAX_RELATIONS = 32
MAX_SOURCES = 64
MAX_TIMESTAMP = (1 << 63) - 1     # timestamps, updated_at, revisions, filters_json after/before
# An empty text from a source (a tool that printed nothing) is stored as this,
# tagged EMPTY_TAG: content is never empty (docs/import.md).
EMPTY_CONTENT = "(empty)"
EMPTY_TAG = "empty"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def _label(key: object) -> str:
    return f"'{key}'" if isinstance(key, str) and _NAME.fullmatch(key) else "(unnamed)"


def check_keys(args: Any, allowed: Collection[str]) -> dict[str, Any]:
    """The arguments object (``None`` counts as ``{}``), refused if it holds an unknown key."""
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ValidationError("arguments: must be an object")
    for key in args:
        if key not in allowed:
            raise ValidationError(f"arguments: unknown parameter {_label(key)}")
    return args


def text(value: Any, field: str, *, min_bytes: int = 0, max_bytes: int, no_nul: bool = False) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{field}: must be a string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(f"{field}: must be valid Unicode (no lone surrogates)") from None
    if size < min_bytes or size > max_bytes:
        raise ValidationError(f"{field}: must be {min_bytes}–{max_bytes} UTF-8 bytes")
    if no_nul and "\x00" in value:
        raise ValidationError(f"{field}: must not contain NUL")
    return value


def integer(value: Any, field: str, lo: int | None = None, hi: int | None = None) -> int:
    if type(value) is not int:
        raise ValidationError(f"{field}: must be an integer")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bound = f"{lo}–{hi}" if lo is not None and hi is not None else f"≥ {lo}" if lo is not None else f"≤ {hi}"
        raise ValidationError(f"{field}: must be {bound}")
    return value


def choice(value: Any, field: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValidationError(f"{field}: must be one of {', '.join(allowed)}")
    return value


def ulid(value: Any, field: str) -> str:
    if not is_canonical(value):
        raise ValidationError(f"{field}: must be a canonical 26-character upper-case ULID")
    return value


def cursor(value: Any, field: str) -> str:
    """A non-empty string; whether it is a cursor of this view is the service's to say."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{field}: must be a nextCursor returned by this view for the same session")
    return value


def _refuse(_token: str) -> None:
    raise ValueError("non-finite number")


MAX_DIGITS = 4300      # Python's default bound on converting decimal text to an int


class NumberTooLong(ValueError):
    """A JSON integer of more than :data:`MAX_DIGITS` digits."""


def json_integer(digits: str) -> int:
    """``parse_int`` for :mod:`json`: an integer of at most :data:`MAX_DIGITS` digits,
    refused with its own exception (``int`` would raise a plain ValueError)."""
    if len(digits) > MAX_DIGITS and len(digits.lstrip("-")) > MAX_DIGITS:
        raise NumberTooLong(f"more than {MAX_DIGITS} digits")
    return int(digits)


# one decoder for every call (tool arguments, archive lines): json.loads with an option
# builds a new one each time
DECODER = json.JSONDecoder(parse_constant=_refuse, parse_int=json_integer)


def parse_json(value: Any, field: str) -> Any:
    text(value, field, max_bytes=MAX_CONTENT * 8)
    try:
        return DECODER.decode(value)
    except NumberTooLong:
        raise ValidationError(f"{field}: numbers must have at most {MAX_DIGITS} digits") from None
    except RecursionError:
        raise ValidationError(f"{field}: must nest arrays and objects less deeply") from None
    except ValueError:
        raise ValidationError(f"{field}: must be a valid JSON string") from None


def string_list(value: Any, field: str, max_items: int) -> list | tuple:
    """A JSON array (or a stored tuple) of at most ``max_items`` items."""
    if not isinstance(value, (list, tuple)):        # a tuple of types: faster than a union
        raise ValidationError(f"{field}: must be an array")
    if len(value) > max_items:
        raise ValidationError(f"{field}: must have at most {max_items} items")
    return value


# ------------------------------------------------------------------ metadata
# Each field is checked by one function, given its JSON value (a list for
# tags, relations as objects) or its stored value (tuples, relations as
# pairs): the same limits and messages for both.
def _tags(value: Any) -> tuple[str, ...]:
    items = string_list(value, "metadata.tags", MAX_TAGS)
    for item in items:
        text(item, "metadata.tags[]", min_bytes=1, max_bytes=MAX_TAG)
    return tuple(dict.fromkeys(items))


def _relation(item: Any) -> tuple[str, str]:
    if isinstance(item, tuple) and len(item) == 2:
        rtype, target = item
    elif isinstance(item, dict) and set(item) == {"type", "message_id"}:
        rtype, target = item["type"], item["message_id"]
    else:
        raise ValidationError("metadata.relations[]: must be an object with exactly type and message_id")
    return (choice(rtype, "metadata.relations[].type", RELATION_TYPES),
            ulid(target, "metadata.relations[].message_id"))


def _relations(value: Any) -> tuple[tuple[str, str], ...]:
    items = string_list(value, "metadata.relations", MAX_RELATIONS)
    return tuple(dict.fromkeys(_relation(item) for item in items))


def _sources(value: Any) -> tuple[str, ...]:
    items = string_list(value, "metadata.source_message_ids", MAX_SOURCES)
    return tuple([ulid(item, "metadata.source_message_ids[]") for item in items])


def _summary(value: Any) -> str | None:
    return text(value, "metadata.summary", max_bytes=MAX_SUMMARY) or None


_FIELD_CHECKS = {
    "tool_call_id": lambda v: text(v, "metadata.tool_call_id", max_bytes=MAX_TOOL_CALL_ID),
    "tags": _tags,
    "memory_tier": lambda v: choice(v, "metadata.memory_tier", TIERS),
    "memory_kind": lambda v: choice(v, "metadata.memory_kind", KINDS),
    "importance": lambda v: integer(v, "metadata.importance", 0, 100),
    "summary": _summary,
    "relations": _relations,
    "source_message_ids": _sources,
}


def metadata_patch(value: Any, field: str) -> dict[str, Any]:
    """The validated fields present in a ``metadata_json`` string."""
    return metadata_fields(parse_json(value, field), field)


def metadata_fields(parsed: Any, field: str) -> dict[str, Any]:
    """The validated fields of a metadata object already parsed from JSON."""
    if not isinstance(parsed, dict):
        raise ValidationError(f"{field}: must encode a JSON object")
    patch = {}
    for key, raw in parsed.items():
        if key not in _FIELD_CHECKS:
            raise ValidationError(f"{field}: unknown field {_label(key)}")
        if raw is None:
            raise ValidationError(f"metadata.{key}: must not be null")
        patch[key] = _FIELD_CHECKS[key](raw)
    return patch


def apply_patch(meta: Metadata, patch: dict[str, Any]) -> Metadata:
    return replace(meta, **patch)


# ------------------------------------------------------------------ a message
def session_id(value: Any, field: str = "session_id") -> str:
    return text(value, field, min_bytes=1, max_bytes=MAX_SESSION_ID, no_nul=True)


def content(value: Any, field: str = "content") -> str:
    return text(value, field, min_bytes=1, max_bytes=MAX_CONTENT)


def message(msg: Message) -> Message:
    """``msg`` when it is a message the contract allows (docs/tools.md), else
    ``VALIDATION_ERROR`` naming the field.  The one definition of a valid
    message: the tools' writes, every importer, ``import jsonl`` and export
    check what they write with it."""
    ulid(msg.message_id, "message_id")
    _given(msg.session_id, msg.role, msg.content)
    if type(msg.timestamp) is not int or not 0 <= msg.timestamp <= MAX_TIMESTAMP:
        integer(msg.timestamp, "timestamp", 0, MAX_TIMESTAMP)
    if type(msg.updated_at) is not int or not 0 <= msg.updated_at <= MAX_TIMESTAMP:
        integer(msg.updated_at, "updated_at", 0, MAX_TIMESTAMP)
    if type(msg.revision) is not int or not 1 <= msg.revision <= MAX_TIMESTAMP:
        integer(msg.revision, "revision", 1, MAX_TIMESTAMP)
    metadata(msg.metadata)
    return msg


def given(session: str, role: str, body: str, meta: Metadata) -> None:
    """:func:`message`'s checks of the fields a writer gives (not its id, clock or
    revision): run before a write starts, so the commit does not run them."""
    _given(session, role, body)
    metadata(meta)


def changes(body: str | None, patch: dict[str, Any]) -> None:
    """:func:`message`'s checks of what an update gives: its content (when it
    gives one), then each field of its metadata patch (in their stored form):
    run before the write starts, so the commit does not run them."""
    if body is not None:
        content(body)
    metadata(Metadata(**patch))


def _given(session: Any, role: Any, body: Any) -> None:
    if type(session) is str:
        _stored_session(session)
    else:
        session_id(session)
    if role not in ROLES:
        choice(role, "role", ROLES)
    content(body)


@lru_cache(maxsize=1024)
def _stored_session(value: str) -> None:
    """:func:`session_id`, cached (a message's session repeats from message to message)."""
    session_id(value)


def metadata(meta: Metadata) -> Metadata:
    """``meta`` when every field is within the contract (stored form: no
    repeated tag or relation, no empty summary), else ``VALIDATION_ERROR``."""
    if meta.tags:
        try:
            _stored_tags(meta.tags)
        except TypeError:           # not hashable: not a tuple of strings, which _tags says
            _tags(meta.tags)
    if meta.memory_tier not in TIERS:
        choice(meta.memory_tier, "metadata.memory_tier", TIERS)
    if meta.memory_kind not in KINDS:
        choice(meta.memory_kind, "metadata.memory_kind", KINDS)
    if type(meta.importance) is not int or not 0 <= meta.importance <= 100:
        integer(meta.importance, "metadata.importance", 0, 100)
    if meta.tool_call_id is not None:
        _FIELD_CHECKS["tool_call_id"](meta.tool_call_id)
    if meta.summary is not None and _summary(meta.summary) is None:
        raise ValidationError("metadata.summary: must not be empty (absent instead)")
    if meta.relations and _relations(meta.relations) != meta.relations:
        raise ValidationError("metadata.relations: must not repeat a relation")
    sources = meta.source_message_ids
    if sources and (len(sources) > MAX_SOURCES or not all(map(is_canonical, sources))):
        _sources(sources)           # the field's own check, which says what is wrong
    return meta


@lru_cache(maxsize=1024)
def _stored_tags(tags: tuple[str, ...]) -> None:
    """Stored tags within the contract (a pure check, cached: tuples of tags
    repeat from message to message, an import's above all)."""
    if _tags(tags) != tags:
        raise ValidationError("metadata.tags: must not repeat a tag")


def empty_placeholder(text: str, tags: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """(content, tags) for a source's text: an empty one becomes
    :data:`EMPTY_CONTENT` tagged :data:`EMPTY_TAG` (kept within the tag limit)."""
    if text:
        return text, tags
    return EMPTY_CONTENT, tuple(dict.fromkeys(tags[:MAX_TAGS - 1] + (EMPTY_TAG,)))


SUPERSEDED = ("include", "exclude", "only")


def filters(value: Any, field: str) -> dict[str, Any]:
    """``{"kinds", "tiers", "tags", "roles", "after", "before"}`` from a
    ``filters_json`` string; absent keys are left out.  ``after``/``before``
    are milliseconds since the epoch (``after`` inclusive, ``before`` exclusive)."""
    parsed = parse_json(value, field)
    if not isinstance(parsed, dict):
        raise ValidationError(f"{field}: must encode a JSON object")
    out: dict[str, Any] = {}
    for key, raw in parsed.items():
        if key == "kinds":
            out["kinds"] = frozenset(choice(k, f"{field}.kinds[]", KINDS)
                                     for k in string_list(raw, f"{field}.kinds", 64))
        elif key == "tiers":
            out["tiers"] = frozenset(choice(t, f"{field}.tiers[]", TIERS)
                                     for t in string_list(raw, f"{field}.tiers", 64))
        elif key == "tags":
            out["tags"] = tuple(dict.fromkeys(
                text(t, f"{field}.tags[]", min_bytes=1, max_bytes=128)
                for t in string_list(raw, f"{field}.tags", 32)))
        elif key == "roles":
            out["roles"] = frozenset(choice(r, f"{field}.roles[]", ROLES)
                                     for r in string_list(raw, f"{field}.roles", 64))
        elif key in ("after", "before"):
            out[key] = integer(raw, f"{field}.{key}", 0, MAX_TIMESTAMP)
        elif key == "superseded":
            out[key] = choice(raw, f"{field}.superseded", SUPERSEDED)
        else:
            raise ValidationError(f"{field}: unknown field {_label(key)}")
    return out


def relation_types(value: Any, field: str) -> frozenset[str]:
    parsed = parse_json(value, field)
    items = string_list(parsed, field, 64)
    return frozenset(choice(t, f"{field}[]", RELATION_TYPES) for t in items)
