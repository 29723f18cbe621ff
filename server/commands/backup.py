"""``convmem backup DEST``: a consistent, verified, private copy of a store
that servers may be writing to.

The copy is LMDB's own (``mdb_env_copy``: one read transaction, so one
committed state, whatever writers do meanwhile) or, with ``--compact``, the
same records read in one read transaction and appended to a fresh file (no
free pages: the size of what is live), written into a private
directory beside DEST, synced, verified — the copy opens as a store and its
read models equal a replay of its log (:func:`server.maintenance.differences`)
— and only then renamed to DEST.  DEST is a store directory: restore by
putting it in place of the store while no server runs (docs/cli.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from eventstore import files
from eventstore.store import DATA_FILE

from ..maintenance import differences
from ._common import CommandError, open_existing, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "copy the store to DEST (a new directory) while servers keep writing; verified before success"
    p = sub.add_parser("backup", parents=[common], help=text, description=text)
    p.add_argument("dest", metavar="DEST", help="the backup directory to create (must not exist)")
    p.add_argument("--compact", action="store_true",
                   help="a compacted copy: the same records without the file's free pages (smaller, slower)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = store_path(args)
    dest = os.path.abspath(os.path.expanduser(args.dest))
    if os.path.lexists(dest):
        raise CommandError(f"{dest} exists: give a new directory for the backup")
    parent = os.path.dirname(dest)
    if not os.path.isdir(parent):
        raise CommandError(f"{parent}: no such directory to put the backup in")
    service = open_existing(path)
    try:
        scratch = tempfile.mkdtemp(prefix=".convmem-backup-", dir=parent)
    except OSError as exc:
        service.close()
        raise CommandError(f"cannot write in {parent}: {exc.strerror}") from None
    try:
        try:
            service.store.copy_to(scratch, compact=args.compact)
        finally:
            service.close()
        _seal(scratch)
        diff = differences(scratch)
        if diff:
            print(f"convmem: backup FAILED verification (read models differ: {', '.join(diff)}); "
                  f"{dest} not written", file=sys.stderr)
            return 1
        os.rename(scratch, dest)
        files.fsync_path(parent)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    size = os.path.getsize(os.path.join(dest, DATA_FILE))
    print(f"convmem: backed up {path} to {dest} ({size} bytes{', compacted' if args.compact else ''}), "
          "verified: its read models equal a replay of its log", file=sys.stderr)
    return 0


def _seal(directory: str) -> None:
    """Owner-only modes and everything on disk before the verification reads it."""
    files.chmod_private(directory)
    files.fsync_path(os.path.join(directory, DATA_FILE))
    files.fsync_path(directory)
