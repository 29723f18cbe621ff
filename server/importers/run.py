"""One import run: a source's turns through the bulk writer into a store."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from types import ModuleType

from eventstore.committer import Submits
from eventstore.store import EventStore
from projections.registry import Projector

from ..principals import importer
from . import chatgpt, claude_ai, claude_code, codex, memory_jsonl, reader
from .options import Options
from .reading import expand
from .target import opened
from .turns import Report, counted
from .writer import Writer

SOURCES: dict[str, ModuleType] = {m.NAME: m for m in (claude_code, codex, chatgpt, claude_ai, memory_jsonl)}


def run_import(store_path: str, source: str, paths: list[str], options: Options | None = None, *,
               store: EventStore | None = None, committer: Submits | None = None) -> dict:
    """Import ``paths`` (none: the source's default locations) of ``source``
    into the store at ``store_path`` (opened here: written in its own
    transactions, or through the node's stream when it is a replicated node's,
    see :mod:`.target`) or the open ``store``; returns the summary (counts,
    and each skipped line as ``file:line: why``).  The paths are expanded to
    files once, here (:func:`files`); when none is found the summary says so
    and no store is opened (none is created).
    ``committer``: what the open ``store``'s writes go through — a served
    store's service (:meth:`server.service.MemoryService.submit`), so that the
    batches take the same path as the tools' writes (a replicated node's reach
    the stream); None: the store's own transactions."""
    options = options or Options()
    module = SOURCES.get(source)
    if module is None:
        raise ValueError(f"source: must be one of {', '.join(SOURCES)}")
    report = Report(source, dry_run=options.dry_run)
    found = files(source, paths)
    if not found:
        return report.summary()
    scratch = None
    if store is None and options.dry_run and not os.path.exists(store_path):
        scratch = tempfile.mkdtemp(prefix="convmem-dry-run-")     # a dry run creates no store
        store_path = os.path.join(scratch, "store")
    try:
        with nullcontext((store, committer)) if store is not None else opened(store_path, options) as (target, via):
            writer = Writer(target, report, batch=options.batch, bulk=options.bulk, dry_run=options.dry_run,
                            progress=_progress(options), principal=importer(source).name, committer=via)
            projector = target.projector
            with projector.bulk_run() if isinstance(projector, Projector) else nullcontext():
                writer.write(reader.items(module, found, report, options))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if _progress(options) is not None:
        sys.stderr.write("\n")
    return report.summary()


def has_default(source: str) -> bool:
    """Whether ``source`` has a default place to read when no path is given
    (a data export has none; ``$MEMORY_FILE_PATH`` only when it is set)."""
    return any("$" not in os.path.expandvars(d) for d in SOURCES[source].DEFAULTS)


def files(source: str, paths: list[str]) -> list[str]:
    """The files an import of ``paths`` (none: the default places) would read."""
    module = SOURCES[source]
    return expand(paths, module.DEFAULTS, module.PATTERN)


def _progress(options: Options) -> Callable[[Report], None] | None:
    show = sys.stderr.isatty() if options.progress is None else options.progress
    if not show:
        return None
    start = time.perf_counter()

    def line(report: Report) -> None:
        rate = report.turns / max(time.perf_counter() - start, 1e-9)
        sys.stderr.write(f"\rimport {report.source}: {counted(report.files, 'file')}, "
                         f"{counted(report.turns, 'turn')} read, "
                         f"{report.written} written, {report.present} already there ({rate:,.0f}/s)")
        sys.stderr.flush()
    return line
