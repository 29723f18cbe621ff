"""``convmem health`` (the health report as JSON, for scripts and monitors) and
``convmem status`` (the same for a person: path, counts, sizes, last error,
what to do)."""

from __future__ import annotations

import argparse
import os
import sys

from eventstore.errors import BusyError, ConvMemError, CorruptStoreError, StoreIOError

from .. import maintenance
from ._common import check_existing, open_existing, store_path
from ._out import Out, size


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "print the store's health report as JSON; exit 1 when DEGRADED or unverified"
    p = sub.add_parser("health", parents=[common], help=text, description=text)
    p.set_defaults(run=run_health)
    text = "the store's health for a person: path, counts, sizes, last error, what to do"
    p = sub.add_parser("status", parents=[common], help=text, description=text)
    p.add_argument("--json", action="store_true", help="the health report as JSON (what `health` prints)")
    p.set_defaults(run=run_status)


def _exposed(store: str) -> bool:
    """True when the store directory or a file in it is open to group or others."""
    paths = [store] + [os.path.join(store, n) for n in os.listdir(store)]
    return any(os.stat(p).st_mode & 0o077 for p in paths)


def report(path: str) -> dict:
    """The health report of the store at ``path``, with ``store`` naming it."""
    check_existing(path)
    if _exposed(path):
        print(f"convmem: warning: {path} is readable by other users; run chmod -R go-rwx on it", file=sys.stderr)
    service = open_existing(path)
    try:
        return {"store": path, **service.health()}
    finally:
        service.close()


def healthy(rep: dict) -> bool:
    return rep["status"] == "OK" and rep["snapshot_valid"]


def run_health(args: argparse.Namespace) -> int:
    rep = report(store_path(args))
    Out().json(rep)
    return 0 if healthy(rep) else 1


def run_status(args: argparse.Namespace) -> int:
    path = store_path(args)
    out = Out()
    if args.json:
        rep = report(path)
        out.json(rep)
        return 0 if healthy(rep) else 1
    try:
        rep = report(path)
    except ConvMemError as exc:                  # the store cannot be opened or read: say so, and what to do
        maintenance.report("convmem", exc)
        _show(out, [("store", path), ("status", f"cannot be read ({exc.code})"),
                    ("last error", f"{exc.code}: {exc.message}")], _refused(exc))
        return 2
    est = rep["memory_estimate"]
    rows = [("store", rep["store"]),
            ("status", rep["status"] + ("" if rep["snapshot_valid"] else " (read models behind the log)")),
            ("messages", f"{rep['active_messages']} live in {rep['session_count']} sessions; "
                         f"{rep['deleted_messages']} deleted, {rep['update_records']} updates"),
            ("events", str(rep["last_sequence"])),
            ("sizes", f"log {size(rep['log_size'])}, read models {size(rep['snapshot_size'])}, "
                      f"search index {size(est['search_index_bytes'])}, dead {size(rep['dead_bytes'])}"),
            ("last error", rep["last_error"] or "none")]
    _show(out, rows, _advice(rep))
    return 0 if healthy(rep) else 1


def _show(out: Out, rows: list[tuple[str, str]], advice: list[str]) -> None:
    out.table(("", ""), rows, title="convmem status", wide=1)
    for line in advice:
        out.line(line, style="bold", prose=True)


def _advice(rep: dict) -> list[str]:
    out = []
    if rep["last_error"]:
        out.append("Fix the cause of the last error (disk space, permissions), then write again.")
    if not rep["snapshot_valid"]:
        out.append("Run `convmem replay` to rebuild the read models from the log.")
    if rep["dead_bytes"] > max(rep["log_size"] // 2, 1 << 20):
        out.append("Much of the log is deleted or overwritten text: `rebuild_index` (compaction) reclaims it.")
    return out or ["Nothing to do."]


def _refused(exc: ConvMemError) -> list[str]:
    """What to do when the store cannot be opened or read at all."""
    if isinstance(exc, CorruptStoreError):
        return ["The store is damaged. Stop every server on it and run `convmem replay`: it rebuilds the "
                "read models from the event log and changes nothing in the log.",
                "If replay fails too, the log itself is damaged (or was written by a newer convmem): restore "
                "the latest backup, moving this store aside and copying the backup to its path "
                "(docs/cli.md, Restore)."]
    if isinstance(exc, StoreIOError):
        return ["Check that you can read and write the store directory and its files (`ls -l` on it) and "
                "that its disk is not full, then run `convmem status` again."]
    if isinstance(exc, BusyError):
        return ["Another process holds the store: run `convmem status` again when it is done."]
    return ["Run `convmem status --log-level DEBUG` and report the error with its output."]
