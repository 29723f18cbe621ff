"""Group commit: concurrent commands gathered into one commit, a lone one run at once.

Callers on any thread :meth:`GroupCommitter.submit` a command and block until
the commit holding its events is durable (or until it failed, with its own
error).

* **A lone writer** — no other command queued or being committed — runs its
  command in its own thread (:meth:`EventStore.execute`): no hand-off to
  another thread and back, which costs a sequential client ~10–15% more CPU
  per write than the commit itself saves nothing for.
* **Concurrent writers** queue their commands for the writer thread, which
  takes the first one waiting and every other one queued behind it (at most
  ``max_group``) and runs them with :meth:`EventStore.execute_many`: one write
  transaction, one sync.  The more callers write at once, the more commands
  share each sync.

LMDB allows one write transaction at a time, and each must stay on the thread
that began it: ``_commit_lock`` is held around every commit, by the writer
thread or by a lone caller, so the two never overlap, and each transaction
begins and ends inside one call on one thread.  A command arriving while
another is pending always queues, so commands commit in the order they were
submitted, as with one writer.

A bulk command (an import's batch) never joins a group: it runs in a bulk
transaction of its own, on the caller's thread, once the commits before it
are done.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager

from .committer import Command, Committer, LiveEvents
from .errors import StoreIOError
from .store import EventStore


class GroupCommitter(Committer):
    def __init__(self, store: EventStore, max_group: int = 256) -> None:
        self._store = store
        self._max = max_group
        self._queue: queue.SimpleQueue[tuple[Command, Future] | None] = queue.SimpleQueue()
        self._closed = False
        self._state = threading.Lock()          # guards _pending, _closed and the counters
        self._pending = 0                       # commands submitted and not yet answered
        self._commit_lock = threading.Lock()    # held around every commit (one LMDB writer)
        self.groups = 0              # commits made, and the commands they held (for benchmarks)
        self.commands = 0
        self.lone = 0                # of those commits: run by a lone caller in its own thread
        self._thread = threading.Thread(target=self._loop, name="convmem-writer", daemon=True)
        self._thread.start()

    def submit(self, command: Command, *, bulk: bool = False) -> object:
        """Run ``command`` in a durable commit; its result, or its error raised here."""
        with self._state:
            if self._closed:
                raise StoreIOError("the store is closed")
            lone = self._pending == 0
            self._pending += 1
        try:
            if bulk:
                with self._commit_lock:
                    result = self._store.execute(command, bulk=True)
                self._count(1, lone=True)
                return result
            if lone and self._commit_lock.acquire(blocking=False):
                try:
                    result = self._store.execute(command)
                finally:
                    self._commit_lock.release()
                self._count(1, lone=True)
                return result
            future: Future = Future()
            self._queue.put((command, future))
            return future.result()
        finally:
            with self._state:
                self._pending -= 1

    def close(self) -> None:
        """Finish what is queued, then stop the writer thread."""
        with self._state:
            if self._closed:
                return
            self._closed = True
        self._queue.put(None)
        self._thread.join()
        with self._commit_lock:          # a lone caller's commit in progress ends first
            pass

    def _count(self, commands: int, lone: bool = False) -> None:
        with self._state:
            self.groups += 1
            self.commands += commands
            self.lone += int(lone)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            with self._commit_lock:       # gathered after waiting for it: whatever queued meanwhile joins
                group, stop = [first], False
                while len(group) < self._max:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        stop = True
                        break
                    group.append(item)
                self._run(group)
            if stop:
                return

    def _run(self, group: list[tuple[Command, Future]]) -> None:
        try:
            outcomes = self._store.execute_many([command for command, _ in group])
        except BaseException as exc:            # never leave a caller waiting
            for _, future in group:
                future.set_exception(exc)
            return
        self._count(len(group))
        for (_, future), (ok, value) in zip(group, outcomes, strict=True):
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)  # type: ignore[arg-type]


def group_committer(store: EventStore, live: LiveEvents,
                    exclusive: Callable[[], AbstractContextManager]) -> Committer:
    """The committer of a store of its own, as a :data:`~.committer.CommitterFactory`."""
    return GroupCommitter(store)
