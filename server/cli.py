"""The ``convmem`` command.  Every subcommand lives in a module of
:mod:`server.commands` (listed in its registry); docs/cli.md documents each.

Global options (``--store``, ``--log-level``) are accepted before or after the
subcommand.  Exit codes: 0 success; 1 a check failed (health DEGRADED, replay
--verify found a difference, an import refused); 2 the command could not run
(no store, bad arguments, a storage error); 130 interrupted; 141 stdout closed
early (``convmem health | head -3``).  Logs and progress go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from eventstore.errors import ConvMemError

from .app import VERSION
from .commands import COMMANDS
from .commands._common import STORE_HELP, CommandError
from .maintenance import report

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="convmem", description="Tiny ConvMem: a durable conversation "
                                "memory server for LLM agents (MCP over stdio), and its tools.")
    p.add_argument("--version", action="version", version=f"convmem {VERSION}")
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.add_argument("--log-level", default=(os.environ.get("CONVMEM_LOG_LEVEL") or "INFO").upper(),
                   type=str.upper, choices=LEVELS, help="stderr log level (default INFO)")
    # the same options after the subcommand; SUPPRESS keeps the value given before it
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", default=argparse.SUPPRESS, help=STORE_HELP)
    common.add_argument("--log-level", default=argparse.SUPPRESS, type=str.upper, choices=LEVELS,
                        help="stderr log level (default INFO)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub, common)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.log_level not in LEVELS:        # from CONVMEM_LOG_LEVEL: argparse checks only what is typed
        p.error(f"CONVMEM_LOG_LEVEL: must be one of {', '.join(LEVELS)} (case does not matter)")
    if args.store == "":
        p.error("--store: must name a directory (leave it out for the default store)")
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s convmem %(levelname)s %(message)s")
    try:
        code = args.run(args)
        sys.stdout.flush()           # here, where a closed pipe is caught, not at the exit
        return code
    except CommandError as exc:
        print(f"convmem: {exc.message}", file=sys.stderr)
        return exc.code
    except ConvMemError as exc:
        report("convmem", exc)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """The reader of stdout went away: say nothing more (Python would complain
    again when it flushes stdout at exit) and exit as a pipe writer does."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


if __name__ == "__main__":
    sys.exit(main())
