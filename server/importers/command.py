"""``convmem import SOURCE`` for the transcript sources: the options and the
handler, kept thin (everything else is :func:`run_import`); registered by
:mod:`server.commands.imports`.

Exit codes: 0 all read was imported (or was already there), 1 some lines or
files were skipped (each named on stderr) or no file was found, 2 an error (no
path for a source with no default place, the store could not be opened or
written).
"""

from __future__ import annotations

import argparse
import json
import sys

from .._terminal import json_visible, visible
from ..hook import add_node_options
from .options import Options
from .run import SOURCES, run_import
from .turns import counted
from .writer import BATCH

_WHERE = {     # PATH's help, by source
    "claude-code": "files, directories or globs (default: ~/.claude/projects)",
    "codex": "files, directories or globs (default: ~/.codex/sessions)",
    "chatgpt": "the export's conversations.json, or the export zip (required: an export has no default place)",
    "claude-ai": "the export's conversations.json, or the export zip (required: an export has no default place)",
    "memory-jsonl": "memory.jsonl files, directories or globs (default: $MEMORY_FILE_PATH)",
}
_FLAGS = {     # the options that only some sources take
    "thinking": "keep thinking/reasoning blocks (skipped by default)",
    "branches": "also import regenerated side branches",
}


def add_options(sp: argparse.ArgumentParser, source: str) -> None:
    """The options of ``convmem import SOURCE`` (the source is the subcommand):
    the common ones, and those of :data:`_FLAGS` that the source's ``FLAGS`` lists."""
    sp.add_argument("paths", nargs="*", metavar="PATH", help=_WHERE[source])
    sp.add_argument("--dry-run", action="store_true", help="read and count; write nothing")
    for flag in SOURCES[source].FLAGS:
        sp.add_argument(f"--{flag}", action="store_true", help=_FLAGS[flag])
    sp.add_argument("--batch", type=int, default=BATCH, help=f"messages per transaction (default {BATCH})")
    sp.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_node_options(sp)


def run(args: argparse.Namespace, store: str) -> int:
    """Handle a parsed ``convmem import``; ``ConvMemError`` is the caller's to report.
    When no file is there to read, nothing is opened (no store is created)."""
    options = Options(thinking=getattr(args, "thinking", False), branches=getattr(args, "branches", False),
                      dry_run=args.dry_run, batch=max(1, args.batch), replicate=args.replicate, stream=args.stream)
    summary = run_import(store, args.source, args.paths, options)
    if args.json:
        sys.stdout.write(json_visible(json.dumps(summary, indent=2, ensure_ascii=False)))
        sys.stdout.write("\n")
    else:
        verb = "would write" if summary["dry_run"] else "wrote"
        print(f"import {summary['source']} into {visible(store)}: {counted(summary['files'], 'file')}, "
              f"{counted(summary['turns'], 'turn')}; {verb} {counted(summary['written'], 'message')}, "
              f"{summary['already_present']} already there, {summary['updated']} updated, "
              f"{counted(summary['ignored'], 'line')} without a message, {summary['skipped']} skipped",
              file=sys.stderr)
    if not summary["files"] and not summary["skipped"]:
        where = ", ".join(map(visible, args.paths)) if args.paths else "the default places (see --help)"
        print(f"convmem import: no {args.source} files found in {where}", file=sys.stderr)
        return 1
    return 1 if summary["skipped"] else 0
