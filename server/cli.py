"""The ``convmem`` command: serve, health, replay.

    convmem serve  [--store PATH]           run the MCP server on stdio
    convmem serve  --http [HOST:]PORT [--token-file F] [--certfile C --keyfile K] [--allow-remote]
                                            the same over streamable HTTP (docs/http.md)
    convmem token  [--store PATH] [--token-file F]  print the HTTP bearer token (created on first use)
    convmem health [--store PATH]           print the health report (exit 1 if DEGRADED)
    convmem replay [--store PATH] [--verify]  rebuild the read models from the log

The store defaults to ``$CONVMEM_STORE``, else ``$XDG_DATA_HOME/convmem`` or
``~/.local/share/convmem``; it is created on first use.  Logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from eventstore.errors import ConvMemError

from .maintenance import report, run
from .service import MemoryService, default_store_path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="convmem", description="Tiny ConvMem: a durable conversation "
                                "memory server for LLM agents (MCP over stdio).")
    p.add_argument("--log-level", default=os.environ.get("CONVMEM_LOG_LEVEL", "INFO"),
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="stderr log level (default INFO)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    store_help = "store directory (default: $CONVMEM_STORE or ~/.local/share/convmem)"
    for name, help_text in (("serve", "run the MCP server over stdio"),
                            ("health", "print the store's health report as JSON; exit 1 when DEGRADED"),
                            ("replay", "drop every read model and rebuild it from the event log")):
        sp = sub.add_parser(name, help=help_text, description=help_text)
        sp.add_argument("--store", default=None, help=store_help)
        if name == "replay":
            sp.add_argument("--verify", action="store_true",
                            help="rebuild into a scratch copy and compare with the live read models; "
                                 "exit 1 on any difference")
        if name == "serve":
            _http_options(sp)
    tp = sub.add_parser("token", help="print the HTTP bearer token, creating it on first use",
                        description="print the HTTP bearer token, creating it on first use")
    tp.add_argument("--store", default=None, help=store_help)
    tp.add_argument("--token-file", default=None, help="read the token from this file instead")
    return p


def _http_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--http", metavar="[HOST:]PORT", default=None,
                    help="serve MCP over streamable HTTP instead of stdio (default host 127.0.0.1)")
    sp.add_argument("--token-file", default=None, help="bearer token file (default: $CONVMEM_TOKEN, "
                    "else STORE.http-token, created on first use)")
    sp.add_argument("--certfile", default=None, help="TLS certificate (PEM) for --http")
    sp.add_argument("--keyfile", default=None, help="TLS private key (PEM) for --http")
    sp.add_argument("--allow-remote", action="store_true",
                    help="allow --http to bind a non-loopback address")
    sp.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]",
                    help="another Host header to accept (the name clients use; repeatable)")
    sp.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                    help="another Origin to accept, e.g. https://example.org (repeatable)")
    sp.add_argument("--read-timeout", type=float, default=30.0, metavar="SECONDS",
                    help="close a connection that sends nothing for this long while a request is due (default 30)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s convmem %(levelname)s %(message)s")
    store = os.path.abspath(os.path.expanduser(args.store or default_store_path()))
    try:
        if args.command == "token":
            from .auth import resolve_token
            print(resolve_token(store, args.token_file))
            return 0
        if args.command == "serve" and args.http is not None:
            return _serve_http(store, args)
        if args.command == "serve":
            import anyio

            from .app import serve_stdio
            anyio.run(serve_stdio, store)
            return 0
        if args.command == "health":
            return _health(store)
        return run(store, verify=args.verify)
    except ConvMemError as exc:
        report("convmem", exc)
        return 2
    except KeyboardInterrupt:
        return 130


def _serve_http(store: str, args: argparse.Namespace) -> int:
    import asyncio

    from .auth import resolve_token
    from .http_transport import HttpSettings, parse_bind, serve_http
    host, port = parse_bind(args.http)
    if (args.certfile is None) != (args.keyfile is None):
        print("convmem: --certfile and --keyfile go together", file=sys.stderr)
        return 2
    settings = HttpSettings(host=host, port=port, token=resolve_token(store, args.token_file),
                            allow_remote=args.allow_remote, certfile=args.certfile, keyfile=args.keyfile,
                            allowed_hosts=tuple(args.allow_host), allowed_origins=tuple(args.allow_origin),
                            read_timeout=args.read_timeout)
    try:
        asyncio.run(serve_http(store, settings))
    except OSError as exc:
        print(f"convmem: cannot listen on {args.http}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def _exposed(store: str) -> bool:
    """True when the store directory or a file in it is open to group or others."""
    if not os.path.isdir(store):
        return False
    paths = [store] + [os.path.join(store, n) for n in os.listdir(store)]
    return any(os.stat(p).st_mode & 0o077 for p in paths)


def _health(store: str) -> int:
    if _exposed(store):
        warning = f"convmem: warning: {store} is readable by other users; run chmod -R go-rwx on it"
        print(warning, file=sys.stderr)
    service = MemoryService(store)
    try:
        report = service.health()
    finally:
        service.close()
    json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0 if report["status"] == "OK" and report["snapshot_valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
