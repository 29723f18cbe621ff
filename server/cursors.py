"""Opaque paging cursors, signed with the store's secret.

A cursor carries the view, the session it belongs to and the position after
which the next page starts.  It is base64url(JSON + 16-byte HMAC); anything
that does not verify — forged, truncated, for another view or session, from
another store — is a ``VALIDATION_ERROR``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re

from eventstore.errors import ValidationError

_MAC = 16
_ALPHABET = re.compile(r"[A-Za-z0-9_-]{1,4096}")


def encode(secret: bytes, view: str, scope: str, position: str) -> str:
    body = json.dumps([1, view, scope, position], separators=(",", ":")).encode("utf-8")
    mac = hmac.new(secret, body, hashlib.sha256).digest()[:_MAC]
    return base64.urlsafe_b64encode(body + mac).decode("ascii").rstrip("=")


def decode(secret: bytes, cursor: object, view: str, scope: str) -> str:
    """The position inside a cursor issued for ``view`` and ``scope``."""
    bad = ValidationError("cursor: must be a nextCursor returned by this view for the same session")
    if not isinstance(cursor, str) or not _ALPHABET.fullmatch(cursor):
        raise bad                    # (b64decode would silently skip foreign characters)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise bad from None
    if base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") != cursor:
        raise bad                    # unused trailing bits: only the canonical spelling counts
    body, mac = raw[:-_MAC], raw[-_MAC:]
    if len(raw) <= _MAC or not hmac.compare_digest(mac, hmac.new(secret, body, hashlib.sha256).digest()[:_MAC]):
        raise bad
    try:
        version, got_view, got_scope, position = json.loads(body)
    except (ValueError, TypeError):
        raise bad from None
    if version != 1 or got_view != view or got_scope != scope or not isinstance(position, str):
        raise bad
    return position
