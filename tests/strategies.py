"""Hypothesis strategies for messages and metadata, and the small service
helpers the store and projection tests use: ``open_service`` (reproducible
clock and ids), ``write`` and ``v1_event_bytes``.  The clock is
:class:`helpers.Clock`; fixtures are in conftest.py.
"""

from __future__ import annotations

import random
import zlib

import cbor2
from helpers import Clock
from hypothesis import strategies as st

from eventstore import codec
from eventstore.events import KINDS, RELATION_TYPES, ROLES, TIERS, MessageUpdated, MessageWritten, Metadata
from eventstore.ids import to_bytes
from server.service import MemoryService


# ----------------------------------------------------------------- helpers
def open_service(path: str, clock: Clock | None = None, seed: int = 1, **options) -> MemoryService:
    """A service whose clock (1 ms a reading, unless given) and id randomness are reproducible."""
    return MemoryService(path, clock=clock or Clock(step=1), rng=random.Random(seed), **options)


def write(service: MemoryService, content: str, session: str = "s", role: str = "user", **meta) -> str:
    """Write one message; returns its id."""
    return service.write_message(session, role, content, Metadata(**meta))["message"]["message_id"]


def v1_event_bytes(event) -> bytes:
    """An event as schema version 1 wrote it: type name, full metadata, absolute times."""
    if isinstance(event, MessageWritten):
        m = event.message
        payload = [to_bytes(m.message_id), m.session_id, m.role, m.content, m.timestamp,
                   m.updated_at, m.revision, codec.metadata_to_list(m.metadata)]
    elif isinstance(event, MessageUpdated):
        payload = [to_bytes(event.message_id), event.revision, event.updated_at, event.content,
                   codec.metadata_to_list(event.metadata)]
    else:
        payload = [to_bytes(event.message_id)]
    body = cbor2.dumps([event.TYPE, 1, payload], canonical=True)
    return zlib.crc32(body).to_bytes(4, "big") + body


# -------------------------------------------------------------- strategies
SESSIONS = ("s1", "s2", "会話", "a", "a\x01", "a b")
TAGS = ("project", "decision", "日本", "x-y", "Tag")

session_ids = st.sampled_from(SESSIONS)
roles = st.sampled_from(ROLES)
canonical_ids = st.integers(0, (1 << 128) - 1).map(
    lambda n: "".join("0123456789ABCDEFGHJKMNPQRSTVWXYZ"[(n >> (125 - 5 * i)) & 31] for i in range(26)))
free_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)
summaries = st.one_of(st.none(), st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=24))


def unique_word(n: int) -> str:
    """A word that occurs in no other message: 'zq' + ``n`` in letters a–p."""
    digits = ""
    while True:
        digits = "abcdefghijklmnop"[n % 16] + digits
        n //= 16
        if not n:
            return "zq" + digits + "x"


def contents(word: str) -> st.SearchStrategy[str]:
    """Message text around a unique searchable word (NUL and any script allowed)."""
    return st.tuples(free_text, free_text).map(lambda t: f"{t[0]} {word} {t[1]}")


def relation_lists(known: list[str]) -> st.SearchStrategy[tuple]:
    targets = st.sampled_from(known) | canonical_ids if known else canonical_ids
    return st.lists(st.tuples(st.sampled_from(RELATION_TYPES), targets), max_size=3).map(
        lambda rs: tuple(dict.fromkeys(rs)))


def metadata_fields(known: list[str]) -> dict[str, st.SearchStrategy]:
    return {
        "tags": st.lists(st.sampled_from(TAGS), max_size=3).map(lambda t: tuple(dict.fromkeys(t))),
        "memory_tier": st.sampled_from(TIERS),
        "memory_kind": st.sampled_from(KINDS),
        "importance": st.integers(0, 100),
        "tool_call_id": st.none() | st.text(min_size=1, max_size=8),
        "summary": summaries,
        "relations": relation_lists(known),
        "source_message_ids": st.lists(canonical_ids, max_size=2).map(tuple),
    }


def metadata(known: list[str]) -> st.SearchStrategy[Metadata]:
    return st.fixed_dictionaries({}, optional=metadata_fields(known)).map(lambda d: Metadata(**d))


def patches(known: list[str]) -> st.SearchStrategy[dict]:
    """A validated ``metadata_json`` patch: any subset of the fields."""
    return st.fixed_dictionaries({}, optional=metadata_fields(known))
