"""The stdio transport, and stopping the server on a signal.

The messages are the SDK's stdio transport's, byte for byte, parsed and
serialized by the SDK calls :mod:`server.app` passes in (nothing here imports
``mcp``).  What differs is where the work happens:

* the SDK reads stdin in a worker thread that cannot be cancelled.  Here a
  pipe, socket or terminal stays registered with the event loop
  (:class:`MessageReader`), so cancelling is immediate; a regular file or
  ``/dev/null`` is read in a thread;
* :class:`StdoutLines` writes each answer at once from whichever thread has
  it (the SDK: two calls into a worker thread); on a pipe or socket what a full
  pipe does not take is written by the event loop when there is room, so a
  client slow to read never blocks anyone;
* :class:`MessageReader` and :class:`MessageWriter` are the streams
  ``Server.run`` takes, with no task or memory stream of their own;
* the reader hands each message to a ``take`` hook first (the fast path for
  ``tools/call``: a worker thread answers through :meth:`StdoutLines.put`), and
  at the end of stdin awaits a ``drain`` hook, so calls already read are
  answered before the SDK cancels what is in flight.

Why this module and not the SDK's ``stdio_server``: it pays.  Medians of three
interleaved runs of 1,000 sequential writes on a loaded 2-core machine
(``python -m tools.bench_mcp --only-writes [--no-fastcall | --sdk-stdio]``;
instructions from ``--callgrind OUT``; runs in bench/results/stdio.jsonl)::

    path                          p50 ms   server CPU ms a write   instructions a write
    this module + fast path        1.86          0.64                   0.97 M
    this module, SDK dispatch      4.30          1.39                   1.77 M
    the SDK's stdio_server         3.58          1.81                   2.68 M

The fast path takes 48% off the SDK transport's p50 (the bar is 15%).  Its
answers are the SDK's byte for byte (tests/test_mcp_stdio_contract.py runs one
battery through both ways of this module and :mod:`tools.sdk_stdio`), and it
also answers the lines the SDK leaves unanswered.

:func:`until_signal` runs the server until SIGINT or SIGTERM, then cancels
it: the lifespan's ``finally`` closes the store after the write in progress
(nothing acknowledged is lost: a write is acknowledged only after its commit).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import os
import signal
import stat
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Generic, Self, TypeVar

import anyio

log = logging.getLogger("convmem")
_READ = 1 << 16
M = TypeVar("M")                    # a message of the protocol (the MCP layer's SessionMessage)


MAX_LINE = 16 << 20         # bytes of one line (the HTTP transport's bound on a body): a valid call is far less


class LineTooLong(Exception):
    """A line of more than :data:`MAX_LINE` bytes, skipped without being kept."""


class StdinLines:
    """The lines of file descriptor ``fd`` (UTF-8, undecodable bytes replaced, as
    the SDK reads them): :meth:`read` adds what the descriptor holds, :meth:`line`
    takes the next whole line (the last one unterminated at the end of input).
    A line longer than ``max_line`` bytes is not kept: its bytes are dropped as they
    arrive, and :meth:`line` gives a :class:`LineTooLong` in its place."""

    def __init__(self, fd: int, max_line: int = MAX_LINE) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        self.pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
        self.eof = False
        self.max_line = max_line
        self._buf = bytearray()
        self._scanned = 0
        self._skipping = False          # dropping the rest of a line past max_line

    def line(self) -> str | LineTooLong | None:
        """The next line; None until more has been read (or, at the end of input, for good)."""
        if (end := self._buf.find(b"\n", self._scanned)) < 0:
            if self._skipping or len(self._buf) > self.max_line:
                return self._skip()
            self._scanned = len(self._buf)
            if not self.eof or not self._buf:
                return None
            end = len(self._buf) - 1
        if self._skipping or end > self.max_line:
            del self._buf[:end + 1]
            self._scanned, self._skipping = 0, False
            return LineTooLong(f"a line is longer than {self.max_line} bytes")
        line = bytes(self._buf[:end + 1])
        del self._buf[:end + 1]
        self._scanned = 0
        return line.decode("utf-8", "replace")

    def _skip(self) -> LineTooLong | None:
        """Drop what is read of a line too long; it is over at its newline (or the end of input)."""
        self._buf.clear()
        self._scanned, self._skipping = 0, not self.eof
        return None if self._skipping else LineTooLong(f"a line is longer than {self.max_line} bytes")

    def has_line(self) -> bool:
        """Whether a whole line is read and waiting."""
        return self._buf.find(b"\n", self._scanned) >= 0

    def read(self) -> None:
        """Read what is there (a pollable descriptor: once it is readable, else it may block)."""
        data = os.read(self.fd, _READ)
        self.eof = not data
        self._buf += data


class StdoutLines:
    """Writes the protocol's lines to file descriptor ``fd`` (UTF-8, as the SDK
    writes them), whole and in order, from the event loop or any other thread.

    On a pipe or socket the descriptor is non-blocking: :meth:`put` writes at once,
    and what a full pipe does not take waits in a backlog that a task of the event
    loop writes when the pipe has room (``wait_writable``), before any line put
    later; so no writer ever blocks, and a worker thread can write a tool call's
    answer itself.  Anything else (a terminal, a file) is written blocking: from a
    worker thread directly, from the event loop in a thread, as the SDK does.
    :meth:`close` puts the descriptor back in blocking mode."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        self._pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        if self._pollable:
            os.set_blocking(fd, False)
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()           # one writer at a time; guards the backlog
        self._backlog: collections.deque[bytes] = collections.deque()
        self._broken = False                    # the reader is gone
        self._flusher: asyncio.Task[None] | None = None
        self._flushed: list[asyncio.Future[None]] = []

    def put(self, data: bytes) -> bool:
        """Write ``data`` whole after every line put before it (or leave the rest to the
        backlog); False once the reader is gone.  Any thread; never blocks on a pipe."""
        with self._lock:
            if self._broken:
                return False
            if not self._backlog:
                try:
                    done = os.write(self.fd, data) if self._pollable else _write_all(self.fd, data)
                except BlockingIOError:
                    done = 0
                except BrokenPipeError:
                    self._broken = True
                    return False
                if done == len(data):
                    return True
                data = data[done:]
            self._backlog.append(data)
            if len(self._backlog) == 1:
                self._loop.call_soon_threadsafe(self._flush_soon)
        return True

    async def write(self, data: bytes) -> None:
        """Write ``data`` whole and wait until it is written; ``anyio.BrokenResourceError``
        once the reader is gone (what the SDK's dispatcher expects of a stream nobody
        receives from: it drops the answer and goes on until stdin ends)."""
        if not self._pollable:
            written = await anyio.to_thread.run_sync(self.put, data)
        elif (written := self.put(data)) and self._backlog:
            future = self._loop.create_future()
            self._flushed.append(future)
            await future
            written = not self._broken
        if not written:
            raise anyio.BrokenResourceError

    def _flush_soon(self) -> None:
        if self._flusher is None:
            self._flusher = self._loop.create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._write_backlog():
                await anyio.wait_writable(self.fd)
        finally:
            self._flusher = None
            for future in self._flushed:
                if not future.done():
                    future.set_result(None)
            self._flushed.clear()

    def _write_backlog(self) -> bool:
        """Write what the pipe takes of the backlog; whether some is left."""
        with self._lock:
            while self._backlog:
                data = self._backlog[0]
                try:
                    done = os.write(self.fd, data)
                except BlockingIOError:
                    return True
                except BrokenPipeError:
                    self._broken = True
                    self._backlog.clear()
                    return False
                if done < len(data):
                    self._backlog[0] = data[done:]
                    return True
                self._backlog.popleft()
            return False

    async def close(self, timeout: float) -> None:
        """Give the backlog up to ``timeout`` seconds to be written (a reader that stopped
        reading gets no more), then put the descriptor back in blocking mode."""
        with anyio.move_on_after(timeout, shield=True):
            while (flusher := self._flusher) is not None:
                await asyncio.wait([flusher])
        if self._flusher is not None:
            self._flusher.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(self._flusher, return_exceptions=True)
        with self._lock:
            self._broken = True
            self._backlog.clear()
        if self._pollable:
            os.set_blocking(self.fd, True)


