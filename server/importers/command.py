"""``convmem import SOURCE`` for the transcript sources: the options and the
handler, kept thin (everything else is :func:`run_import`); registered by
:mod:`server.commands.imports`.

Exit codes: 0 all read was imported (or was already there), 1 some lines or
files were skipped (each named on stderr) or no file was found, 2 an error (no such source, the
store could not be opened or written).
"""

from __future__ import annotations

import argparse
import json
import sys

from .options import Options
from .run import run_import
from .writer import BATCH


def add_options(sp: argparse.ArgumentParser) -> None:
    """The options of ``convmem import SOURCE`` (the source is the subcommand)."""
    sp.add_argument("paths", nargs="*", metavar="PATH",
                    help="files, directories or globs (default for claude-code: ~/.claude/projects, "
                         "for codex: ~/.codex/sessions, for memory-jsonl: $MEMORY_FILE_PATH)")
    sp.add_argument("--dry-run", action="store_true", help="read and count; write nothing")
    sp.add_argument("--thinking", action="store_true", help="keep thinking/reasoning blocks (skipped by default)")
    sp.add_argument("--branches", action="store_true", help="chatgpt: also import regenerated side branches")
    sp.add_argument("--batch", type=int, default=BATCH, help=f"messages per transaction (default {BATCH})")
    sp.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace, store: str) -> int:
    """Handle a parsed ``convmem import``; ``ConvMemError`` is the caller's to report."""
    options = Options(thinking=args.thinking, branches=args.branches, dry_run=args.dry_run,
                      batch=max(1, args.batch))
    summary = run_import(store, args.source, args.paths, options)
    if args.json:
        json.dump(summary, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        verb = "would write" if summary["dry_run"] else "wrote"
        print(f"import {summary['source']} into {store}: {summary['files']} files, {summary['turns']} turns; "
              f"{verb} {summary['written']} messages, {summary['already_present']} already there, "
              f"{summary['updated']} updated, "
              f"{summary['ignored']} lines without a message, {summary['skipped']} skipped", file=sys.stderr)
    if not summary["files"] and not summary["skipped"]:
        where = ", ".join(args.paths) if args.paths else "the default places (see --help)"
        print(f"convmem import: no {args.source} files found in {where}", file=sys.stderr)
        return 1
    return 1 if summary["skipped"] else 0
