"""The term index's sub-databases and the byte layout of their keys.

``field`` is a number: 0 content, 1 summary, 2 tags.  A *docno* (document
number) is the sequence of the event that created the message in this log,
stored as 6 big-endian bytes.  Values that must not be trusted blindly
(posting chunks, ``docs`` rows) are *sealed*: followed by a CRC-32 of their
key and body, so a damaged value — or one whose key changed — is refused.
"""

from __future__ import annotations

import hashlib
import zlib
from functools import partial
from itertools import islice, takewhile
from operator import gt

from eventstore.errors import CorruptStoreError

from ..tokens import normalize

POSTINGS, PENDING, EXACT, DOCS, FACETS, TIMES = "postings", "pending", "exact", "docs", "facets", "times"
_DUPS = {"dupsort": True, "dupfixed": True}
SPECS: dict[str, dict] = {POSTINGS: {}, PENDING: {}, EXACT: _DUPS, DOCS: {}, FACETS: _DUPS, TIMES: {}}
FIELDS = ("content", "summary", "tags")


def docno_key(docno: int) -> bytes:
    return docno.to_bytes(6, "big")


def docno_of(key: bytes) -> int:
    """The docno a key ends with."""
    return int.from_bytes(key[-6:], "big")


def time_key(timestamp: int, docno: int) -> bytes:
    """A ``times`` key: the message's timestamp (8 bytes) then its docno."""
    return timestamp.to_bytes(8, "big") + docno.to_bytes(6, "big")


def list_prefix(field: int, term: str) -> bytes:
    """The key prefix of a term's posting list (terms never contain NUL)."""
    return bytes((field,)) + term.encode("utf-8") + b"\x00"


def exact_key(field: int, text: str) -> bytes:
    """The ``exact`` key of a whole field text (a hash of its normalized form)."""
    digest = hashlib.blake2b(normalize(text).strip().encode("utf-8"), digest_size=16).digest()
    return bytes([field]) + digest


def sealed(key: bytes, body: bytes) -> bytes:
    """``body`` and the CRC-32 of key and body (4 bytes, little-endian)."""
    return body + zlib.crc32(body, zlib.crc32(key)).to_bytes(4, "little")


def unsealed(key: bytes, raw: bytes, what: str) -> bytes:
    """The body of a sealed value, if it is the one written under ``key``."""
    body = raw[:-4]
    if len(raw) < 4 or zlib.crc32(body, zlib.crc32(key)).to_bytes(4, "little") != raw[-4:]:
        raise CorruptStoreError(f"{what} failed its checksum")
    return body


def key_range(cur, first: bytes, end: bytes, limit: int | None = None, values: bool = False) -> list:
    """The keys from ``first`` up to ``end`` (not included) — ``(key, value)``
    pairs with ``values`` — at most ``limit`` of them, read without a Python
    step per key."""
    if not cur.set_range(first):
        return []
    found = takewhile(partial(gt, (end,) if values else end), cur.iternext(values=values))
    return list(found if limit is None else islice(found, limit))
