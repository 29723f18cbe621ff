"""Transcripts imported as they are written: ``convmem import claude-code
--follow`` (or ``codex``) and the Claude Code hook (:mod:`server.hook`).

:class:`Follower` reads each file from where it stopped (its
:mod:`.positions`), complete lines only — a half-written last line is read
once its newline is there — through the source's own reader, carried from
one part to the next, and the bulk writer; the new position is written in
the transaction that ends the part.  A file without a position is read from
its start, as a one-shot import reads it; one that was replaced, cut or
changed before its position is read again from its start (the import ids
make that write only what is new, never a line twice).  So the messages are
those of one ``convmem import`` of the same bytes (docs/import.md says
where summaries differ in time or place).

:func:`follow` runs a follower until stopped: a sweep at the start, then one
whenever the file system reports a transcript written (``watchfiles``, the
``follow`` extra: inotify on Linux, idle in between) and every
:data:`RESCAN` seconds; without ``watchfiles``, or where a directory to
watch does not exist yet, every :data:`POLL` seconds.  A sweep reads only
the files whose size, time or inode changed, and finds new files and
project directories by the source's globs.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import replace
from types import ModuleType
from typing import IO

from eventstore.committer import Submits
from eventstore.errors import ConvMemError
from eventstore.store import EventStore
from projections.registry import Projector

from ..principals import importer
from . import claude_code, codex, positions
from .options import Options
from .reading import expand, objects
from .target import opened
from .turns import Report, Turn
from .writer import Writer

SOURCES: dict[str, ModuleType] = {m.NAME: m for m in (claude_code, codex)}
CHUNK = 8 << 20         # bytes read in one part (each part one or more transactions)
BULK = 1 << 20          # bytes from which a part is written in bulk (the index work held to the commit)
POLL = 1.0              # seconds between sweeps when polling
RESCAN = 30.0           # seconds between sweeps while watching (files the notifications missed)
NODE_RESCAN = 2.0       # … into a replicated node's store (a generation switch waits for it to let the store go)
DEBOUNCE_MS = 500       # notifications gathered this long into one sweep
log = logging.getLogger("convmem")


class Follower:
    """Reads what is new in a source's files into an open store."""

    def __init__(self, store: EventStore, source: str, paths: list[str], options: Options | None = None,
                 report: Report | None = None, chunk: int = CHUNK, committer: Submits | None = None,
                 stop: threading.Event | None = None) -> None:
        """``committer``: what the writes are submitted to (see :class:`.writer.Writer`);
        ``stop``: once set, a sweep ends after the part it is writing (each part its own transaction)."""
        module = SOURCES.get(source)
        if module is None:
            raise ValueError(f"source: must be one of {', '.join(SOURCES)} to be followed")
        self.store, self.source, self.module, self.paths = store, source, module, paths
        self.options = options or Options()
        self.report = report or Report(source)
        self.writer = Writer(store, self.report, batch=self.options.batch, bulk=self.options.bulk,
                             principal=importer(source).name, committer=committer)
        self.chunk = max(1, chunk)        # bytes of complete lines read in one part
        self.seen: dict[str, tuple[int, int, int, int]] = {}   # path → (device, inode, size, mtime) when last read
        self.stop = stop or threading.Event()

    def files(self) -> list[str]:
        """The files to read, as absolute paths (a position is kept by its file's path)."""
        return [os.path.abspath(f) for f in expand(self.paths, self.module.DEFAULTS, self.module.PATTERN)]

    def sweep(self) -> int:
        """Read what is new in every file that changed since the last sweep; the messages written."""
        before = self.report.written
        projector = self.store.projector
        with projector.bulk_run() if isinstance(projector, Projector) else nullcontext():
            self._sweep()
        return self.report.written - before

    def _sweep(self) -> None:
        for path in self.files():
            if self.stop.is_set():
                return
            try:
                st = os.stat(path)
            except OSError:
                self.seen.pop(path, None)
                continue
            seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if self.seen.get(path) != seen:
                while self.read(path):
                    if self.stop.is_set():
                        return                  # not marked seen: the next sweep reads on from its position
                self.seen[path] = seen

    def read(self, path: str, final: bool = False) -> bool:
        """Read the next part of ``path`` (about ``chunk`` bytes of
        complete lines) and write it with its new position; True when more
        is left to read.  ``final``: the file is complete (its session
        ended): summaries waiting for their leaf are written too."""
        try:
            fh = open(path, "rb")
        except OSError:
            return False            # gone (or not readable): a sweep finds it again if it comes back
        with fh:
            st = os.fstat(fh.fileno())
            with self.store.read() as tx:
                position = positions.load(self.store, tx, self.source, path)
                seen = self.store.last_sequence(tx)         # before the file is read
            parser = self.module.parser(path, self.report, self.options)
            start, line, base, data = self._resume(position, fh, st, parser)
            end = data.rfind(b"\n") + 1
            if end <= start - base and len(data) - (start - base) >= self.chunk:      # a line longer than a part
                data += _line_end(fh, self.chunk)
                end = data.rfind(b"\n") + 1
            if end <= start - base:
                if final and start and position is not None:     # nothing new: the waiting summaries
                    self._write(iter(()), parser, position, final)
                return False
            if start == 0:
                self.report.files += 1
            raws = [raw + b"\n" for raw in data[start - base:end - 1].split(b"\n")]
            offset = base + end
            head = positions.mark(data[:min(offset, positions.HASHED)]) if base == 0 else position.head  # type: ignore[union-attr]
            tail = positions.mark(data[max(0, end - positions.HASHED):end])
            more = offset < st.st_size and len(data) - (start - base) >= self.chunk      # stopped before the end
            after = position.seen if start and position is not None else None       # None: a new reading
            new = positions.Position(path, st.st_dev, st.st_ino, offset, line + len(raws), head, tail, {},
                                     (after or 0) if more else seen)
            turns = parser.lines(objects(path, raws, self.report, line + 1))
            self.writer.since = after if after else None
            self.writer.bulk = self.options.bulk and end - (start - base) >= BULK
            self._write(turns, parser, new, final and not more)
            return more

    def _resume(self, position: positions.Position | None, fh: IO[bytes], st: os.stat_result,
                parser) -> tuple[int, int, int, bytes]:
        """(offset to read from, lines before it, offset of ``data``, the bytes
        read from there): from the position when the file is still the one it
        was taken in (and its state is a reader's), else from the start."""
        if position is not None:
            base = max(0, position.offset - positions.HASHED)
            fh.seek(base)
            data = fh.read(position.offset - base + self.chunk)
            before = data[:position.offset - base]
            if len(before) == position.offset - base and positions.resumes(position, fh, st, before):
                try:
                    parser.restore(position.state)
                    return position.offset, position.line, base, data
                except ValueError:
                    pass
            log.info("%s changed before where it was read up to (or its position is damaged): "
                     "reading it again from its start", position.path)
        fh.seek(0)
        return 0, 0, 0, fh.read(self.chunk)

    def _write(self, turns: Iterator[Turn], parser, new: positions.Position, final: bool) -> None:
        def items() -> Iterator[Turn]:
            yield from turns
            yield from parser.end(final=final)

        def keep(w) -> None:
            positions.save(self.store, w, self.source, replace(new, state=parser.state()))
        self.writer.last = keep
        self.writer.known = {}          # what the store holds is read again: others may have written meanwhile
        try:
            self.writer.write(items())
        finally:
            self.writer.last, self.writer.since = None, None


