"""Stream generations: ``rebuild_index`` in replicated mode, and a node moving to a new one.

Deleting or purging a message clears it from the stream's files but not from
the stream's raft log; re-creating the stream from the live messages does.
So ``rebuild_index`` does here what compaction does locally — re-materialize
the log as one ``MessageWritten`` per live message — on the stream:

1. **seal** generation N: publish a seal expecting the last sequence this node
   applied (refused → catch up, try again).  No event can follow it: every
   writer publishes expecting the sequence it applied, and a node that applies
   the seal stops writing until the next generation is there;
2. publish the live messages of this node (which applied everything up to the
   seal, as every node will) into a new stream N+1, in message id order;
3. write the control record (current generation N+1): from here on nodes
   move to N+1 and writes go on there (a write refused by the seal is run
   again on N+1 — nothing acknowledged is lost, since every acknowledged
   event is before the seal and so in the live state copied);
4. every node **adopts** N+1: it builds a fresh store from the new stream in
   ``compact.tmp/`` and renames it over its data file (the local erasure);
5. delete stream N.

A node that was down meanwhile finds the control record ahead of its store
when it comes back and adopts the current generation the same way.  If the
node running ``rebuild_index`` dies between 1 and 3, writes wait (``IO_ERROR``
past their deadline) until ``rebuild_index`` is run on any node: once the
switch has made no progress for twice the write timeout, it finishes the
switch from its own state, which is the same at the seal on every node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from typing import Protocol

from eventstore import codec, files
from eventstore.committer import LiveEvents
from eventstore.errors import BusyError
from eventstore.store import COMPACT_DIR, DATA_FILE, EventStore

from . import layout
from .apply import Position, apply_records, write_position
from .layout import Control, Record
from .link import Gone, Link, Refused, Unreachable
from .settings import Settings


class Node(Protocol):
    """What a switch asks of the writer thread it runs on (:class:`~.committer.ReplicatedCommitter`):
    the store and the stream it writes, where it is, and its ways of waiting on the stream.
    The service's ``live`` messages and ``exclusive`` lock are the callers' arguments."""

    store: EventStore
    link: Link
    settings: Settings
    #: this node published the current generation's seal (so it makes the next generation)
    sealed_by_me: bool

    @property
    def position(self) -> Position: ...

    @property
    def sealed(self) -> bool:
        """At the current generation's seal: no write until the next generation."""

    def moved(self, position: Position, sealed: bool) -> None:
        """This node is at ``position`` now (a seal it published, a generation it adopted):
        it follows the stream from there unless ``sealed``."""

    def records(self, timeout: float) -> tuple[int, list[Record]] | None:
        """The next batch of stream records queued for the writer, as (generation, records);
        None after ``timeout`` seconds, or when something else came (it waits its turn)."""

    def pump(self, timeout: float) -> None:
        """Apply what arrives within ``timeout``; hold anything else."""

    def catch_up(self, deadline: float) -> None: ...

    def ready_for_write(self, deadline: float) -> None: ...


log = logging.getLogger("convmem")
PUBLISH_CHUNK = 1000


def adopt(c: Node, control: Control, exclusive: Callable[[], AbstractContextManager]) -> None:
    """Replace this node's store by one built from generation ``control.generation``
    (``exclusive``: held while the file is replaced, no read of this process under way)."""
    store, generation = c.store, control.generation
    log.info("replication: moving to generation %d of the stream", generation)
    tmp = os.path.join(store.path, COMPACT_DIR)
    with store.read() as tx:
        carried, io = store.carried_meta(tx), store.io_counters(tx.txn)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with EventStore(tmp, store.projector, clock=store.clock, rng=store.rng, map_size=store.map_size,
                        private=True) as fresh:
            position, sealed = _fill(c, fresh, control)

            def finish(w) -> None:
                fresh.set_io_counters(w, dict(io, replace_calls=io["replace_calls"] + 1))
                fresh.restore_meta(w, {k: v for k, v in carried.items() if k != b"last_id"})   # as compaction
                fresh.raise_last_id(w, carried.get(b"last_id", b""))
                write_position(w, position)
            fresh.maintain(finish, "moving to a new stream generation")
            fresh.sync()
        files.fsync_path(os.path.join(tmp, DATA_FILE))
        with _alone(store, 2 * c.settings.write_timeout), exclusive():
            store.replace_data_file(os.path.join(tmp, DATA_FILE))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("replication: on generation %d at %d", generation, position.sequence)
    c.moved(position, sealed)


@contextlib.contextmanager
def _alone(store: EventStore, wait: float) -> Iterator[None]:
    """Hold the store alone, waiting up to ``wait`` seconds for other processes (an import)
    to let it go: a process that has the data file open while it is replaced would go on
    with the old file, and LMDB's lock file, which both share, would mislead readers of the
    new one.  ``BUSY`` past the wait (the caller's loop tries again)."""
    deadline = time.monotonic() + wait
    while True:
        with store.alone() as alone:
            if alone:
                yield
                return
        if time.monotonic() > deadline:
            raise BusyError("moving to a new stream generation needs the store alone: another process "
                            "(an import?) has it open")
        time.sleep(0.2)


