"""The HTTP server's connections: a total deadline for each request, and a
budget for connections that have not shown the token.

uvicorn closes a keep-alive connection that stays silent (``timeout_keep_alive``)
and answers ``503`` past ``limit_concurrency`` connections, but it sets no
deadline on a request's arrival: a client that sends one header byte every few
seconds keeps its connection forever, and enough such clients take every slot
``limit_concurrency`` allows, so a client with the token gets ``503``.  Two
rules close that:

* **deadline** — from the moment a connection opens, or its last response is
  complete, the client has ``read_timeout`` seconds to deliver its next request
  whole, headers and body; past that the connection is aborted.  While the
  server works on a request (its body received, its response not yet sent) no
  deadline runs.  Silence alone is cut sooner by uvicorn's keep-alive timeout.
* **budget** — at most ``max_unproven`` connections that have not yet sent a
  request carrying a valid token are kept; one more evicts the oldest of
  them.  A connection is proven as soon as the headers of such a request have
  arrived, so connections without the token — however many, however slow —
  cannot take the capacity of those with it.

Both are built by composition on uvicorn's public configuration:
``Config(http=...)`` takes the factory of the connection's protocol, and
:class:`Connection` is an :class:`asyncio.Protocol` that holds the protocol
uvicorn would have used (its HTTP/1.1 protocol) and forwards every call to it;
the phases of a request come from :class:`Deadlines`, an ASGI middleware around
the app (the headers are complete when the app is called, the body when the app
receives its last part, the response when the app returns).  The two meet by the
client's address, which is both the transport's peer name and the scope's
``client``.  WebSocket upgrades are off (``ws="none"``): an upgrade would hand the
transport to another protocol, past :class:`Connection`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("convmem")

Peer = tuple[str, int]
LOG_EVERY = 1000                # closings logged: the first, then one in this many
Verify = Callable[[str], Awaitable[object | None]]       # a bearer token → something, or None when wrong


class Connections:
    """Every open connection of one server, by peer, and the unproven ones oldest first.

    ``verify``: the server's token check (None: no token, every request proves its
    connection)."""

    def __init__(self, read_timeout: float, max_unproven: int, verify: Verify | None) -> None:
        self.read_timeout = read_timeout
        self.max_unproven = max_unproven
        self.verify = verify
        self._by_peer: dict[Peer, Connection] = {}
        self._unproven: OrderedDict[Connection, None] = OrderedDict()   # oldest first
        self.evicted = 0                # connections closed to keep the budget
        self.late = 0                   # connections closed by the deadline

    def protocol(self, **uvicorn_arguments: Any) -> Connection:
        """The factory given to ``uvicorn.Config(http=...)``: uvicorn calls it with the
        arguments of its own protocol, which :class:`Connection` builds and wraps."""
        return Connection(self, H11Protocol(**uvicorn_arguments))

    def find(self, client: Any) -> Connection | None:
        """The connection behind an ASGI scope's ``client``."""
        if client is None:
            return None
        return self._by_peer.get((client[0], client[1]))

    def opened(self, connection: Connection) -> None:
        if connection.peer is not None:
            self._by_peer[connection.peer] = connection
        self._unproven[connection] = None
        if len(self._unproven) > self.max_unproven:
            oldest, _ = self._unproven.popitem(last=False)
            self.evicted += 1
            if self.evicted % LOG_EVERY == 1:
                log.info("closed %d connection(s) so far that had not shown the token, the oldest of more than %d",
                         self.evicted, self.max_unproven)
            oldest.abort()

    def proven(self, connection: Connection) -> None:
        self._unproven.pop(connection, None)

    def closed(self, connection: Connection) -> None:
        self._unproven.pop(connection, None)
        if connection.peer is not None and self._by_peer.get(connection.peer) is connection:
            del self._by_peer[connection.peer]


class Connection(asyncio.Protocol):
    """One connection: uvicorn's protocol for it, plus the deadline of its next request."""

    def __init__(self, connections: Connections, inner: asyncio.Protocol) -> None:
        self._connections = connections
        self._inner = inner
        self._transport: asyncio.BaseTransport | None = None
        self._loop = asyncio.get_running_loop()
        self._due: float | None = None           # when the request owed must have arrived; None: the server's turn
        self._timer: asyncio.TimerHandle | None = None
        self.peer: Peer | None = None
        self.is_proven = False
        self.requests = 0                        # requests begun on this connection

    # -- asyncio.Protocol, forwarded
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, (tuple, list)) and len(peer) >= 2:
            self.peer = (str(peer[0]), int(peer[1]))
        self._inner.connection_made(transport)
        self._owe_request()
        self._connections.opened(self)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._connections.closed(self)
        self._inner.connection_lost(exc)

    # -- the phases of a request (from :class:`Deadlines`)
    async def started(self, headers: list[tuple[bytes, bytes]]) -> int:
        """A request's headers are complete: it proves the connection if it carries the
        token.  Its number on the connection, for :meth:`answered`."""
        self.requests += 1
        if not self.is_proven:
            await self._prove(headers)
        return self.requests

    async def _prove(self, headers: list[tuple[bytes, bytes]]) -> None:
        verify = self._connections.verify
        if verify is not None:
            token = _bearer(headers)
            if token is None or await verify(token) is None:
                return
        self.is_proven = True
        self._connections.proven(self)

    def received(self) -> None:
        """The request's body is complete: the server's turn, no deadline."""
        self._due = None

    def answered(self, request: int) -> None:
        """Request number ``request`` is answered: unless a later one has begun (pipelined),
        the next request is owed."""
        if request == self.requests:
            self._owe_request()

    def abort(self) -> None:
        """Close at once, dropping what is unsent (the client owes us; we owe it nothing)."""
        transport = self._transport
        if isinstance(transport, asyncio.Transport) and not transport.is_closing():
            transport.abort()

    # -- the deadline
    def _owe_request(self) -> None:
        self._due = self._loop.time() + self._connections.read_timeout
        if self._timer is None:
            self._timer = self._loop.call_at(self._due, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._due is None or self._transport is None or self._transport.is_closing():
            return
        if self._loop.time() < self._due:
            self._timer = self._loop.call_at(self._due, self._check)
            return
        self._connections.late += 1
        if self._connections.late % LOG_EVERY == 1:
            log.info("closed %d connection(s) so far whose request did not arrive whole within %.1f s",
                     self._connections.late, self._connections.read_timeout)
        self.abort()


def _bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The token of an ``Authorization: Bearer`` header (the SDK's bearer check reads it alike)."""
    for name, value in headers:
        if name == b"authorization":
            text = value.decode("latin-1")
            return text[7:] if text[:7].lower() == "bearer " else None
    return None


class Deadlines:
    """ASGI middleware: tells each request's :class:`Connection` when its headers
    and body have arrived and when its response is sent."""

    def __init__(self, app: Callable[..., Awaitable[None]], connections: Connections) -> None:
        self._app = app
        self._connections = connections

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:
        connection = self._connections.find(scope.get("client")) if scope["type"] == "http" else None
        if connection is None:
            await self._app(scope, receive, send)
            return
        request = await connection.started(scope["headers"])

        async def received() -> dict:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                connection.received()
            return message
        try:
            await self._app(scope, received, send)
        finally:
            connection.answered(request)
