"""``convmem serve --http``: the same server over MCP's streamable HTTP transport.

Built on the SDK's own plumbing — :meth:`Server.streamable_http_app` (its
session manager, in stateless mode, answering with plain JSON rather than
server-sent events, so a result of several MiB reaches a client whose SSE
events are capped at 1 MiB), its bearer-token hooks and its DNS-rebinding
protection — served by uvicorn.  What is ours:

* :class:`HttpSettings`, the one frozen settings object (flags and ``CONVMEM_*``);
* the refusal to bind a non-loopback address without ``allow_remote`` (and a
  warning when such a bind has no TLS);
* :class:`_StallGuard`, uvicorn's HTTP/1.1 protocol plus one timer: a
  connection on which the server waits for the client (headers, or the rest
  of a body) and nothing arrives for ``read_timeout`` seconds is closed.

The token never appears in a log line (uvicorn's access log, which would
print a query string, is off).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import h11
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from pydantic import AnyHttpUrl
from uvicorn.protocols.http.h11_impl import H11Protocol

from eventstore.errors import ValidationError

from .app import build_server
from .bearer import BearerVerifier
from .tokens import TokenFile, default_path

log = logging.getLogger("convmem")

PATH = "/mcp"
DEFAULT_PORT = 8765
# A maximal valid call: 1 MiB of content written as \u00XX escapes is ~6 MiB, plus
# metadata_json; 16 MiB holds it.  A larger body is refused with 413 (by its
# Content-Length before any of it is read, else as soon as the cap is passed).
MAX_BODY = 16 << 20
READ_TIMEOUT = 30.0              # seconds a connection may stall while the server waits for it
KEEP_ALIVE = 5                   # seconds an idle keep-alive connection stays open
MAX_CONNECTIONS = 1000           # beyond: 503


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


def build_app(store_path: str, settings: HttpSettings, *, settle: bool = False, **service_options):
    """The Starlette app: the SDK's streamable HTTP app around our server, and the
    browser pages under ``/ui/`` (:mod:`server.ui`) beside it."""
    from .ui import BrowserUI
    tokens = TokenFile(default_path(store_path))
    ui = BrowserUI(settings.token, tokens if settings.token is not None else None,
                   TransportSecurityMiddleware(security(settings)).validate_request, tls=settings.tls)
    server = build_server(store_path, settle=settle, opened=ui.opened, **service_options)
    auth: dict = {}
    if settings.token is not None:
        # AuthSettings wants an issuer; there is none (a static token), so it names this server.
        # No resource_server_url: no OAuth metadata routes, only the bearer check.
        auth = {"auth": AuthSettings(issuer_url=AnyHttpUrl(settings.url()), resource_server_url=None),
                "token_verifier": BearerVerifier(settings.token, tokens)}
    return server.streamable_http_app(streamable_http_path=PATH, json_response=True, stateless_http=True,
                                      max_request_body_size=settings.max_body,
                                      transport_security=security(settings), host=settings.host,
                                      custom_starlette_routes=ui.routes(), **auth)


class _StallGuard(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection that stalls while the server waits for it."""

    read_timeout = READ_TIMEOUT
    _watch: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._last = self.loop.time()
        self._watch = self.loop.call_later(self.read_timeout, self._check)

    def data_received(self, data: bytes) -> None:
        self._last = self.loop.time()
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        super().connection_lost(exc)

    def _check(self) -> None:
        self._watch = None
        if self.transport.is_closing():
            return
        waiting = self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.flow.read_paused
        quiet = self.loop.time() - self._last
        if waiting and quiet >= self.read_timeout:
            log.info("closed a connection that sent nothing for %.1f s", quiet)
            self.transport.close()
            return
        delay = self.read_timeout - quiet if waiting else self.read_timeout
        self._watch = self.loop.call_later(max(delay, 0.5), self._check)


class _QuietDisconnects(logging.Filter):
    """The SDK logs a client that went away before its request body was read (one
    that hung up, or stalled and was closed by :class:`_StallGuard`) as an error
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
    sock.listen(128)
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
    guard = type("StallGuard", (_StallGuard,), {"read_timeout": settings.read_timeout})
    # proxy_headers off: X-Forwarded-* from a client is not trusted (and is one middleware less per request)
    app = build_app(store_path, settings, settle=True, **service_options)
    config = uvicorn.Config(app, http=guard, lifespan="on", log_config=None,
                            access_log=False, server_header=False, proxy_headers=False, timeout_keep_alive=KEEP_ALIVE,
                            limit_concurrency=MAX_CONNECTIONS, ssl_certfile=settings.certfile,
                            ssl_keyfile=settings.keyfile, timeout_graceful_shutdown=5)
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