def _fill(c: Node, fresh: EventStore, control: Control) -> tuple[Position, bool]:
    """Everything the generation holds now, applied to ``fresh`` (numbered from its offset on)."""
    generation = control.generation
    target = c.link.last_sequence(generation)
    position, sealed = Position(generation, 0, control.offset), False
    fresh.maintain(lambda w: fresh.set_sequence_floor(w, control.offset), "moving to a new stream generation")
    c.link.follow(generation, 1)
    quiet_since = time.monotonic()
    while position.sequence < target and not sealed:
        batch = c.records(0.2)
        if batch is None:
            if time.monotonic() - quiet_since > 30.0:
                raise Unreachable("moving to a new stream generation: the stream stopped delivering")
            continue
        quiet_since = time.monotonic()
        records = [r for r in batch[1] if batch[0] == generation and r.seq > position.sequence]
        if records and records[0].seq != position.sequence + 1:
            c.link.follow(generation, position.sequence + 1)
            continue
        for start in range(0, len(records), 2000):
            applied = apply_records(fresh, position, sealed, records[start:start + 2000])
            position, sealed = applied.position, applied.sealed
        if records:
            log.info("replication: generation %d: %d of %d", generation, position.sequence, target)
    return position, sealed


def rebuild(c: Node, live: LiveEvents, exclusive: Callable[[], AbstractContextManager]) -> dict[str, int]:
    """``rebuild_index`` of a replicated store (on the writer thread): ``live``, the store's
    live messages as events; ``exclusive``, see :func:`adopt`."""
    wait = 2 * c.settings.write_timeout
    store = c.store
    bytes_before = store.file_size()
    with store.read() as tx:
        records = store.event_count(tx)
    if not c.sealed:
        c.ready_for_write(time.monotonic() + wait)
        _seal(c, time.monotonic() + wait)
    old = c.position.generation
    if c.sealed_by_me:
        control = _switch(c, old + 1, live)
    else:
        try:
            control = _await_switch(c, old, wait)
        except Unreachable:
            log.warning("replication: generation %d was sealed and its switch made no progress: finishing it", old)
            control = _switch(c, old + 1, live)      # its sealer died: the state at the seal is the same here
    try:
        adopt(c, control, exclusive)
    finally:                  # the new generation holds everything: the old one goes even if this node waits
        c.link.delete(old)
    return {"messages_indexed": control.initial, "records_removed": max(0, records - control.initial),
            "bytes_before": bytes_before, "bytes_after": store.file_size()}


def _seal(c: Node, deadline: float) -> None:
    while not c.sealed:
        position = c.position
        try:
            seq = c.link.publish(layout.seal_subject(c.settings.stream, position.generation), b"",
                                 layout.event_id(position.sequence + 1, b"seal"), position.sequence, layout.SEAL)
        except Refused:
            c.catch_up(deadline)
            continue
        sealed_at = replace(position, sequence=seq)
        c.store.maintain(partial(write_position, position=sealed_at), "sealing the stream generation")
        c.moved(sealed_at, True)
        c.sealed_by_me = True


def _switch(c: Node, generation: int, live: LiveEvents) -> Control:
    control = _publish_generation(c, generation, live)
    c.link.set_control(control)
    c.sealed_by_me = False
    return control


def _await_switch(c: Node, old: int, wait: float) -> Control:
    """The next generation's control record, once another node wrote it; ``Unreachable``
    when its switch made no progress (no new message in the next stream) for ``wait`` seconds."""
    deadline, seen = time.monotonic() + wait, -1
    while True:
        control = c.link.control()
        if control.generation > old:
            return control
        try:
            filled = c.link.last_sequence(old + 1)
        except Gone:
            filled = -1
        if filled != seen:
            seen, deadline = filled, time.monotonic() + wait
        if time.monotonic() > deadline:
            raise Unreachable("rebuild_index: another node's switch of the stream generation stopped")
        c.pump(0.2)


def seed(c: Node, control: Control, live: LiveEvents, exclusive: Callable[[], AbstractContextManager]) -> None:
    """A node whose store has events of its own joins a stream that has none: its live
    messages become generation 1 (as ``rebuild_index`` would write them), and its store
    is made anew from there.  ``Refused`` when the stream has a history already."""
    refused = Refused("this store has events of its own and the stream already has a history: a node joins "
                      "an existing stream on an empty store (docs/replication.md)")
    if control != Control():
        raise refused
    c.link.ensure(1)
    if c.link.last_sequence(1) != 0:
        raise refused
    log.info("replication: seeding the stream with this store's live messages")
    try:
        control = _publish_generation(c, 1, live, fresh=False)
    except Refused:                             # another node wrote first
        raise refused from None
    c.link.set_control(control)
    adopt(c, control, exclusive)


def _publish_generation(c: Node, generation: int, live: LiveEvents, fresh: bool = True) -> Control:
    """The live messages into stream ``generation`` (made anew when ``fresh``); its control record."""
    if fresh:
        c.link.delete(generation)               # what an interrupted switch left
    c.link.ensure(generation)
    base = c.settings.stream
    with c.store.read() as tx:
        count, events = live(tx)
        chunk: list[tuple[str, bytes, str]] = []
        last = 0
        for event in events:
            raw = codec.encode_event(event)
            seq = last + len(chunk) + 1
            chunk.append((layout.event_subject(base, generation, event.message.message_id), raw,
                          layout.event_id(seq, raw)))
            if len(chunk) == PUBLISH_CHUNK:
                last = c.link.publish_all(chunk, last)
                chunk = []
        if chunk:
            last = c.link.publish_all(chunk, last)
    if last != count:
        raise Unreachable("rebuild_index: the new stream generation does not hold every live message")
    with c.store.read() as tx:              # local numbers go on from where the sealed generation ended
        return Control(generation, count, c.store.last_sequence(tx) - count)
