"""``convmem export [--out FILE]``: every live message as JSONL (:mod:`server.archive`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import IO

from .. import transfer
from .._terminal import visible
from ..importers.turns import counted
from ..progress import progress
from ._common import CommandError, open_existing, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    text = "write every live message, with every field, as JSONL (a header line first)"
    p = sub.add_parser("export", parents=[common], help=text, description=text)
    p.add_argument("--out", metavar="FILE", help="write to FILE (created with mode 0600, replaced "
                                                 "only when complete) instead of stdout")
    p.set_defaults(run=run)


@contextlib.contextmanager
def _target(path: str | None) -> Iterator[IO[str]]:
    """stdout, or a private temporary file renamed to ``path`` once written and synced."""
    if path is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    tmp = f"{path}.partial"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise CommandError(f"cannot write {tmp}: {exc.strerror}") from None
    try:
        with open(fd, "w", encoding="utf-8", newline="\n") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def run(args: argparse.Namespace) -> int:
    path = store_path(args)
    service = open_existing(path)
    try:
        total = service.health()["active_messages"]        # for the bar only
        with _target(args.out) as out, progress("export", total) as step:
            count = transfer.export(service, out, step)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise CommandError(f"cannot write the export to {args.out or 'stdout'}: {exc.strerror}") from None
    finally:
        service.close()
    print(f"convmem: exported {counted(count, 'message')} from {visible(path)}"
          + (f" to {visible(args.out)}" if args.out else ""),
          file=sys.stderr)
    return 0
