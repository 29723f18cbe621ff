"""``convmem export [--out FILE]``: every live message as JSONL (:mod:`server.archive`)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import IO

from eventstore import files

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
    with contextlib.ExitStack() as stack:
        try:
            fh = stack.enter_context(files.private_replacement(path, tmp))
        except OSError as exc:
            raise CommandError(f"cannot write {tmp}: {exc.strerror}") from None
        yield fh


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
