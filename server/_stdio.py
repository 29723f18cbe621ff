"""The stdio transport, and stopping the server on a signal.

The messages are the SDK's stdio transport's, byte for byte: one JSON-RPC
message per line, parsed and serialized by the same SDK calls (which
:mod:`server.app` passes in: nothing here imports ``mcp``).  What
differs is where the work happens, because on this path it was most of a
write's CPU:

* the SDK reads stdin in a worker thread that cannot be cancelled (on a
  terminal, SIGINT cancelled the server but the process then waited for the next
  line).  :class:`StdinLines` waits for input in the event loop
  (``wait_readable`` on a pipe, socket or terminal), so cancelling it is
  immediate; a regular file or ``/dev/null`` never blocks and is read in a thread;
* the SDK writes each response with two calls into a worker thread (write, then
  flush).  :class:`StdoutLines` writes from the event loop: on a pipe or socket
  the descriptor is non-blocking and a full pipe is waited for
  (``wait_writable``), so a client slow to read never blocks the loop; anything
  else (a terminal, a file) is written in a thread as the SDK does;
* the SDK puts a task and a memory stream on each side (a reader task parsing
  lines into a stream, a writer task draining one).  :class:`MessageReader` and
  :class:`MessageWriter` are the streams ``Server.run`` takes, doing that work
  in the task that receives or sends: two task switches fewer per request;
* the reader may hand a message to a ``take`` hook instead of the SDK (the MCP
  layer's fast path for ``tools/call``, which answers through
  :meth:`MessageWriter.send_line`), and at the end of stdin it awaits a
  ``drain`` hook before the SDK sees the end: the SDK cancels what is still
  in flight when its input ends, so calls already read would go unanswered.

:func:`until_signal` runs the server until SIGINT or SIGTERM, then cancels
it: the lifespan's ``finally`` closes the store after the write in progress
(nothing acknowledged is lost: a write is acknowledged only after its commit).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import stat
from collections.abc import Awaitable, Callable, Iterator
from typing import Generic, Self, TypeVar

import anyio

log = logging.getLogger("convmem")
_READ = 1 << 16
M = TypeVar("M")                    # a message of the protocol (the MCP layer's SessionMessage)


class StdinLines:
    """The lines of file descriptor ``fd`` (UTF-8, undecodable bytes replaced, as
    the SDK reads them)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        self._pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
        self._buf = bytearray()
        self._scanned = 0
        self._eof = False

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while (end := self._buf.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self._buf)
            if self._eof:
                if not self._buf:
                    raise StopAsyncIteration
                end = len(self._buf) - 1
                break
            await self._fill()
        line = bytes(self._buf[:end + 1])
        del self._buf[:end + 1]
        self._scanned = 0
        return line.decode("utf-8", "replace")

    async def _fill(self) -> None:
        if self._pollable:
            await anyio.wait_readable(self.fd)
            data = os.read(self.fd, _READ)
        else:
            data = await anyio.to_thread.run_sync(os.read, self.fd, _READ)
        self._eof = not data
        self._buf += data


class StdoutLines:
    """Writes the protocol's lines to file descriptor ``fd`` (UTF-8, as the SDK
    writes them); :meth:`close` puts the descriptor back in blocking mode."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        self._pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        if self._pollable:
            os.set_blocking(fd, False)

    async def write(self, data: bytes) -> None:
        """Write ``data`` whole; ``anyio.BrokenResourceError`` once the reader is gone
        (what the SDK's dispatcher expects of a stream nobody receives from: it drops
        the answer and goes on until stdin ends)."""
        try:
            if not self._pollable:
                await anyio.to_thread.run_sync(_write_all, self.fd, data)
                return
            view, done = memoryview(data), 0
            while done < len(data):
                try:
                    done += os.write(self.fd, view[done:])
                except BlockingIOError:
                    await anyio.wait_writable(self.fd)
        except BrokenPipeError as exc:
            raise anyio.BrokenResourceError from exc

    def close(self) -> None:
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


class MessageReader(_Stream, Generic[M]):
    """The receiving stream of ``Server.run``: each line of ``lines`` made a message
    by ``parse`` (the SDK's stdio transport's parse, given by the MCP layer), in
    the task that receives it (no reading task and no stream in between).  A line
    ``parse`` refuses goes to ``unreadable`` (which may answer it) and is skipped.

    ``take`` sees each message first: when it returns True it has taken the message
    on (it answers it itself) and the SDK never sees it.  At the end of the lines,
    ``drain`` is awaited before the end is reported: what was read gets answered
    before the SDK, seeing its input end, cancels whatever is still in flight."""

    def __init__(self, lines: StdinLines, parse: Callable[[str], M],
                 unreadable: Callable[[Exception], Awaitable[None]], *,
                 take: Callable[[M], bool] = lambda _message: False,
                 drain: Callable[[], Awaitable[None]] | None = None) -> None:
        self._lines = lines
        self._parse = parse
        self._unreadable = unreadable
        self._take = take
        self._drain = drain

    async def receive(self) -> M:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                line = await self._lines.__anext__()
            except StopAsyncIteration:
                if self._drain is not None:
                    await self._drain()
                raise anyio.EndOfStream from None
            try:
                message = self._parse(line)
            except Exception as exc:
                await self._unreadable(exc)
                continue
            if not self._take(message):
                return message

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
    one message at a time, so the lines of concurrent senders never interleave.
    ``sent`` sees each message before it is written (the MCP layer learns from
    it which requests the SDK has answered)."""

    def __init__(self, out: StdoutLines, serialize: Callable[[M], str], *,
                 sent: Callable[[M], None] = lambda _message: None) -> None:
        self._out = out
        self._serialize = serialize
        self._sent = sent
        self._lock = anyio.Lock(fast_acquire=True)

    async def send(self, item: M, /) -> None:
        self._sent(item)
        if self._closed:
            raise anyio.ClosedResourceError
        await self.send_line((self._serialize(item) + "\n").encode("utf-8"))

    async def send_line(self, line: bytes) -> None:
        """Write one line already serialized (ending in a newline), between the lines
        of other senders.  Open to the fast path after the SDK has closed this stream:
        the descriptor stays open until the server has ended."""
        async with self._lock:
            await self._out.write(line)


def _write_all(fd: int, data: bytes) -> None:
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.write(fd, view[done:])


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