class _Stream:
    """What both streams share: closing, and use as an async context manager."""

    _closed = False

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _End:
    """Held for the SDK after the last line: the end of the input."""


class MessageReader(_Stream, Generic[M]):
    """The receiving stream of ``Server.run``: each line of ``lines`` made a message
    by ``parse`` (the SDK's stdio transport's parse, given by the MCP layer), with no
    reading task and no stream in between.  A line ``parse`` refuses goes to
    ``unreadable`` (which may answer it) and is skipped.

    A line too long to be kept (:class:`LineTooLong`) goes to ``unreadable`` alike.

    ``take`` sees each message first: when it returns True it has taken the message
    on (it answers it itself) and the SDK never sees it.  At the end of the lines,
    ``drain`` is awaited before the end is reported: what was read gets answered
    before the SDK, seeing its input end, cancels whatever is still in flight.

    On a pipe, socket or terminal the descriptor stays registered with the event
    loop while nothing waits for the SDK: each time it is readable the loop reads
    it and hands the lines to ``take`` at once, in that one callback (no task
    woken, no registration made and removed per line).  A message for the SDK is
    held until the SDK receives it, and meanwhile nothing more is read (the SDK
    reads at its pace, as from its own transport).  A regular file or ``/dev/null``
    never blocks: it is read in a thread when the SDK asks for a message."""

    def __init__(self, lines: StdinLines, parse: Callable[[str], M],
                 unreadable: Callable[[Exception], Awaitable[None]], *,
                 take: Callable[[M], bool] = lambda _message: False,
                 drain: Callable[[], Awaitable[None]] | None = None) -> None:
        self._lines = lines
        self._parse = parse
        self._unreadable = unreadable
        self._take = take
        self._drain = drain
        self._held: collections.deque[M | Exception | _End] = collections.deque()   # for the SDK, in order
        self._failed: BaseException | None = None       # raised by ``take`` in the loop's callback
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watching = False

    async def receive(self) -> M:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._failed is not None:
                raise self._failed
            if not self._held:
                await self._wait()
                continue
            item = self._held[0]
            if isinstance(item, _End):
                if self._drain is not None:
                    await self._drain()
                raise anyio.EndOfStream
            self._held.popleft()
            self._pump()
            if not isinstance(item, Exception):
                return item
            await self._unreadable(item)

    async def _wait(self) -> None:
        """Until something is held for the SDK."""
        if not self._lines.pollable:
            self._pump()
            if not self._held:
                await anyio.to_thread.run_sync(self._lines.read)
                self._pump()
            return
        self._loop = self._loop or asyncio.get_running_loop()
        self._pump()
        if self._held or self._failed is not None:
            return
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _pump(self) -> None:
        """Take the lines read until one is for the SDK; then watch the descriptor
        while nothing is held, and wake the SDK's receive when something is."""
        while not self._held and (line := self._lines.line()) is not None:
            if isinstance(line, LineTooLong):
                self._held.append(line)
                break
            try:
                message = self._parse(line)
            except Exception as exc:
                self._held.append(exc)
                break
            if not self._take(message):
                self._held.append(message)
        if not self._held and self._lines.eof:
            self._held.append(_End())
        self._watch(not self._held and not self._closed)
        if self._held and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _readable(self) -> None:
        """The loop's callback: the descriptor is readable."""
        try:
            self._lines.read()
            self._pump()
        except BaseException as exc:            # to the SDK's receive, not the loop's error log
            self._failed = exc
            self._watch(False)
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(None)

    def _watch(self, on: bool) -> None:
        if on == self._watching or not self._lines.pollable or self._loop is None:
            return
        if on:
            self._loop.add_reader(self._lines.fd, self._readable)
        else:
            self._loop.remove_reader(self._lines.fd)
        self._watching = on

    async def aclose(self) -> None:
        self._closed = True
        self._watch(False)

    def __aiter__(self) -> MessageReader[M]:
        return self

    async def __anext__(self) -> M:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class MessageWriter(_Stream, Generic[M]):
    """The sending stream of ``Server.run``: each message made a line by ``serialize``
    (the SDK's stdio transport's serialization, given by the MCP layer) and written
    at once by the task that sends it (no writing task and no stream in between);
    :class:`StdoutLines` keeps the lines of concurrent senders whole and in order.
    ``sent`` sees each message before it is written (the MCP layer learns from
    it which requests the SDK has answered)."""

    def __init__(self, out: StdoutLines, serialize: Callable[[M], str], *,
                 sent: Callable[[M], None] = lambda _message: None) -> None:
        self._out = out
        self._serialize = serialize
        self._sent = sent

    async def send(self, item: M, /) -> None:
        self._sent(item)
        if self._closed:
            raise anyio.ClosedResourceError
        await self._out.write((self._serialize(item) + "\n").encode("utf-8"))


