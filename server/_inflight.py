"""What the stdio fast path has in flight (:class:`InFlight`): its calls, run on worker
threads that write their answers themselves, and the requests handed to the SDK.

No ``mcp`` here: the MCP layer (:class:`server.app.FastCalls`) decides which messages
are plain calls and builds their answers; this module keeps the count, so that the
end of stdin waits for every answer, and keeps a cancelled call unanswered.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from dataclasses import dataclass

import anyio

from ._stdio import StdoutLines

log = logging.getLogger("convmem")


@dataclass(slots=True)
class _Call:
    """A call in flight: its key (its id as the SDK compares ids), whether the client cancelled it."""

    key: Hashable
    cancelled: bool = False


class InFlight:
    """Runs the fast path's calls and counts what is still to be answered.

    A call runs on a worker thread of the pool it is given (a brief one alone runs
    on the loop's thread: :meth:`start`), and that thread writes its answer
    (:meth:`StdoutLines.put`): nothing goes back to the event loop on the way of
    an answer (no future, no task, no wake-up of the loop).  A call
    the client cancelled (:meth:`cancel`) still runs to its end — a write is not
    torn — and is not answered, as the SDK does.

    Threads: :meth:`start`, :meth:`cancel`, :meth:`handed`, :meth:`answered` and
    :meth:`drain` run on the event loop; a call's end (:meth:`_settle`) on the
    thread that ran it.  ``_lock`` guards what both touch: the calls in flight, their
    count and the drain's event.
    """

    def __init__(self, out: StdoutLines) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._calls: dict[Hashable, _Call] = {}      # a duplicate key: the newer call, as the SDK does
        self._running = 0                             # calls not yet settled
        self._sdk: dict[Hashable, int] = {}           # requests handed to the SDK, not yet answered
        self._changed: anyio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def start(self, key: Hashable, pool: Executor, answer: Callable[[], bytes], refused: Callable[[], bytes], *,
              brief: bool = False) -> None:
        """Run ``answer()`` on ``pool`` and write the line it returns; ``refused()`` is the
        line when the call cannot begin (the server has stopped: the pool is shut down).

        A ``brief`` call (one message's write on a store that is not replicated,
        nothing more read and waiting) that is alone — no other call or request in
        flight — runs here, on the event loop's thread: for a client that waits for
        each answer, a worker's wake-up is then off the way of every write (on a busy
        machine a woken thread may wait for a core).  Meanwhile the loop reads
        nothing, as the write would have held the store's commit for the next one
        anyway."""
        self._loop = self._loop or asyncio.get_running_loop()
        call = _Call(key)
        with self._lock:
            alone = brief and not self._running and not self._sdk and not self._closed
            self._calls[key] = call
            self._running += 1
        if alone:
            self._run(call, answer)
            return
        try:
            if self._closed:
                raise RuntimeError("the server has stopped")
            pool.submit(self._run, call, answer)
        except RuntimeError:
            self._settle(call, refused())

    def _run(self, call: _Call, answer: Callable[[], bytes]) -> None:
        """On a worker thread: the call, then its answer written from here (``answer`` never
        raises; were it to, the call would still be settled, unanswered, so drain cannot hang)."""
        line = b""
        try:
            line = answer()
        finally:
            self._settle(call, line)

    def _settle(self, call: _Call, line: bytes) -> None:
        with self._lock:
            if self._calls.get(call.key) is call:
                del self._calls[call.key]
            cancelled = call.cancelled
        if line and not cancelled and not self._out.put(line):     # nobody reads: dropped, as the SDK does
            log.debug("dropped an answer: stdout is closed")
        with self._lock:
            self._running -= 1
            changed = self._changed if not self._running else None
        if changed is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(changed.set)

    def cancel(self, key: Hashable) -> None:
        """The client gave up on request ``key``: a call in flight stays unanswered, and a
        request at the SDK counts as answered (the SDK will not answer it)."""
        with self._lock:
            if (call := self._calls.get(key)) is not None:
                call.cancelled = True
        if key in self._sdk:
            self.answered(key)

    def handed(self, key: Hashable) -> None:
        """Request ``key`` went to the SDK."""
        self._sdk[key] = self._sdk.get(key, 0) + 1

    def answered(self, key: Hashable) -> None:
        """The SDK answered request ``key`` (if it was handed to it)."""
        if (left := self._sdk.pop(key, 0) - 1) > 0:
            self._sdk[key] = left
        if self._changed is not None:
            self._changed.set()

    async def drain(self) -> None:
        """Until every call and request read has been answered (or cancelled by the client)."""
        while True:
            with self._lock:
                if not self._running and not self._sdk:
                    self._changed = None
                    return
                self._changed = changed = anyio.Event()
            await changed.wait()

    def close(self) -> None:
        """When the server stops: a call read from now on is refused."""
        self._closed = True