def _line_end(fh: IO[bytes], size: int) -> bytes:
    """The rest of a line longer than a part: read on up to its newline (or the end of the file)."""
    more = []
    while chunk := fh.read(size):
        more.append(chunk)
        if b"\n" in chunk:
            break
    return b"".join(more)


def roots(module: ModuleType, paths: list[str]) -> list[str]:
    """The directories to watch for ``paths`` (none: the source's default places)."""
    found = []
    for path in paths or list(module.DEFAULTS):
        path = os.path.expanduser(path)
        if glob.has_magic(path):
            parts = path.split(os.sep)
            fixed = [p for p in parts[:next(i for i, p in enumerate(parts) if glob.has_magic(p))]]
            path = os.sep.join(fixed) or os.sep
        elif not os.path.isdir(path):
            path = os.path.dirname(path) or "."
        found.append(os.path.abspath(path))
    return list(dict.fromkeys(found))


def follow(follower: Follower, stop: threading.Event, *, poll: float = POLL, notify: bool = True,
           swept=None, rescan: float = RESCAN, moved: Callable[[], bool] = lambda: False) -> bool:
    """Sweep, then sweep again on every change (and every ``rescan`` seconds), until
    ``stop`` is set (or Ctrl-C: ``KeyboardInterrupt``, between two transactions or
    inside one, which is then not committed), or ``moved()`` says the store must be
    let go (a replicated node's, moving to a new stream generation: True then).
    ``swept(written)`` after each sweep."""
    for _ in itertools.chain((None,), changes(roots(follower.module, follower.paths), stop, poll, notify, rescan)):
        try:
            written = follower.sweep()
        except ConvMemError:
            if moved():
                return True
            raise
        if swept is not None:
            swept(written)
        if moved():
            return True
    return False


