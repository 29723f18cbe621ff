"""``convmem log [--principal NAME] [--session S] [--since TIME]``: who wrote what, from the event log.

A table on a terminal (tab-separated lines when piped), one JSON object a line
with ``--json`` (:mod:`server.provenance` says what an entry holds).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from .._terminal import json_visible
from ._common import CommandError, open_existing, store_path
from ._out import Out, local_time


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "show the event log: who wrote, updated or deleted which message, and when"
    p = sub.add_parser("log", parents=[common], help=text, description=text)
    p.add_argument("--principal", metavar="NAME", help="only what this principal did (local, default, a token's "
                   "name, import:SOURCE)")
    p.add_argument("--session", metavar="S", help="only messages of this session")
    p.add_argument("--since", metavar="TIME", help="from this time on: ISO 8601 (2026-01-31, 2026-01-31T09:00, "
                   "local time unless it has an offset) or milliseconds since the epoch")
    p.add_argument("--json", action="store_true", help="one JSON object a line instead of a table")
    p.set_defaults(run=run)


def parse_time(text: str) -> int:
    """Milliseconds since the epoch of ``--since``."""
    if text.isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError("--since: must be an ISO 8601 date or time, or milliseconds since the epoch") from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    from ..provenance import entries

    since = parse_time(args.since) if args.since is not None else None
    service = open_existing(store_path(args))
    try:
        found = entries(service, args.principal, args.session, since)
        if args.json:
            for entry in found:
                sys.stdout.write(json_visible(json.dumps(entry, ensure_ascii=False)) + "\n")
            return 0
        rows = [[str(e["sequence"]), local_time(e["at"]) if e["at"] is not None else "", e["principal"] or "",
                 e["event"], e["message_id"], e["session_id"] or "", ",".join(e["changed"])] for e in found]
        Out().table(["SEQ", "TIME", "PRINCIPAL", "EVENT", "MESSAGE", "SESSION", "CHANGED"], rows)
        return 0
    finally:
        service.close()
