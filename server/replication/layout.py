"""Names on the stream side, and this node's replication values in ``meta``.

===========================  =================================================
stream ``NAME-gN``           generation N of the log (``rebuild_index`` makes
                             the next one); subjects ``convmem.NAME.gN.>``
``convmem.NAME.gN.m.<id>``   the events of message ``<id>`` (one subject per
                             message: its history can be purged on its own)
``convmem.NAME.gN.seal``     the last message of a generation: no event follows
stream ``NAME-control``      one record on ``convmem.NAME.control``: the
                             current generation (absent: generation 1), see
                             :class:`Control`
===========================  =================================================

Every event is published with ``Nats-Msg-Id`` = :func:`event_id` (the same on
every retry, so a retry is de-duplicated) and ``Nats-Expected-Last-Sequence``
= the stream sequence this node has applied.

Local meta (the store's ``meta`` sub-database): ``repl_generation``,
``repl_sequence`` and ``repl_offset``, 8-byte ints: the generation this store
follows, the last stream sequence its log and read models include (written in
the same LMDB transaction as the events they count), and what its local
sequence numbers add to the stream's (the control record says it, the same on
every node: local sequence numbers never go back across generations).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import NamedTuple

from eventstore.errors import ValidationError
from eventstore.events import Event, MessageWritten

KIND_HEADER = "Convmem-Kind"          # "seal" on a generation's last message; absent on events
SEAL = "seal"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


def check_stream_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ValidationError("--stream: 1 to 32 letters, digits, '_' or '-'")


def stream(base: str, generation: int) -> str:
    return f"{base}-g{generation}"


def root(base: str, generation: int) -> str:
    return f"convmem.{base}.g{generation}"


def event_subject(base: str, generation: int, message_id: str) -> str:
    return f"{root(base, generation)}.m.{message_id}"


def seal_subject(base: str, generation: int) -> str:
    return f"{root(base, generation)}.seal"


def control_stream(base: str) -> str:
    return f"{base}-control"


def control_subject(base: str) -> str:
    return f"convmem.{base}.control"


def message_of(event: Event) -> str:
    return event.message.message_id if isinstance(event, MessageWritten) else event.message_id


def event_id(position: int, raw: bytes) -> str:
    """The identity of an event at a stream position: the position it claims and the
    digest of its bytes (which hold the message id, the revision and the time)."""
    return f"{position}-{hashlib.sha256(raw).hexdigest()[:32]}"


@dataclass(frozen=True)
class Control:
    """The control record: the current generation, how many events it began with, and
    the offset of the local sequence numbers in it."""

    generation: int = 1
    initial: int = 0
    offset: int = 0

    def encode(self) -> bytes:
        return json.dumps({"generation": self.generation, "initial": self.initial, "offset": self.offset}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Control:
        try:
            obj = json.loads(raw)
            return cls(int(obj["generation"]), int(obj["initial"]), int(obj.get("offset", 0)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError("the control record is not {generation, initial}") from exc


class Record(NamedTuple):
    """One message read from a generation's stream (plain values, off the event loop;
    a tuple: the link makes one for every message of a catch-up)."""

    seq: int
    subject: str
    data: bytes
    kind: str | None           # None for an event, SEAL for a seal
    msg_id: str | None
    timestamp: float           # seconds since the epoch, as the stream stored it
    pending: int               # messages after this one in the stream when it was delivered
