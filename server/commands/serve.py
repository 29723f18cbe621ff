"""``convmem serve``: the MCP server on stdio (stdout carries MCP only), or
over streamable HTTP with ``--http`` (docs/http.md)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from eventstore.errors import ConvMemError
from eventstore.files import make_private_dir

from ..replication import DEFAULT_REPLICAS, DEFAULT_STREAM, Settings, committer_factory, parse_settings
from ._common import CommandError, check_usable, paused_collector, store_path

if TYPE_CHECKING:
    from ..http_transport import HttpSettings

FASTCALL_ENV = "CONVMEM_STDIO_FASTCALL"     # "0": every tools/call through the SDK's dispatch (app.FastCalls)


def register(sub, common: argparse.ArgumentParser) -> None:
    text = ("run the MCP server over stdio, or over streamable HTTP with --http; SIGINT (Ctrl-C) or "
            "SIGTERM stops it cleanly")
    p = sub.add_parser("serve", parents=[common], help=text, description=text)
    p.add_argument("--http", metavar="[HOST:]PORT", default=None,
                   help="serve MCP over streamable HTTP instead of stdio (default host 127.0.0.1)")
    p.add_argument("--token-file", default=None, help="bearer token file (default: $CONVMEM_TOKEN, "
                   "else STORE.http-token, created on first use)")
    p.add_argument("--certfile", default=None, help="TLS certificate (PEM) for --http")
    p.add_argument("--keyfile", default=None, help="TLS private key (PEM) for --http")
    p.add_argument("--allow-remote", action="store_true", help="allow --http to bind a non-loopback address")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]",
                   help="another Host header to accept (the name clients use; repeatable)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="another Origin to accept, e.g. https://example.org (repeatable)")
    p.add_argument("--read-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="close a connection whose request has not arrived whole (headers and body) this long "
                        "after the connection opened or its previous answer (default 30)")
    p.add_argument("--replicate", metavar="nats://HOST:PORT[,…]", default=None,
                   help="replicated mode: the event log lives on NATS JetStream at these servers "
                        "(needs the 'replication' extra; docs/replication.md)")
    p.add_argument("--stream", default=DEFAULT_STREAM, metavar="NAME",
                   help=f"with --replicate: the replicated store's name on the stream (default {DEFAULT_STREAM})")
    p.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS, metavar="N",
                   help=f"with --replicate: copies of the stream kept by the cluster (default {DEFAULT_REPLICAS})")
    p.add_argument("--sync-reads", action="store_true",
                   help="with --replicate: every read first waits until this node has applied what the "
                        "stream held when the read began (read-your-writes across nodes)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with paused_collector():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    path = store_path(args)
    check_usable(path)
    # the committer every write goes through: a node of the stream, or the store's own group commit
    options = {"committer": committer_factory(_replication(args))} if args.replicate is not None else {}
    if args.http is not None:
        return _serve_http(path, args, options)
    import anyio

    from ..app import serve_stdio

    if sys.stdin is None or sys.stdout is None:        # closed when the process started
        raise CommandError("stdin or stdout is closed: `convmem serve` reads MCP requests on stdin and "
                           "answers on stdout (an MCP host connects both)")
    _create(path)
    fast_calls = os.environ.get(FASTCALL_ENV, "1") != "0"
    try:
        anyio.run(lambda: serve_stdio(path, fast_calls=fast_calls, **options))
    except Exception as exc:
        raise _unopened(path, exc) from None
    return 0


def _unopened(path: str, exc: Exception) -> Exception:
    """What to raise for ``exc``, which ended the server: the store's error that kept it from
    opening (found inside the task groups' exception groups) as a :class:`CommandError`, else
    ``exc`` itself."""
    leaves: list[BaseException] = [exc]
    while leaves:
        leaf = leaves.pop(0)
        if isinstance(leaf, ConvMemError):
            return CommandError(f"cannot open the store at {path}: {leaf.code}: {leaf.message}")
        if isinstance(leaf, BaseExceptionGroup):
            leaves.extend(leaf.exceptions)
    return exc


def _create(path: str) -> None:
    """Create the store directory (as the store would on opening it) before serving, so a
    path that cannot hold a store stops ``serve`` at start instead of failing every call."""
    try:
        make_private_dir(path)
    except OSError as exc:
        raise CommandError(f"cannot create the store directory {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise CommandError(f"cannot use the store directory {path}: it is not readable and writable by this user")


def _replication(args: argparse.Namespace) -> Settings:
    """The replication settings from the flags; refused before anything starts when wrong."""
    from eventstore.errors import ValidationError
    try:
        settings = parse_settings(args.replicate, args.stream, args.replicas, args.sync_reads)
    except ValidationError as exc:
        raise CommandError(exc.message) from None
    if importlib.util.find_spec("nats") is None:              # the optional extra
        raise CommandError("--replicate needs the NATS client: pip install 'tiny-convmem[replication]'")
    return settings


def _serve_http(store: str, args: argparse.Namespace, options: dict) -> int:
    from ..http_transport import HttpSettings, parse_bind
    from .token import token
    host, port = parse_bind(args.http)
    if (args.certfile is None) != (args.keyfile is None):
        raise CommandError("--certfile and --keyfile go together")
    _create(store)
    settings = HttpSettings(host=host, port=port, token=token(store, args.token_file),
                            allow_remote=args.allow_remote, certfile=args.certfile, keyfile=args.keyfile,
                            allowed_hosts=tuple(args.allow_host), allowed_origins=tuple(args.allow_origin),
                            read_timeout=args.read_timeout)
    return run_http(store, settings, args.http, **options)


def run_http(store: str, settings: HttpSettings, where: str, *, ready: Callable[[int], None] | None = None,
             **options) -> int:
    """Serve ``store`` over HTTP until stopped (``convmem serve --http``, ``convmem ui``): a
    port that cannot be bound (``where``) or a store that cannot open is a :class:`CommandError`."""
    import asyncio

    from ..http_transport import serve_http
    try:
        asyncio.run(serve_http(store, settings, ready=ready, **options))
    except OSError as exc:
        raise CommandError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    except ConvMemError as exc:
        raise _unopened(store, exc) from None
    return 0
