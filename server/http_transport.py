"""``convmem serve --http``: the same server over MCP's streamable HTTP transport.

Built on the SDK's own plumbing — :meth:`Server.streamable_http_app` (its
session manager, in stateless mode, answering with plain JSON rather than
server-sent events, so a result of several MiB reaches a client whose SSE
events are capped at 1 MiB), its bearer-token hooks and its DNS-rebinding
protection — served by uvicorn through its public configuration.  What is ours:

* :class:`HttpSettings`, the one frozen settings object (flags and ``CONVMEM_*``);
* the refusal to bind a non-loopback address without ``allow_remote`` (and a
  warning when such a bind has no TLS);
* the connections' rules (:mod:`server._connections`): a request must arrive
  whole, headers and body, within ``read_timeout`` of its connection's opening
  or previous response, and at most ``max_unproven`` connections may be open
  without having shown the token (one more evicts the oldest);
* :class:`RequestErrors`: the SDK's answer to a body that is JSON but not a
  JSON-RPC message (``-32602`` and pydantic's report, which repeats the body)
  becomes ``-32600`` with a short message that repeats nothing.

The token never appears in a log line (uvicorn's access log, which would
print a query string, is off).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from pydantic import AnyHttpUrl

from eventstore.errors import ConvMemError, ValidationError

from ._connections import Connections, Deadlines
from .app import AppState, build_server
from .bearer import BearerVerifier
from .tokens import TokenFile, default_path

log = logging.getLogger("convmem")

PATH = "/mcp"
DEFAULT_PORT = 8765
# A maximal valid call: 1 MiB of content written as \u00XX escapes is ~6 MiB, plus
# metadata_json; 16 MiB holds it.  A larger body is refused with 413 (by its
# Content-Length before any of it is read, else as soon as the cap is passed).
MAX_BODY = 16 << 20
READ_TIMEOUT = 30.0              # seconds for a request to arrive whole, headers and body
KEEP_ALIVE = 5                   # seconds an idle keep-alive connection stays open
MAX_CONNECTIONS = 1000           # connections with the token; beyond: 503
MAX_UNPROVEN = 128               # connections that have not shown the token; one more evicts the oldest
MAX_HEADER = 16 << 10            # bytes of request line and headers (h11's default); beyond: 400
BACKLOG = 2048                   # connections the kernel queues before the server accepts them


@dataclass(frozen=True)
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = field(default=None, repr=False)      # None: no authentication (tests only)
    allow_remote: bool = False
    certfile: str | None = None
    keyfile: str | None = None
    allowed_hosts: tuple[str, ...] = ()           # extra Host header values (name or name:port)
    allowed_origins: tuple[str, ...] = ()         # extra Origin values (scheme://host[:port])
    read_timeout: float = READ_TIMEOUT
    max_body: int = MAX_BODY
    max_unproven: int = MAX_UNPROVEN

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def tls(self) -> bool:
        return self.certfile is not None

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{port or self.port}{PATH}"


def parse_bind(value: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPV6]:PORT`` → (host, port); host defaults to 127.0.0.1."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValidationError("--http: the port must be a number from 0 to 65535 ([HOST:]PORT)")
    if not host or (":" in host and not _is_ip(host)):
        raise ValidationError("--http: the host must be a name or an address ([HOST:]PORT, [IPV6]:PORT)")
    return host, int(port)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(settings: HttpSettings) -> None:
    """Refuse a non-loopback bind without ``allow_remote``; warn when it has no TLS."""
    if settings.loopback:
        return
    if not settings.allow_remote:
        raise ValidationError(f"--http: {settings.host} is not a loopback address; pass --allow-remote to "
                              "serve other machines (with --certfile/--keyfile, or behind a TLS proxy)")
    if not settings.tls:
        log.warning("serving %s without TLS: the bearer token and every message cross the network in "
                    "clear text; use --certfile/--keyfile or a TLS reverse proxy (docs/http.md)", settings.host)


def security(settings: HttpSettings) -> TransportSecuritySettings:
    """DNS-rebinding protection: the Host and Origin headers a request may carry."""
    scheme = "https" if settings.tls else "http"
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    origins = [f"{s}://{h}" for s in ("http", "https") for h in hosts]
    if not settings.loopback and settings.host not in ("0.0.0.0", "::"):
        bound = f"[{settings.host}]" if ":" in settings.host else settings.host
        hosts.append(f"{bound}:*")
        origins.append(f"{scheme}://{bound}:*")
    hosts += settings.allowed_hosts
    origins += settings.allowed_origins
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def bearer(store_path: str, settings: HttpSettings) -> BearerVerifier | None:
    """The one bearer check of a server (None: no authentication): the settings'
    token and the named tokens of the store's tokens file."""
    if settings.token is None:
        return None
    return BearerVerifier(settings.token, TokenFile(default_path(store_path)))


