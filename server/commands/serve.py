"""``convmem serve``: the MCP server on stdio (stdout carries MCP only)."""

from __future__ import annotations

import argparse
import sys

from ._common import CommandError, check_usable, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "run the MCP server over stdio; SIGINT (Ctrl-C) or SIGTERM stops it cleanly"
    p = sub.add_parser("serve", parents=[common], help=text, description=text)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import anyio

    from ..app import serve_stdio

    path = store_path(args)
    check_usable(path)
    if sys.stdin is None or sys.stdout is None:        # closed when the process started
        raise CommandError("stdin or stdout is closed: `convmem serve` reads MCP requests on stdin and "
                           "answers on stdout (an MCP host connects both)")
    anyio.run(serve_stdio, path)
    return 0
