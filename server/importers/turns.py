"""What every importer produces — :class:`Turn`, one message to write — and
what it reports — :class:`Report`, the counts and the skips with file:line.

A turn names its message by an *import key* (the source's own id of the
turn, e.g. a Claude Code line's ``uuid``), unique within its session.  The
message keeps it as a name-based id, :func:`import_id` (a ULID whose time
part is zero and whose 80 other bits hash the session and the key), in its
``source_message_ids`` — the id of the turn it came from, in the store's id
format, which need not name a message of the store.  That is how a re-run
knows what is already there (see :mod:`.writer`), at the cost of 16 bytes a
message and no index entry (a per-message tag would add a posting list and a
facet list per message: a third more bytes and time).  Relations name their
target by import key too; the writer turns keys into message ids.

A turn is brought within the limits of a message (:mod:`server.validation`,
whose function :func:`~server.validation.message` the writer checks every
message with): content is cut at 1 MiB with a marker, an empty content
becomes ``(empty)`` tagged ``empty``, the summary is cut at 4 KiB, a tag at
128 bytes (at a character boundary), at most 32 tags and 32 relations; a
time outside 0 … 2^63-1 ms is no time.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TextIO

from eventstore.events import KINDS, RELATION_TYPES, ROLES
from eventstore.ids import to_str

from .._terminal import visible
from ..validation import (
    MAX_CONTENT,
    MAX_RELATIONS,
    MAX_SESSION_ID,
    MAX_SUMMARY,
    MAX_TAG,
    MAX_TAGS,
    MAX_TIMESTAMP,
    MAX_TOOL_CALL_ID,
    empty_placeholder,
)

IMPORT_ID_PREFIX = "0000000000"             # the time part of every import id (zero)
_SURROGATE = re.compile("[\ud800-\udfff]")
TRUNCATED = "\n[convmem import: truncated, {} more bytes in the source]"


@dataclass
class Turn:
    """One message to import.  ``timestamp`` in Unix milliseconds."""

    session_id: str
    key: str
    role: str
    content: str
    timestamp: int
    tags: tuple[str, ...] = ()
    kind: str = "conversation"
    tool_call_id: str | None = None
    summary: str | None = None
    relations: tuple[tuple[str, str], ...] = ()     # (type, import key in the same session)
    updatable: bool = False       # the source's turn may change (a memory entity): a re-import updates it
    import_id: str = field(init=False, default="")
    import_raw: bytes = field(init=False, default=b"", repr=False, compare=False)   # its 16 bytes

    def __post_init__(self) -> None:
        if self.role not in ROLES or self.kind not in KINDS:
            raise ValueError("a turn's role or kind is not one the store knows")
        if self.relations:
            if any(rtype not in RELATION_TYPES for rtype, _ in self.relations):
                raise ValueError("a turn's relation type is not one the store knows")
            self.relations = tuple(dict.fromkeys(self.relations))[:MAX_RELATIONS]
        self.session_id = _session(self.session_id)
        self.content = limit_content(self.content)
        if self.summary is not None:
            self.summary = cut(self.summary, MAX_SUMMARY) or None
        if self.tool_call_id is not None:
            self.tool_call_id = cut(self.tool_call_id, MAX_TOOL_CALL_ID)
        if self.tags:
            self.tags = _tags(tuple(self.tags))
        if not self.content:
            self.content, self.tags = empty_placeholder(self.content, self.tags)
        self.import_raw = _import_raw(self.session_id, self.key)
        self.import_id = to_str(self.import_raw)


def import_id(session_id: str, key: str) -> str:
    """The name-based id of the source turn ``key`` of ``session_id``: a ULID
    with a zero time part and 80 bits of BLAKE2b of the session and the key."""
    return to_str(_import_raw(session_id, key))


def _import_raw(session_id: str, key: str) -> bytes:
    """The 16 bytes of :func:`import_id`."""
    digest = hashlib.blake2b(f"{session_id}\n{key}".encode("utf-8", "surrogatepass"), digest_size=10).digest()
    return bytes(6) + digest


def cut(text: str, max_bytes: int) -> str:
    """``text`` (cleaned) shortened to at most ``max_bytes`` UTF-8 bytes, at a character boundary."""
    text, data = _encoded(text)
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", "ignore")


def clean(text: str) -> str:
    """Lone surrogates (JSON allows ``\\ud800``) become U+FFFD: the store keeps valid Unicode."""
    return _encoded(text)[0]


def _encoded(text: str) -> tuple[str, bytes]:
    """(``text`` cleaned, its UTF-8), encoding it once when it is clean already."""
    try:
        return text, text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
        return text, text.encode("utf-8")


@lru_cache(maxsize=4096)
def _session(session_id: str) -> str:
    return cut(session_id.replace("\x00", ""), MAX_SESSION_ID)


def limit_content(text: str) -> str:
    """Content over 1 MiB is truncated, with a marker saying how much was left out."""
    text, data = _encoded(text)
    size = len(data)
    if size <= MAX_CONTENT:
        return text
    marker = TRUNCATED.format(size)          # the count's width bounds the marker's
    kept = cut(text, MAX_CONTENT - len(marker.encode("utf-8")))
    return kept + TRUNCATED.format(size - len(kept.encode("utf-8")))


@lru_cache(maxsize=4096)
def tag(text: str) -> str:
    return cut(text.replace("\x00", ""), MAX_TAG)


@lru_cache(maxsize=4096)
def _tags(tags: tuple[str, ...]) -> tuple[str, ...]:
    """A turn's tags as the store takes them (a source's tags repeat: kept)."""
    return tuple(dict.fromkeys(t for t in map(tag, tags) if t))[:MAX_TAGS]


def as_text(value: Any) -> str:
    """A value as readable text: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def parse_time(value: Any) -> int | None:
    """Unix milliseconds from an ISO 8601 string or Unix seconds; None if
    neither, or before the epoch (a message's time is 0 … 2^63-1 ms)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value * 1000) if 0 <= value < 1e11 else None
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=_dt.UTC)
    ms = int(parsed.timestamp() * 1000)
    return ms if 0 <= ms <= MAX_TIMESTAMP else None


@dataclass
class Report:
    """What an import did: counts, and each skip as ``file:line: why``."""

    source: str
    files: int = 0
    turns: int = 0                    # turns read from the sources
    written: int = 0                  # messages written (or, in a dry run, that would be)
    present: int = 0                  # turns already in the store (a re-run)
    updated: int = 0                  # messages brought up to date (a memory entity that changed)
    ignored: int = 0                  # lines of kinds that carry no message (metadata, progress)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # not skips: nothing was left out
    dry_run: bool = False
    echo: bool = True                 # print each skip to stderr as it happens

    def skip(self, where: str, why: str, out: TextIO | None = None) -> None:
        self.add_skip(f"{where}: {why}", out)

    def note(self, where: str, what: str, out: TextIO | None = None) -> None:
        """Something worth saying that is not a skip (nothing was left out), as ``file:line: what``."""
        self.add_note(f"{where}: {what}", out)

    def add_note(self, line: str, out: TextIO | None = None) -> None:
        self.notes.append(line)
        if self.echo:
            print(f"convmem import: note: {visible(line)}", file=out or sys.stderr)

    def add_skip(self, line: str, out: TextIO | None = None) -> None:
        """A skip as ``file:line: why``."""
        self.skipped.append(line)
        if self.echo:
            print(f"convmem import: warning: skipped {visible(line)}", file=out or sys.stderr)

    def summary(self) -> dict:
        return {"source": self.source, "dry_run": self.dry_run, "files": self.files, "turns": self.turns,
                "written": self.written, "already_present": self.present, "updated": self.updated,
                "ignored": self.ignored,
                "skipped": len(self.skipped), "skips": list(self.skipped), "notes": list(self.notes)}


def counted(n: int, noun: str) -> str:
    """``1 file``, ``2 files``: a count for a person to read."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def text_of(obj: dict[str, Any], key: str) -> str | None:
    """``obj[key]`` when it is a non-empty string, else None."""
    value = obj.get(key)
    return value if isinstance(value, str) and value else None


def dict_of(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is an object, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def list_of(obj: dict[str, Any], key: str) -> list[Any]:
    """``obj[key]`` when it is a list, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, list) else []
