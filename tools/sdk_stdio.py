"""The same MCP server over the SDK's own stdio transport: the reference.

    python -m tools.sdk_stdio --store STORE

``build_server`` run under ``mcp.server.stdio.stdio_server``, with no fast path
and nothing of :mod:`server._stdio`.  The stdio contract tests
(tests/test_mcp_stdio_contract.py) compare every answer of ``convmem serve`` with
this server's, byte for byte, and ``python -m tools.bench_mcp --only-writes
--sdk-stdio`` measures it against ``convmem serve``.  Not a product command: the
SDK's transport leaves a line it cannot parse unanswered and cancels the calls
still in flight when stdin ends (``convmem serve`` answers both).
"""

from __future__ import annotations

import argparse
import gc

import anyio
from mcp.server.stdio import stdio_server

from server.app import build_server


async def serve(store: str) -> None:
    async with stdio_server() as (read_stream, write_stream):
        server = build_server(store, settle=True)
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.sdk_stdio", description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True, help="store directory (created if missing)")
    args = p.parse_args(argv)
    gc.disable()                # as ``convmem serve``: the server freezes its start-up heap, then collects
    anyio.run(serve, args.store)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
