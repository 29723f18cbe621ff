"""The export format: JSONL, one message a line, after one header line.

    {"format":"tiny-convmem-export","version":1,"messages":2}
    {"message_id":"01M8…","session_id":"project-x","timestamp":1796138666357,"role":"user",…}
    {"message_id":"01M8…",…}

A message line is the message object of docs/tools.md exactly (every field;
``tool_call_id`` and ``summary`` present only when set), compact JSON, UTF-8,
keys in that order, then ``principal`` — who made the message's current
revision — when the store knows it (an export from before principals has
none: it still imports, its messages without a principal); lines are in
message-id (creation) order, ids strictly increasing.  The header's
``messages`` is the number of message lines.

:func:`read` checks every line with :func:`server.validation.message`, the
definition of a valid message every writer uses (the limits and messages of
``write_message``, plus the id, clock and revision fields), and raises
``VALIDATION_ERROR`` naming the line.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any

from eventstore.errors import ValidationError
from eventstore.events import Message, Metadata

from . import render, validation

FORMAT = "tiny-convmem-export"
VERSION = 1
MESSAGE_KEYS = ("message_id", "session_id", "timestamp", "role", "content", "revision", "updated_at", "metadata")


def header(count: int) -> str:
    return render.dumps({"format": FORMAT, "version": VERSION, "messages": count}) + "\n"


def line(message: Message, principal: str | None = None) -> str:
    item = render.message(message)
    if principal is not None:
        item["principal"] = principal
    return render.dumps(item) + "\n"


def principal_from_object(obj: Any) -> str | None:
    """The ``principal`` of a message line (None when it has none), validated."""
    if not isinstance(obj, dict) or "principal" not in obj:
        return None
    return validation.text(obj["principal"], "principal", min_bytes=1, max_bytes=256, no_nul=True)


def message_from_object(obj: Any, check: bool = True) -> Message:
    """A message from its JSON object (as :func:`line` writes it), checked
    with :func:`server.validation.message` (``check`` False: not, for a line
    read before and checked then)."""
    if not isinstance(obj, dict) or set(obj) - {"principal"} != set(MESSAGE_KEYS):
        raise ValidationError(f"message: must be an object with exactly {', '.join(MESSAGE_KEYS)} "
                              "(and optionally principal)")
    meta = Metadata(**validation.metadata_fields(obj["metadata"], "metadata"))
    msg = Message(
        message_id=obj["message_id"], session_id=obj["session_id"], role=obj["role"], content=obj["content"],
        timestamp=obj["timestamp"], updated_at=obj["updated_at"], revision=obj["revision"], metadata=meta)
    return validation.message(msg) if check else msg


def _parse(text: str) -> Any:
    try:
        return validation.DECODER.decode(text)
    except (ValueError, RecursionError):
        raise ValidationError("the line is not valid JSON") from None


def read_header(first: str) -> int:
    """The message count the header line announces."""
    obj = _parse(first)
    if not (isinstance(obj, dict) and obj.get("format") == FORMAT):
        raise ValidationError(f"the first line must be the header of a convmem export (format {FORMAT!r})")
    if obj.get("version") != VERSION:
        raise ValidationError(f"export format version must be {VERSION} (this convmem reads no other)")
    return validation.integer(obj.get("messages"), "messages", 0, validation.MAX_TIMESTAMP)


def read(lines: Iterable[str], seen: array[int] | None = None,
         known: array[int] | None = None) -> Iterator[tuple[Message, str | None]]:
    """The messages of an export with their principals, checked line by line;
    ``VALIDATION_ERROR`` names the line (``line 3: role: must be one of …``).
    A file read twice is checked once: ``seen`` gets the hash of each message
    line of a first read; given them as ``known``, a second read puts a line
    through :func:`server.validation.message` only if it is not the same as then."""
    number, last, announced = 0, "", None
    for number, text in enumerate(lines, 1):
        try:
            if number == 1:
                announced = read_header(text)
                continue
            obj, digest = _parse(text), hash(text)
            if seen is not None:
                seen.append(digest)
            check = known is None or number - 2 >= len(known) or known[number - 2] != digest
            msg, principal = message_from_object(obj, check), principal_from_object(obj)
            if msg.message_id <= last:
                raise ValidationError("message_id: must be greater than the previous line's (export order)")
        except ValidationError as exc:
            raise ValidationError(f"line {number}: {exc.message}") from None
        last = msg.message_id
        yield msg, principal
    if announced is None:
        raise ValidationError("line 1: the file is empty (no export header)")
    if number - 1 != announced:
        raise ValidationError(f"the header announces {announced} messages but {number - 1} follow "
                              "(a truncated or edited file)")