def _write_all(fd: int, data: bytes) -> int:
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.write(fd, view[done:])
    return done


@contextlib.contextmanager
def claimed_stdio() -> Iterator[tuple[int, int]]:
    """Private descriptors of stdin and stdout; meanwhile fd 0 reads ``/dev/null``
    and fd 1 writes to stderr (as the SDK does), so nothing else in the process
    can read the protocol's lines or write into them."""
    with _claimed(0, lambda: os.open(os.devnull, os.O_RDONLY)) as stdin, _claimed(1, lambda: os.dup(2)) as stdout:
        yield stdin, stdout


@contextlib.contextmanager
def _claimed(fd: int, open_diversion: Callable[[], int]) -> Iterator[int]:
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    diversion = open_diversion()
    try:
        os.dup2(diversion, fd)
    finally:
        os.close(diversion)
    try:
        yield private
    finally:
        os.dup2(private, fd)
        os.close(private)


async def until_signal(main: Callable[[], Awaitable[None]]) -> str | None:
    """Run ``main`` until it returns or SIGINT/SIGTERM arrives (then cancel it and
    let its cleanup run); the name of the signal that stopped it, if one did."""
    stopped: str | None = None
    async with anyio.create_task_group() as tg:
        async def watch() -> None:
            nonlocal stopped
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    stopped = signal.Signals(signum).name
                    log.info("%s received: stopping (a write in progress finishes first)", stopped)
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(watch)
        await main()
        tg.cancel_scope.cancel()
    return stopped