def build_app(store_path: str, settings: HttpSettings, *, settle: bool = False,
              opened: Callable[[AppState], None] | None = None, check: BearerVerifier | None = None,
              **service_options):
    """The Starlette app: the SDK's streamable HTTP app around our server, and the
    browser pages under ``/ui/`` (:mod:`server.ui`) beside it.  ``opened``: told the
    lifespan's state as :func:`build_server` says; ``check``: the server's bearer
    check, shared with whatever else checks tokens (default: :func:`bearer`)."""
    from .ui import BrowserUI
    check = check if check is not None else bearer(store_path, settings)
    ui = BrowserUI(settings.token, check.tokens if check is not None else None,
                   TransportSecurityMiddleware(security(settings)).validate_request, tls=settings.tls)

    def on_open(state: AppState) -> None:
        ui.opened(state)
        if opened is not None:
            opened(state)
    server = build_server(store_path, settle=settle, opened=on_open, **service_options)
    auth: dict = {}
    if settings.token is not None:
        # AuthSettings wants an issuer; there is none (a static token), so it names this server.
        # No resource_server_url: no OAuth metadata routes, only the bearer check.
        auth = {"auth": AuthSettings(issuer_url=AnyHttpUrl(settings.url()), resource_server_url=None),
                "token_verifier": check}
    return server.streamable_http_app(streamable_http_path=PATH, json_response=True, stateless_http=True,
                                      max_request_body_size=settings.max_body,
                                      transport_security=security(settings), host=settings.host,
                                      custom_starlette_routes=ui.routes(), **auth)


INVALID_MESSAGE = {"jsonrpc": "2.0", "id": None,
                   "error": {"code": -32600, "message": "Invalid Request: the body must be one JSON-RPC message "
                             "object (a request, notification or response)"}}


class RequestErrors:
    """ASGI middleware: a body that is JSON but not a JSON-RPC message (an array, a
    number, an object without ``jsonrpc`` …) gets ``400`` with ``-32600`` and a fixed
    message.  The SDK answers it with ``-32602`` (invalid params) and pydantic's report,
    which repeats the body and links to pydantic's site.  Only a ``400`` answer is
    held and read; every other passes through untouched."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self._app = app

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        held: list[dict] = []

        async def answer(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] == 400:
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message.get("more_body", False):
                return
            start, body = held[0], b"".join(m.get("body", b"") for m in held[1:])
            held.clear()
            body = _plain(body)
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        await self._app(scope, receive, answer)


def _plain(body: bytes) -> bytes:
    """The body of a ``400``: the SDK's invalid-params error for the whole body made ``-32600``."""
    try:
        answer = json.loads(body)
    except ValueError:
        return body
    if (isinstance(answer, dict) and answer.get("id") is None and isinstance(error := answer.get("error"), dict)
            and error.get("code") == -32602):
        return json.dumps(INVALID_MESSAGE, separators=(",", ":")).encode()
    return body


class _QuietDisconnects(logging.Filter):
    """The SDK logs a client that went away before its request body was read (one
    that hung up, or was closed because its request was late) as an error
    with a traceback; it is neither: one INFO line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        from starlette.requests import ClientDisconnect
        if record.exc_info and isinstance(record.exc_info[1], ClientDisconnect):
            record.msg, record.args = "a client went away before its request was read", ()
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def bind(settings: HttpSettings) -> socket.socket:
    """The listening socket (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    infos = socket.getaddrinfo(settings.host, settings.port, family if _is_ip(settings.host) else 0,
                               socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted sockets only then; without it a
    # response's header and body writes meet the client's delayed ACK (+40 ms per request)
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


async def serve_http(store_path: str, settings: HttpSettings, *, ready: Callable[[int], None] | None = None,
                     **service_options) -> None:
    """Serve until stopped; ``ready`` is told the bound port once the server answers."""
    import uvicorn

    check_bind(settings)
    if logging.getLogger().level > logging.DEBUG:     # the SDK logs every stateless request at INFO
        logging.getLogger("mcp").setLevel(logging.WARNING)
    logging.getLogger("mcp.server.streamable_http").addFilter(_QuietDisconnects())
    sock = bind(settings)
    check = bearer(store_path, settings)
    connections = Connections(settings.read_timeout, settings.max_unproven,
                              check.verify_token if check is not None else None)
    # proxy_headers off: X-Forwarded-* from a client is not trusted (and is one middleware less per request)
    unopened: list[ConvMemError] = []

    def opened(state: AppState) -> None:         # no store, no server: stop before serving anything
        if state.open_error is not None:
            unopened.append(state.open_error)
            server.should_exit = True
    app = Deadlines(RequestErrors(build_app(store_path, settings, settle=True, opened=opened, check=check,
                                            **service_options)), connections)
    # http: uvicorn takes any factory of an asyncio.Protocol there (it calls it with its protocol's arguments)
    config = uvicorn.Config(app, http=connections.protocol, ws="none", lifespan="on",  # type: ignore[arg-type]
                            log_config=None, access_log=False, server_header=False, proxy_headers=False,
                            timeout_keep_alive=KEEP_ALIVE, limit_concurrency=MAX_CONNECTIONS + settings.max_unproven,
                            h11_max_incomplete_event_size=MAX_HEADER, backlog=BACKLOG,
                            ssl_certfile=settings.certfile, ssl_keyfile=settings.keyfile, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started and not server.should_exit:
            await asyncio.sleep(0.01)
        if server.started:          # whatever the log level: this is where to connect
            print(f"convmem: serving MCP over streamable HTTP at {settings.url(sock.getsockname()[1])} "
                  f"(authentication {'by bearer token' if settings.token else 'OFF'})", file=sys.stderr, flush=True)
            if ready is not None:
                ready(sock.getsockname()[1])
    announcer = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        announcer.cancel()
    if unopened:
        raise unopened[0]
