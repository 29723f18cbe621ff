"""Where ``import --follow`` and the hook stopped reading each transcript.

A position is kept in the store's meta (a caller's value under ``follow/``,
see :mod:`eventstore.meta`), one per source and file, written in the
transaction that writes the messages read up to it — so a restart never
reads a line twice nor skips one.  It holds:

* the file's path, device and inode (another inode: the file was replaced);
* ``offset``, the end of the last complete line read, and ``line``, how many
  lines that is (a Codex message without an id is keyed by its line number);
* ``head`` and ``tail``, BLAKE2b hashes of the first :data:`HASHED` bytes of
  the file and of the :data:`HASHED` bytes before ``offset``: a file that was
  cut shorter than ``offset``, or whose bytes up to it changed there, is read
  again from its start (the import ids make that write only what is new);
* the reader's ``state`` after those lines (the tool names, the times of the
  lines, the session and project: what the next lines' mapping needs);
* ``seen``, the store's last event before the file was read up to
  ``offset`` (to its last complete line then): a message imported from a
  line after ``offset`` by anyone — another follower, a one-shot import —
  was read from the file later, so it was written after that event, and
  the next part need only look at the events after it to skip what is
  there already (not at every message of the session).  0 (look at all)
  after a part that stopped before the end of the file.  Compaction keeps
  this true: its log holds the live messages in id order (the order they
  were written in), numbered to end where the old log ended.

A value that does not decode as such a position is taken for none: the file
is read again whole.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import IO, Any

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.store import EventStore, Tx, WriteTx

PREFIX = b"follow/"
HASHED = 4096           # bytes hashed at the head of the file and before the offset


@dataclass(frozen=True)
class Position:
    path: str
    device: int
    inode: int
    offset: int                 # bytes read: the end of the last complete line
    line: int                   # lines read (the next one is numbered line + 1)
    head: bytes                 # hash of bytes [0, min(offset, HASHED))
    tail: bytes                 # hash of bytes [max(0, offset - HASHED), offset)
    state: dict[str, Any]       # the reader's state after those lines
    seen: int = 0               # the store's last event before the reading that ended here

    def encode(self) -> bytes:
        return codec.dumps([self.path, self.device, self.inode, self.offset, self.line, self.head, self.tail,
                            self.state, self.seen])


def key(source: str, path: str) -> bytes:
    """The meta key of ``path``'s position (hashed: a path may be longer than a key can be)."""
    digest = hashlib.blake2b(path.encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()
    return PREFIX + source.encode() + b"/" + digest.encode()


def mark(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def decode(raw: bytes) -> Position | None:
    """The position stored as ``raw``; None when it is not one."""
    try:
        value = codec.loads(raw)
    except (CorruptStoreError, RecursionError):
        return None
    if not (isinstance(value, list) and len(value) == 9):
        return None
    path, device, inode, offset, line, head, tail, state, seen = value
    if not (isinstance(path, str) and all(type(n) is int and n >= 0 for n in (device, inode, offset, line, seen))
            and isinstance(head, bytes) and isinstance(tail, bytes) and isinstance(state, dict)):
        return None
    return Position(path, device, inode, offset, line, head, tail, state, seen)


def load(store: EventStore, tx: Tx, source: str, path: str) -> Position | None:
    wanted = key(source, path)
    raw = store.caller_values(tx, wanted).get(wanted)
    found = None if raw is None else decode(raw)
    return found if found is not None and found.path == path else None


def save(store: EventStore, w: WriteTx, source: str, position: Position) -> None:
    store.set_caller_value(w, key(source, position.path), position.encode())


def all_of(store: EventStore, tx: Tx, source: str) -> list[Position]:
    """Every position kept for ``source`` (damaged ones left out)."""
    found = (decode(raw) for raw in store.caller_values(tx, PREFIX + source.encode() + b"/").values())
    return [p for p in found if p is not None]


def head_of(fh: IO[bytes], offset: int) -> bytes:
    """:attr:`Position.head` of the open file for ``offset``."""
    return mark(os.pread(fh.fileno(), min(offset, HASHED), 0))


def resumes(position: Position, fh: IO[bytes], st: os.stat_result, before: bytes) -> bool:
    """Whether the open file (``st`` its stat) is the one ``position`` was
    taken in, grown or not, but not cut or changed: ``before`` holds its
    bytes ``[max(0, offset - HASHED), offset)`` as read now."""
    return ((position.device, position.inode) == (st.st_dev, st.st_ino) and st.st_size >= position.offset
            and mark(before) == position.tail
            and (position.offset <= HASHED or head_of(fh, position.offset) == position.head))
