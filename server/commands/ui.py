"""``convmem ui``: the browser pages on a loopback HTTP server, and their URL.

The same server as ``convmem serve --http 127.0.0.1:PORT`` (the MCP endpoint
included), always on loopback; it prints the pages' URL on stdout once it
answers and, with ``--open``, opens it in the default browser.  Sign in with
the token ``convmem token`` prints (docs/ui.md).
"""

from __future__ import annotations

import argparse

from ._common import CommandError, check_existing, paused_collector, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    text = ("serve the browser pages (browse, search, delete) on a loopback HTTP server and print their URL; "
            "Ctrl-C stops it")
    p = sub.add_parser("ui", parents=[common], help=text, description=text)
    p.add_argument("--port", type=int, default=0, help="loopback port to listen on (default: any free one)")
    p.add_argument("--open", action="store_true", help="open the URL in the default web browser")
    p.add_argument("--token-file", default=None, help="bearer token file (default: $CONVMEM_TOKEN, "
                   "else STORE.http-token, created on first use)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with paused_collector():            # until the server has frozen its start-up heap, as serve
        return _serve_pages(args)


def _serve_pages(args: argparse.Namespace) -> int:
    from ..http_transport import HttpSettings
    from .serve import run_http
    from .token import token
    path = store_path(args)
    check_existing(path)
    if not 0 <= args.port <= 65535:
        raise CommandError("--port: must be a number from 0 to 65535")
    settings = HttpSettings(host="127.0.0.1", port=args.port, token=token(path, args.token_file))

    def ready(port: int) -> None:
        url = f"http://127.0.0.1:{port}/ui/"
        print(url, flush=True)
        if args.open:
            import webbrowser
            webbrowser.open(url)
    return run_http(path, settings, f"127.0.0.1:{args.port}", ready=ready)
