"""The ``convmem`` command: serve, health, replay.

    convmem serve  [--store PATH]           run the MCP server on stdio
    convmem health [--store PATH]           print the health report (exit 1 if DEGRADED)
    convmem replay [--store PATH] [--verify]  rebuild the read models from the log
    convmem import SOURCE [PATH…] [--store PATH]  import transcripts (docs/import.md)

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

from .importers import command as import_command
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
    import_command.add_parser(sub, store_help)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s convmem %(levelname)s %(message)s")
    store = os.path.abspath(os.path.expanduser(args.store or default_store_path()))
    try:
        if args.command == "serve":
            import anyio

            from .app import serve_stdio
            anyio.run(serve_stdio, store)
            return 0
        if args.command == "health":
            return _health(store)
        if args.command == "import":
            return import_command.run(args, store)
        return run(store, verify=args.verify)
    except ConvMemError as exc:
        report("convmem", exc)
        return 2
    except KeyboardInterrupt:
        return 130


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
