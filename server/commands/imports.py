"""``convmem import SOURCE …``: bring messages into the store.

Sources are registered like commands: a ``register(sources, common)`` function
listed in :data:`SOURCES` adds the source's parser and sets its ``run``.  This
module brings ``jsonl`` (our own export) and the transcript sources of
:mod:`server.importers` (``claude-code``, ``codex``, ``chatgpt``, ``claude-ai``,
``memory-jsonl``).
"""

from __future__ import annotations

import argparse
import sys
from array import array
from collections.abc import Callable
from typing import Any

from .. import hook, transfer
from .._terminal import visible
from ..importers import command as importers_command
from ..importers import follow
from ..importers.follow import SOURCES as FOLLOWED
from ..importers.options import Options
from ..importers.run import SOURCES as TRANSCRIPT_SOURCES
from ..importers.run import has_default
from ..importers.target import committer_factory
from ..importers.turns import counted
from ..progress import progress
from ..service import MemoryService
from ._common import CommandError, check_usable, paused_collector, store_path


def register(sub, common: argparse.ArgumentParser) -> None:
    hook_parser(sub.add_parser("hook", parents=[common], help=hook.DESCRIPTION, description=hook.DESCRIPTION))
    text = "import messages from a file (sources: " + ", ".join(SOURCES) + ")"
    p = sub.add_parser("import", parents=[common], help=text, description=text)
    sources = p.add_subparsers(dest="source", required=True, metavar="SOURCE")
    for register_source in SOURCES.values():
        register_source(sources, common)


def _register_jsonl(sources, common: argparse.ArgumentParser) -> None:
    text = ("import a `convmem export` file exactly (ids, timestamps, revisions, metadata) into an "
            "empty store; re-running it adds only what is missing")
    p = sources.add_parser("jsonl", parents=[common], help=text, description=text)
    p.add_argument("file", metavar="FILE", help="the export file")
    p.add_argument("--dry-run", action="store_true", help="check the file and the store, write nothing")
    hook.add_node_options(p)
    p.set_defaults(run=run_jsonl)


def run_jsonl(args: argparse.Namespace) -> int:
    path = store_path(args)
    check_usable(path)
    try:
        fh = open(args.file, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {args.file}: {exc.strerror}") from None
    with fh, paused_collector():     # a replicated node's store: written through its stream (importers.target)
        node = Options(replicate=args.replicate, stream=args.stream)
        service = MemoryService(path) if args.dry_run else MemoryService(path, committer=committer_factory(node))
        seen: array[int] = array("q")       # each line's hash: the second read checks only what changed
        try:
            try:
                plan = transfer.check(service, transfer.read_file(fh, args.file, seen))
            except transfer.Refused as exc:
                print(f"convmem: import refused, nothing written: {exc}", file=sys.stderr)
                return 1
            if args.dry_run:
                print(f"convmem: would import {plan.missing} of {counted(plan.in_file, 'message')} "
                      f"into {visible(path)} ({plan.present} there already)", file=sys.stderr)
                return 0
            fh.seek(0)
            with progress("import", plan.in_file) as step:
                written = transfer.write(service, transfer.read_file(fh, args.file, known=seen), step)
        finally:
            service.close()
    print(f"convmem: imported {written} of {counted(plan.in_file, 'message')} into {visible(path)} "
          f"({plan.in_file - written} there already)", file=sys.stderr)
    return 0


def _register_transcripts(name: str) -> Callable[[Any, argparse.ArgumentParser], None]:
    """The ``register`` of one transcript source of :mod:`server.importers` (docs/import.md)."""
    def register_source(sources, common: argparse.ArgumentParser) -> None:
        text = f"import {name} transcripts into sessions (docs/import.md); re-running adds only what is new"
        p = sources.add_parser(name, parents=[common], help=text, description=text)
        importers_command.add_options(p, name)
        if name in FOLLOWED:
            p.add_argument("--follow", action="store_true",
                           help="keep running: import what is appended to the transcripts as it is written")
        p.set_defaults(run=_run_transcripts)
    return register_source


def _run_transcripts(args: argparse.Namespace) -> int:
    if not args.paths and not has_default(args.source):
        where = "$MEMORY_FILE_PATH is not set" if args.source == "memory-jsonl" else \
            "a data export has no default place"
        raise CommandError(f"import {args.source}: name the file to import ({where}); "
                           f"see convmem import {args.source} --help")
    path = store_path(args)
    check_usable(path)
    if getattr(args, "follow", False):
        return follow.command(args, path)           # runs on: the collector stays on
    with paused_collector():
        return importers_command.run(args, path)


def hook_parser(p: argparse.ArgumentParser) -> None:
    """``convmem hook``: the Claude Code hook (:mod:`server.hook`, also ``convmem-hook``)."""
    hook.parser(p)
    p.set_defaults(run=hook.run)


# source name → its ``register(sources, common)``
SOURCES: dict[str, Callable[[Any, argparse.ArgumentParser], None]] = {
    "jsonl": _register_jsonl,
    **{name: _register_transcripts(name) for name in TRANSCRIPT_SOURCES},
}
