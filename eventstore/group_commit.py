"""Group commit: one writer thread that gathers the commands waiting into one commit.

Callers on any thread :meth:`GroupCommitter.submit` a command and block until
the commit holding its events is durable (or until it failed, with its own
error).  The writer thread takes the first command waiting and every other
one queued behind it (at most ``max_group``) and runs them with
:meth:`EventStore.execute_many`: one write transaction, one sync.  With a
single caller it is exactly :meth:`EventStore.execute` on another thread; the
more callers write at once, the more commands share each sync.

All writes of the store go through this thread while it runs (LMDB: a write
transaction stays on the thread that began it, one writer at a time).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

from .errors import StoreIOError
from .store import EventStore, WriteTx

Command = Callable[[WriteTx], object]


class GroupCommitter:
    def __init__(self, store: EventStore, max_group: int = 256) -> None:
        self._store = store
        self._max = max_group
        self._queue: queue.SimpleQueue[tuple[Command, Future] | None] = queue.SimpleQueue()
        self._closed = False
        self.groups = 0              # commits made, and the commands they held (for benchmarks)
        self.commands = 0
        self._thread = threading.Thread(target=self._loop, name="convmem-writer", daemon=True)
        self._thread.start()

    def submit(self, command: Command) -> object:
        """Run ``command`` in a durable commit; its result, or its error raised here."""
        if self._closed:
            raise StoreIOError("the store is closed")
        future: Future = Future()
        self._queue.put((command, future))
        return future.result()

    def close(self) -> None:
        """Finish what is queued, then stop the writer thread."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
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
        self.groups += 1
        self.commands += len(group)
        for (_, future), (ok, value) in zip(group, outcomes, strict=True):
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)  # type: ignore[arg-type]
