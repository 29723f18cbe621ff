"""A source read in a second process while the writer writes.

Reading a transcript (JSON, then the mapping to turns) is about a quarter of
an import's work in the writing process.  For a large import (``APART_BYTES``
of files or more, on more than one CPU) it is done by a fresh interpreter
(``python -c``, not a fork: it inherits no LMDB environment, no lock, no
state) running :func:`serve`, which reads the source with the same code as
an import in one process and sends the turns back, ``FRAME_ITEMS`` at a
time (fewer when they are long), as length-prefixed pickles, each with what its report gained
meanwhile (files, ignored lines, skips, notes — printed by this process, so that
they go wherever the caller's stderr goes).  A thread takes the frames off
the pipe (up to ``AHEAD`` of them ahead), so the reading goes on while the
writer commits a batch.

The turns and their order are those of an import in one process, so the
store ends with the same bytes either way.  A second process that cannot
start, or finds other code on disk than this process loaded (a
fingerprint, as the index's worker checks), ends without a frame and the
source is read here instead, from the start; one that ends after its first
frame but before its last makes the import fail (:class:`ReaderError`):
the batches written before stay, and running the import again completes it.
The reading process runs in a session of its own, so a terminal's Ctrl-C
reaches the import alone, which stops it; should the import die, its next
write to the pipe ends it.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import lru_cache
from types import ModuleType
from typing import IO

from projections.index.worker import cpus

from .options import Options
from .turns import Report, Turn

FRAME_ITEMS = 1000          # turns (or groups of turns) a frame
AHEAD = 32                  # frames read off the pipe before the reading process waits
APART_BYTES = 4 << 20       # source bytes from which the source is read in a second process
FRAME_CHARS = 8 << 20      # characters of content from which a frame is sent before FRAME_ITEMS
FRAME_MAX = 1 << 31         # bytes in a frame read (FRAME_CHARS keeps frames far below, but for one huge group)
_HERE = os.path.dirname(os.path.abspath(__file__))
Item = Turn | list[Turn]


class ReaderError(RuntimeError):
    """The process reading the source ended before it had read all of it."""


def items(module: ModuleType, files: list[str], report: Report, options: Options) -> Iterator[Item]:
    """The turns of the source's ``files`` (a group of turns that refer to each
    other as a list), read in a second process when that pays, else here."""
    proc = _start(module, files, options) if _apart(files, options) else None
    if proc is None:
        yield from module.read(files, report, options)
        return
    frames: queue.Queue[bytes | None] = queue.Queue(AHEAD)
    drain = threading.Thread(target=_drain, args=(proc.stdout, frames), daemon=True)
    drain.start()
    first = True
    try:
        while (frame := frames.get()) is not None:
            batch, read, ignored, skips, notes, done = pickle.loads(frame)
            first = False
            report.files += read
            report.ignored += ignored
            for line in skips:
                report.add_skip(line)
            for line in notes:
                report.add_note(line)
            yield from batch
            if done:
                return
        if not first:
            raise ReaderError("import: the process reading the source ended early; run the import again "
                              "to complete it (what was written stays)")
    finally:
        _stop(proc)
        while drain.is_alive():         # it may wait to put a frame nobody takes now
            try:
                frames.get_nowait()
            except queue.Empty:
                drain.join(0.05)
        if proc.stdout is not None:
            proc.stdout.close()
    yield from module.read(files, report, options)     # no frame came: read here


def _apart(files: list[str], options: Options) -> bool:
    if options.apart is not None:
        return options.apart
    if cpus() < 2:
        return False
    return sum(os.path.getsize(f) for f in files if os.path.isfile(f)) >= APART_BYTES


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """A hash of the importers' code as this process loaded it (and of the Python running it)."""
    h = hashlib.blake2b(digest_size=12)
    for name in sorted(os.listdir(_HERE)):
        if name.endswith(".py"):
            with open(os.path.join(_HERE, name), "rb") as fh:
                h.update(name.encode() + fh.read())
    h.update(sys.version.encode())
    return h.hexdigest()


def _start(module: ModuleType, files: list[str], options: Options) -> subprocess.Popen | None:
    if not sys.executable:
        return None
    root = os.path.dirname(os.path.dirname(_HERE))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from server.importers.reader import serve; serve()", fingerprint()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=root, start_new_session=True)
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps((module.__name__, files, options, FRAME_ITEMS), 5))
        proc.stdin.close()
    except (OSError, ValueError, TypeError):
        return None
    return proc


def _drain(pipe: IO[bytes] | None, frames: queue.Queue[bytes | None]) -> None:
    """Length-prefixed frames off ``pipe`` into ``frames`` until it ends (or
    a frame is cut); then None."""
    try:
        while pipe is not None and len(head := pipe.read(4)) == 4:
            n = int.from_bytes(head, "big")
            if n > FRAME_MAX or len(data := pipe.read(n)) != n:
                break
            frames.put(data)
    except (OSError, ValueError):
        pass
    frames.put(None)


def _stop(proc: subprocess.Popen) -> None:
    """End the reading process (done or not) and free its pipe; the drain
    thread then sees the pipe end."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def serve() -> None:
    """The reading process: the source named on stdin, read, its turns to stdout."""
    if sys.argv[1:] != [fingerprint()]:
        return              # other code on disk: the import reads the source itself
    name, files, options, frame_items = pickle.load(sys.stdin.buffer)
    module = importlib.import_module(name)
    report = Report(module.NAME, echo=False)
    out = sys.stdout.buffer
    sys.stdout = sys.stderr     # stdout carries the frames and nothing else
    sent = [0, 0, 0, 0]     # files, ignored, skips, notes already sent

    def send(batch: list[Item], done: bool) -> None:
        frame = (batch, report.files - sent[0], report.ignored - sent[1], report.skipped[sent[2]:],
                 report.notes[sent[3]:], done)
        sent[:] = [report.files, report.ignored, len(report.skipped), len(report.notes)]
        data = pickle.dumps(frame, 5)
        out.write(len(data).to_bytes(4, "big") + data)
        out.flush()
    try:
        batch: list[Item] = []
        chars = 0
        for item in module.read(files, report, options):
            batch.append(item)
            chars += sum(len(t.content) for t in item) if isinstance(item, list) else len(item.content)
            if len(batch) >= frame_items or chars >= FRAME_CHARS:
                send(batch, False)
                batch, chars = [], 0
        send(batch, True)
    except (BrokenPipeError, KeyboardInterrupt):
        pass                # the import went away (or was interrupted): nobody waits for more