def changes(dirs: list[str], stop: threading.Event, poll: float, notify: bool,
            rescan: float = RESCAN) -> Iterator[None]:
    """Once for every batch of changes under ``dirs`` (and every ``rescan``
    seconds), until ``stop`` is set; polled every ``poll`` seconds without
    notifications."""
    watch = _watchfiles() if notify and dirs and all(os.path.isdir(d) for d in dirs) else None
    if watch is not None:
        try:
            for _ in watch(*dirs, watch_filter=_transcript, stop_event=stop, debounce=DEBOUNCE_MS,
                           rust_timeout=int(rescan * 1000), yield_on_timeout=True):
                yield
            return
        except (OSError, RuntimeError) as exc:    # no notifications here (a watch limit, a file system without)
            log.warning("file-system notifications are not available (%s): polling every %s s", exc, poll)
    while not stop.wait(poll):
        yield


def _transcript(change: object, path: str) -> bool:
    return path.endswith(".jsonl")


def _watchfiles():
    try:
        from watchfiles import watch
    except ImportError:
        return None
    return watch


def command(args, store_path: str) -> int:
    """``convmem import claude-code|codex --follow``: runs until Ctrl-C (exit
    130) or SIGTERM (exit 0, as ``systemctl stop`` asks).  Either sets ``stop``:
    the part being written is committed, and the store is closed in order —
    an exception raised wherever the signal lands could interrupt that
    closing itself (a second Ctrl-C still does, for a stop that will not wait).
    A replicated node's store is written through its stream (:mod:`.target`),
    and let go while its server moves it to a new stream generation."""
    import signal
    import sys

    if args.dry_run:
        print("convmem import: --follow writes as it reads; it cannot be a --dry-run", file=sys.stderr)
        return 2
    options = Options(thinking=getattr(args, "thinking", False), batch=max(1, args.batch), progress=False,
                      replicate=args.replicate, stream=args.stream)
    stop, report = threading.Event(), Report(args.source)

    def swept(written: int) -> None:
        if written:
            print(f"import {args.source} --follow: wrote {written} messages ({report.written} since the start)",
                  file=sys.stderr)
    interrupted: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        if signum == signal.SIGINT:
            interrupted.append(signum)
            signal.signal(signal.SIGINT, signal.default_int_handler)     # a second Ctrl-C does not wait
        stop.set()
    with contextlib.ExitStack() as stack:
        for signum in (signal.SIGTERM, signal.SIGINT):
            stack.callback(signal.signal, signum, signal.signal(signum, on_signal))
        first = True
        while not stop.is_set():
            with opened(store_path, options) as (store, committer):
                follower = Follower(store, args.source, args.paths, options, report, committer=committer, stop=stop)
                if first:
                    print(f"import {args.source} --follow into {store_path}: following "
                          f"{', '.join(roots(follower.module, args.paths))} (Ctrl-C stops)", file=sys.stderr)
                    first = False
                try:
                    moved = follow(follower, stop, swept=swept, rescan=RESCAN if committer is None else NODE_RESCAN,
                                   moved=lambda: committer is not None and bool(committer.refused))
                except KeyboardInterrupt:
                    print(f"import {args.source} --follow: stopped", file=sys.stderr)
                    return 130
            if moved:
                print(f"import {args.source} --follow: the node's store is moving to a new stream generation: "
                      "let go, opened again in a moment", file=sys.stderr)
                stop.wait(POLL)
    print(f"import {args.source} --follow: stopped", file=sys.stderr)
    return 130 if interrupted else 0
