"""A transaction's events to the stream, chained on the sequence the node applied.

Each event is published with ``Nats-Msg-Id`` = its identity (its stream
sequence and a digest of its bytes: :func:`.layout.event_id`) and the stream's
expected last sequence; a retry repeats both, so what landed already is
de-duplicated and nothing lands twice.
"""

from __future__ import annotations

import time

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.store import WriteTx

from . import layout
from .apply import Position
from .link import Link, Unreachable

TICK = 0.2      # seconds between two tries while the stream is unreachable

Item = tuple[str, bytes, str]     # (subject, the event's bytes, its message id)


def outgoing(stream: str, w: WriteTx, position: Position) -> list[Item]:
    """The events ``w`` appended, numbered on the stream from ``position`` on."""
    base, items = position.sequence, []
    for i, ((seq, _), event) in enumerate(zip(w.appended, w.appended_events)):
        if seq != position.offset + base + i + 1:
            raise CorruptStoreError("the local log and the stream number events differently")
        raw = bytes(w.txn.get(codec.seq_key(seq), db=w.db("events")) or b"")
        subject = layout.event_subject(stream, position.generation, layout.message_of(event))
        items.append((subject, raw, layout.event_id(base + i + 1, raw)))
    return items


def publish_all(link: Link, items: list[Item], base: int, deadline: float) -> int:
    """Publish ``items`` chained on ``base``, trying again until ``deadline`` while the stream
    is unreachable; the last sequence."""
    while True:
        try:
            if len(items) == 1:
                subject, raw, msg_id = items[0]
                return link.publish(subject, raw, msg_id, base)
            return link.publish_all(items, base)
        except Unreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(TICK)
