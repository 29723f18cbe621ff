"""Rebuild every read model from the event log.

    python -m tools.replay STORE            drop the projections and replay the log
    python -m tools.replay STORE --verify   replay into a scratch copy and compare it,
                                            sub-database by sub-database, byte for byte,
                                            with the live read models (exit 1 on a difference)

Progress goes to stderr.  The work is :mod:`server.maintenance` (``convmem
replay`` runs the same); this is its entry point for scripts and tests.
"""

from __future__ import annotations

import argparse
import os
import sys

from eventstore.errors import ConvMemError
from server.maintenance import differences, dump_projections, replay, report, run

__all__ = ["differences", "dump_projections", "main", "replay", "run"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.replay", description=(__doc__ or "").split("\n")[1])
    p.add_argument("store", help="store directory")
    p.add_argument("--verify", action="store_true",
                   help="replay into a scratch copy and compare byte for byte; exit 1 on a difference")
    args = p.parse_args(argv)
    try:
        return run(os.path.abspath(args.store), verify=args.verify)
    except ConvMemError as exc:
        report("replay", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
