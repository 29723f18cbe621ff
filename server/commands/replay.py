"""``convmem replay [--verify]``: rebuild (or check) the read models from the log."""

from __future__ import annotations

import argparse

from ..maintenance import run as replay
from ._common import check_existing, paused_collector, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "drop every read model and rebuild it from the event log"
    p = sub.add_parser("replay", parents=[common], help=text, description=text)
    p.add_argument("--verify", action="store_true",
                   help="rebuild into a scratch copy and compare with the live read models; "
                        "exit 1 on any difference")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = store_path(args)
    check_existing(path)
    with paused_collector():
        return replay(path, verify=args.verify)
