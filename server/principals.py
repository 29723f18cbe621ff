"""Principals: who makes a call, and what they may see and do.

A :class:`Principal` is a name, whether it may write, and the session patterns
it is limited to (none: every session).  Patterns are shell-style
(:func:`fnmatch.fnmatchcase`: ``*`` matches any run of characters, ``/``
included; ``?`` one character; ``[ab]`` a set), compiled once into one regular
expression, so a scope check is one ``re.match`` call (see docs/http.md for
what it costs).

Names: a token's principal is its name from ``convmem token add``; the single
token of ``serve --http`` acts as ``default`` (full access); stdio and the local
CLI act as ``local``; an importer as ``import:<source>``.  Only the name lands
in the log, never a token.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from eventstore.errors import NotFoundError, ValidationError

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RESERVED = ("default", "local")
IMPORT_PREFIX = "import:"
MAX_PATTERNS = 64


@dataclass(frozen=True)
class Principal:
    name: str
    read_only: bool = False
    sessions: tuple[str, ...] = ()          # session patterns; empty: every session
    _match: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.sessions:
            union = "|".join(f"(?:{fnmatch.translate(p)})" for p in self.sessions)
            object.__setattr__(self, "_match", re.compile(union, re.DOTALL))

    @property
    def limited(self) -> bool:
        """Whether a session pattern limits what this principal sees."""
        return self._match is not None

    def sees(self, session_id: str) -> bool:
        match = self._match
        return match is None or match.match(session_id) is not None

    def scope_text(self) -> str:
        """The scope as a VALIDATION_ERROR names it (the patterns are the operator's, not secret)."""
        return "sessions matching " + " or ".join(repr(p) for p in self.sessions)

    def check_write(self, field_name: str = "session_id") -> None:
        """Refuse any write to a read-only principal."""
        if self.read_only:
            raise ValidationError(f"{field_name}: this token is read-only (no write, update, delete or rebuild)")

    def check_session_write(self, session_id: str) -> None:
        """A write into ``session_id``: refused when read-only or outside the scope."""
        self.check_write()
        if not self.sees(session_id):
            raise ValidationError(f"session_id: must be within this token's scope ({self.scope_text()})")

    def check_every_session(self, refused: str) -> None:
        """Refuse a whole-store call to a limited principal: ``refused`` opens the message
        (``"<field>: <what it does> and"``, or ``"<field>:"``)."""
        if self.limited:
            raise ValidationError(f"{refused} needs a token that sees every session, not only {self.scope_text()}")

    def check_session_read(self, session_id: str, what: str = "message_id") -> None:
        """A message of ``session_id`` asked for by id: outside the scope it does not exist."""
        if not self.sees(session_id):
            raise NotFoundError(f"{what}: no live message has this id")


LOCAL = Principal("local")
DEFAULT = Principal("default")


def importer(source: str) -> Principal:
    """The principal an importer of ``source`` acts as."""
    return Principal(IMPORT_PREFIX + source)


def check_name(name: str) -> str:
    """A token name: 1-64 of ``A-Z a-z 0-9 . _ -``, starting with a letter or digit, not reserved."""
    if not NAME_RE.fullmatch(name):
        raise ValidationError("NAME: must be 1-64 characters of A-Z a-z 0-9 . _ - starting with a letter or digit")
    if name in RESERVED:
        raise ValidationError(f"NAME: {' and '.join(RESERVED)} are reserved principal names")
    return name


def check_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(patterns))
    if len(out) > MAX_PATTERNS:
        raise ValidationError(f"--sessions: at most {MAX_PATTERNS} patterns")
    for p in out:
        if not p or len(p.encode("utf-8")) > 256 or "\x00" in p:
            raise ValidationError("--sessions: each pattern must be 1-256 UTF-8 bytes without NUL")
    return out
