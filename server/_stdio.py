"""Stopping the server on a signal, and a stdin that lets it stop at once.

The SDK's stdio transport reads stdin in a worker thread that cannot be
cancelled: on a terminal, SIGINT cancelled the server but the process then
waited for the next line (Ctrl-D).  :class:`StdinLines` waits for input in
the event loop instead (``wait_readable`` on a pipe, socket or terminal), so
cancelling it is immediate; a regular file or ``/dev/null`` never blocks and
is read in a thread.

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

import anyio

log = logging.getLogger("convmem")
_READ = 1 << 16


class StdinLines:
    """The lines of file descriptor ``fd`` (UTF-8, undecodable bytes replaced, as
    the SDK reads them), for ``stdio_server(stdin=…)``."""

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


@contextlib.contextmanager
def claimed_stdin() -> Iterator[int]:
    """A private descriptor of stdin; fd 0 reads ``/dev/null`` meanwhile (as the
    SDK does), so nothing else in the process can read the protocol's lines."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield private
    finally:
        os.dup2(private, 0)
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
