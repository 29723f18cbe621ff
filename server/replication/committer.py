"""The writer of a replicated store: one thread applies the stream and runs the commands.

Everything that writes the local store happens on this thread, in order:
batches of other nodes' events (queued by the link's consumer) and the
commands submitted by callers.  A command runs like this:

1. the node is ready (connected, following the current generation);
2. it runs in a local LMDB write transaction exactly as on one store, so
   validation, ``NOT_FOUND`` and ``CONFLICT`` come from the local state;
3. just before the commit, its events are published, each expecting the
   stream's last sequence to be the one this node applied (a retry after a
   timeout repeats the same ``Nats-Msg-Id`` and is de-duplicated);
4. only if the stream acknowledged them is the transaction committed, with
   the stream sequence reached in it; then the caller is answered.

Each command and each batch starts from the stream position stored in the
store (:func:`.apply.where`): another process may write the same store through
the stream meanwhile — an import, as a *visitor*: this class made without the
service's ``live`` and ``exclusive``, which never seeds, adopts or makes a
generation (it refuses to write instead).

A publish refused because the stream moved on aborts the transaction; the
node catches up and runs the command again against the new state (a stale
``expected_revision`` then fails as ``CONFLICT``, as it would locally).  If
the stream stays unreachable past ``Settings.write_timeout`` the command fails
with ``IO_ERROR``: not acknowledged (it may still have reached the stream, in
which case this node applies it when it catches up, as any other event).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from eventstore.committer import Command, Committer
from eventstore.errors import ConvMemError, CorruptStoreError, StoreIOError
from eventstore.store import EventStore, WriteTx

from . import layout
from .apply import Position, apply_records, read_position, where, write_node, write_position
from .generations import LiveEvents, adopt, rebuild, seed
from .layout import Record
from .link import Gone, Link, Refused, Unreachable
from .publish import outgoing, publish_all
from .settings import Settings

log = logging.getLogger("convmem")

TICK = 0.2                   # seconds between two tries to get ready while idle
APPLY_BATCH = 20_000         # stream messages per local transaction at most (when catching up)
GATHER_WAIT = 1.0            # seconds a catch-up's transaction may wait for the stream's next messages
PROGRESS_EVERY = 2.0         # seconds between two progress lines of a long catch-up
_STOP = ("stop",)


class ReplicatedCommitter(Committer):
    excludes_reads = True       # its writer thread takes the exclusive lock to replace the file
    streamed = True

    def __init__(self, store: EventStore, settings: Settings, live: LiveEvents | None,
                 exclusive: Callable[[], contextlib.AbstractContextManager] | None) -> None:
        """``live`` and ``exclusive``: the service's, when this process serves the store; None:
        a visitor, writing a node's store for a while (an import; the module's docstring)."""
        self.store, self.settings = store, settings
        self.served = (live, exclusive) if live is not None and exclusive is not None else None
        with store.read() as tx:
            position, last = read_position(tx), store.last_sequence(tx)
        self.seeding = bool(self.served) and position is None and last > 0     # events of its own: may seed
        self.refused = ""                      # why this node can never follow the stream (reads still work)
        self.position = position or Position(0, 0)
        self.sealed = position is not None and last == position.offset + position.sequence - 1
        self.sealed_by_me = False              # this node published the seal (it makes the next generation)
        self.ready = False
        self.stream_last = self.position.sequence
        self.caught_up_at = time.time()
        self._progress_at = 0.0
        self._last_failure = ""
        self.not_ready = ""                    # why the last try to get ready failed (for the error message)
        self._seen: set[str] | None = None     # while a command runs: the event ids applied meanwhile
        self._changed = threading.Condition()
        self._queue: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self.deferred: collections.deque[tuple] = collections.deque()
        self._closed = False
        self._closing = threading.Lock()
        self.link = Link(settings.servers, settings.stream, settings.replicas, self._on_records)
        self._thread = threading.Thread(target=self._loop, name="convmem-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ callers
    def submit(self, command: Command, *, bulk: bool = False) -> object:
        """Run ``command``, publish its events, commit; its result or its error raised here
        (``bulk``: an import's batch, in a bulk transaction)."""
        return self._on_writer("command", (command, bulk))

    def wait_applied(self) -> None:
        """With ``--sync-reads``: :meth:`sync` before a read."""
        if self.settings.sync_reads:
            self.sync()

    def run(self, job: Callable[[], object]) -> object:
        """``job()`` on the writer thread (maintenance: the generation switch)."""
        return self._on_writer("job", job)

    def rebuild(self) -> dict[str, int]:
        """``rebuild_index``: a new stream generation from the live messages (see :mod:`.generations`)."""
        return self.run(lambda: rebuild(self, *self._served()))      # type: ignore[return-value]

    def _served(self) -> tuple[LiveEvents, Callable[[], contextlib.AbstractContextManager]]:
        """The service's live messages and exclusive lock (a visitor has neither)."""
        if self.served is None:
            raise StoreIOError("this process does not serve the store: only its node's server switches generations")
        return self.served

    def _on_writer(self, kind: str, fn: object) -> object:
        future: Future = Future()
        with self._closing:
            if self._closed:
                raise StoreIOError("the store is closed")
            self._queue.put((kind, fn, future))
        return future.result()

    def close(self) -> None:
        with self._closing:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()
        self.link.close()

    def sync(self, timeout: float | None = None) -> None:
        """Wait until this node has applied everything the stream held when called."""
        timeout = timeout or self.settings.write_timeout
        with self._changed:
            if not self._changed.wait_for(lambda: self.ready, timeout):
                raise Unreachable("reading: this node is not following the stream (unreachable?)")
        target = self.link.last_sequence(self.position.generation)
        with self._changed:
            if not self._changed.wait_for(lambda: self.position.sequence >= target or self.sealed, timeout):
                raise Unreachable("reading: this node did not catch up with the stream in time")

    def status(self) -> dict[str, Any]:
        """Replication as health reports it (read from any thread)."""
        position = self.position
        lag = max(0, self.stream_last - position.sequence)
        return {"stream": layout.stream(self.settings.stream, position.generation), "connected": self.link.connected,
                "generation": position.generation, "applied_sequence": position.sequence,
                "stream_sequence": max(self.stream_last, position.sequence), "lag_events": lag,
                "lag_seconds": round(time.time() - self.caught_up_at, 3) if lag else 0.0}

    # ------------------------------------------------------------ the loop
    def _on_records(self, generation: int, records: list[Record]) -> None:
        """From the link's thread: only queue them."""
        if records:
            self._queue.put(("records", generation, records))

    def _next(self, timeout: float) -> tuple | None:
        if self.deferred:
            return self.deferred.popleft()
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _loop(self) -> None:
        if self.served is not None:         # where an import into this store publishes (docs/import.md)
            self.store.maintain(lambda w: write_node(w, self.settings.servers, self.settings.stream),
                                "recording the node's stream")
        self.link.wait_connected(TICK)      # a starting node tries to get ready at once, not a tick later
        item = self._next(0)
        while True:
            if item is _STOP:
                return
            if not self.ready:
                try:
                    self._try_ready()
                except ConvMemError as exc:            # unreachable, or a generation to adopt failed: retried
                    self.not_ready = exc.message
                    log.debug("replication: not ready: %s", exc.message)
                except Exception as exc:
                    self._failed("getting ready failed", exc)
            if item is None:
                pass
            elif item[0] == "records":
                try:
                    self._apply(item[1], self._gather(item[1], item[2]))
                except Exception as exc:               # the batch is read again from the stored position
                    self._failed("applying the stream's events failed", exc)
                    self.ready = False
            else:
                self._serve(item)
            item = self._next(TICK)

    def _failed(self, what: str, exc: Exception) -> None:
        """Log a failure of the loop once, not on every retry of it."""
        text = f"{what}: {exc}"
        if text != self._last_failure:
            self._last_failure = text
            log.error("replication: %s", text, exc_info=not isinstance(exc, ConvMemError))

    def _serve(self, item: tuple) -> None:
        kind, fn, future = item
        try:
            result = self._run_command(*fn) if kind == "command" else fn()
        except BaseException as exc:          # never leave a caller waiting
            future.set_exception(exc)
        else:
            future.set_result(result)

    def pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for one item: records are applied, anything else waits its turn."""
        batch = self.records(timeout)
        if batch is not None:
            self._apply(batch[0], self._gather(*batch))

    def _gather(self, generation: int, first: list[Record]) -> list[Record]:
        """The records of ``first`` and of the batches of ``generation`` queued right behind it (one transaction
        for all: a catch-up applies at replay speed); what follows them waits its turn.  While
        the stream holds more (a catch-up), it waits up to ``GATHER_WAIT`` for them: a bulk
        transaction has a fixed cost (the term index's second process starts and is waited
        for), which a catch-up in transactions of one pull chunk would pay over and over."""
        records, until = list(first), time.monotonic() + GATHER_WAIT
        while len(records) < APPLY_BATCH and not self.deferred:
            wait = until - time.monotonic() if records[-1].pending else 0.0
            try:
                following = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if following[0] == "records" and following[1] == generation:
                records += following[2]
            else:
                self.deferred.append(following)
        return records

    def records(self, timeout: float) -> tuple[int, list[Record]] | None:
        """The next batch of stream records, as (generation, records); anything else waits its turn."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item[0] != "records":
            self.deferred.append(item)
            return None
        return item[1], item[2]

    def moved(self, position: Position, sealed: bool) -> None:
        """At ``position`` now (a seal it published, a generation it adopted); following it unless ``sealed``."""
        with self._changed:
            if position.generation != self.position.generation:
                self.stream_last, self.caught_up_at = position.sequence, time.time()
            self.position, self.sealed, self.ready = position, sealed, False
            self.stream_last = max(self.stream_last, position.sequence)
            self._changed.notify_all()
        if not sealed:
            self.follow_from_here()

    # ------------------------------------------------------------ readiness
    def _try_ready(self) -> None:
        """Connected, on the current generation, following it: then ``ready``."""
        if not self.link.connected or self.refused:
            return
        control = self.link.control()
        if self.seeding:
            try:
                seed(self, control, *self._served())
            except Refused as exc:
                self.refused = self.not_ready = exc.message
                log.error("replication: %s", exc.message)
                return
            self.seeding = False              # it follows the stream from the generation it adopted
            return
        if self.position.generation == 0 and control.generation == 1 and not control.offset:
            self.link.ensure(1)                                          # an empty store, a young stream
            self._set_position(Position(1, 0))
        elif self.position.generation < control.generation and self.served is None:
            self.refused = self.not_ready = ("the node's store is behind the stream's current generation: "
                                             "its server (convmem serve --replicate) moves it there first")
            return
        elif self.position.generation < control.generation:              # made anew from the current one
            adopt(self, control, self._served()[1])
            return
        elif self.position.generation > control.generation:
            raise Unreachable("the stream's control record is behind this store: is --stream the right name?")
        elif self.sealed:
            return                                        # the next generation is not ready yet
        else:
            self.link.ensure(None)                        # the generation exists: never made again here
        self.follow_from_here()

    def follow_from_here(self) -> None:
        """Read the stream on from this node's position; ready to write."""
        self.link.follow(self.position.generation, self.position.sequence + 1)
        with self._changed:
            self.ready, self.not_ready = True, ""
            self._changed.notify_all()

    def _set_position(self, position: Position) -> None:
        self.store.maintain(lambda w: write_position(w, position), "storing the stream position")
        self.position = position
        self.stream_last = max(self.stream_last, position.sequence) if position.generation else 0

    def ready_for_write(self, deadline: float) -> None:
        while not self.ready or self.sealed:
            try:
                self.ready = self.ready and not self.sealed
                self._try_ready()
            except (Unreachable, Gone) as exc:
                self.not_ready = exc.message
            if self.ready and not self.sealed:
                return
            if self.refused:
                raise Unreachable(f"writing: {self.refused}; nothing was written")
            if time.monotonic() > deadline:
                why = "switching generations" if self.sealed else (self.not_ready or "not connected")
                raise Unreachable(f"writing: the stream is unreachable or switching generations ({why}); "
                                  "nothing was written")
            self.pump(TICK)

    # ------------------------------------------------------------ applying
    def _apply(self, generation: int, records: list[Record]) -> None:
        if not self.ready or generation != self.position.generation:
            return                                        # from a generation this node left
        records = [r for r in records if r.seq > self.position.sequence]
        if not records:
            return
        if records[0].seq != self.position.sequence + 1:  # a gap: read again from where this node is
            self.link.follow(generation, self.position.sequence + 1)
            return
        self.stream_last = max(self.stream_last, records[-1].seq + records[-1].pending)
        for start in range(0, len(records), APPLY_BATCH):
            applied = apply_records(self.store, self.position, self.sealed, records[start:start + APPLY_BATCH])
            if self._seen is not None:
                self._seen |= applied.ids
            with self._changed:
                self.position, self.sealed = applied.position, applied.sealed
                self._changed.notify_all()
        if self.position.sequence >= self.stream_last:
            self.caught_up_at = time.time()
        self._report_progress()
        if self.sealed:
            log.info("replication: generation %d is sealed; waiting for the next one", generation)
            self.ready = False

    def _report_progress(self) -> None:
        behind, now = self.stream_last - self.position.sequence, time.monotonic()
        if behind and now - self._progress_at >= PROGRESS_EVERY:
            self._progress_at = now
            log.info("replication: catching up: applied %d of %d", self.position.sequence, self.stream_last)
        elif not behind and self._progress_at:
            self._progress_at = 0.0
            log.info("replication: caught up at %d", self.position.sequence)

    def catch_up(self, deadline: float) -> None:
        """Apply everything the stream holds now (or stop at its seal)."""
        while True:
            try:
                target = self.link.last_sequence(self.position.generation)
                break
            except Gone:
                self.ready = False                         # the generation went: the next _try_ready moves on
                return
            except Unreachable:
                if time.monotonic() > deadline:
                    raise
                self.pump(TICK)
        if target < self.position.sequence:              # not the stream this node followed
            self.ready = False
            raise Unreachable("writing: the stream holds less than this node applied; is it the same stream?")
        self.stream_last = max(self.stream_last, target)
        while self.position.sequence < target and not self.sealed and self.ready:
            if time.monotonic() > deadline:
                raise Unreachable("writing: this node could not catch up with the stream in time; nothing was written")
            self.pump(TICK)

    # ------------------------------------------------------------ commands
    def _run_command(self, command: Command, bulk: bool) -> object:
        self._seen = set()
        try:
            return self._run_attempts(command, bulk)
        finally:
            self._seen = None

    def _run_attempts(self, command: Command, bulk: bool) -> object:
        deadline = time.monotonic() + self.settings.write_timeout
        unsure: list[tuple[set[str], object]] = []        # attempts refused after some of it may have landed
        while True:
            self.ready_for_write(deadline)
            state: dict[str, Any] = {}
            try:
                result = self._attempt(command, state, deadline, bulk)
            except Refused:
                if "ids" in state:
                    unsure.append((state["ids"], state["result"]))
                self.catch_up(deadline)
                for ids, result in unsure:                 # did an earlier attempt land after all?
                    if self._seen is not None and ids <= self._seen:
                        return result
                continue
            except (StoreIOError, CorruptStoreError):
                raise
            except ConvMemError:                           # refused on the local state: is it the latest?
                if self._confirmed(deadline):
                    raise
                continue
            if "sequence" in state or self._confirmed(deadline):
                return result

    def _confirmed(self, deadline: float) -> bool:
        """A command that wrote nothing decided on the local state: True if that was the
        stream's latest, else the node has caught up and the command must run again."""
        before = self.position
        self.catch_up(deadline)
        return self.position == before and self.ready and not self.sealed

    def _attempt(self, command: Command, state: dict[str, Any], deadline: float, bulk: bool) -> object:
        def run(w: WriteTx) -> object:
            position, sealed = where(self.store, w, self.position, False)
            if sealed:                         # another process of this store applied the seal
                raise Refused("writing: the stream generation is sealed")
            state["position"] = position
            state["result"] = result = command(w)
            if w.appended:
                w.before_commit.append(lambda w: self._publish(w, position, state, deadline))
            return result
        result = self.store.execute(run, bulk=bulk)
        if "sequence" in state:
            with self._changed:
                self.position = replace(state["position"], sequence=state["sequence"])
                self.stream_last = max(self.stream_last, self.position.sequence)
                self._changed.notify_all()
        return result

    def _publish(self, w: WriteTx, position: Position, state: dict[str, Any], deadline: float) -> None:
        """Before the commit: the transaction's events to the stream, chained on ``position``."""
        items = outgoing(self.settings.stream, w, position)
        state["ids"] = {msg_id for _, _, msg_id in items}
        end = replace(position, sequence=position.sequence + len(items))
        write_position(w, end)
        if publish_all(self.link, items, position.sequence, deadline) != end.sequence:
            raise CorruptStoreError("the stream stored an event at another sequence than expected")
        state["sequence"] = end.sequence
