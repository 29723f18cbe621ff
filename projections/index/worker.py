"""The replay's second process: written messages gathered while the replay goes on.

:class:`Builder` hands written messages over ``build_batch`` at a time to a
fresh interpreter (``python -c``, not a fork and not ``multiprocessing``,
whose children import the parent's ``__main__``: it inherits no LMDB
environment, no lock, no state) running :func:`serve`, which answers each
batch with what :func:`~.gather.gather` makes of it, a length-prefixed
pickle, in the same order.  The batches are added to one
:class:`~.columns.ColumnLists` as they come back, in docno order.

The process is started once a quarter of the first batch is written, so
that its start-up overlaps the filling.  When it has more than ``backlog``
batches waiting, the replay gathers the next batch itself, so that neither
process waits long for the other; at the end the replay gathers, last
first, the batches it has not reached, rather than wait idle for them
(:meth:`Builder.lists`).  Two threads move the bytes, through pipes that
hold several frames (the pipes would otherwise make either process wait
for the other).  What a batch gathers is a function of
its messages alone, so where it was gathered changes no byte, and a failure
of the second process (none started, one that died or hangs, garbage or
short output) only means gathering here: a frame that is too long or cut
ends the reading and the process, and the end of a replay waits at most
``join_wait`` seconds for it.  The process is handed a fingerprint of the
code this process loaded (:data:`FINGERPRINT`) and does nothing if the code
it loads from disk differs (an upgrade under a running server).  It runs
in a session of its own: a terminal's Ctrl-C reaches the replay alone (which
stops it), and the end of its input ends it should the replay die.
"""

from __future__ import annotations

import fcntl
import gc
import hashlib
import os
import pickle
import queue
import subprocess
import sys
import threading
import unicodedata
import weakref
from bisect import bisect_left
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

import Stemmer

from eventstore.events import Message

from .. import tokens
from .config import IndexConfig
from .gather import Gathered, GatheredField, gather, items_of

if TYPE_CHECKING:
    from .columns import ColumnLists

# A batch done: its messages, their docnos, and its gathered fields.
Done = tuple[list[tuple[int, Message]], list[int], list[GatheredField]]
_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = ("records.py", "gather.py", "layout.py")
# The second process's program: a plain import of this module.  The package's
# __init__ leaves the live write path (.live, .bulk) out, so that this process
# does not load it: it would cost a fifth of its start-up, while the replay
# already hands it batches.
PROGRAM = "from projections.index.worker import serve; serve()"
PIPE_SIZE = 1 << 20     # bytes each pipe to and from the second process holds (Linux's unprivileged limit)


def _source_fingerprint() -> str:
    """A hash of the code that decides what :func:`gather` makes (the records,
    gather and layout modules, the tokenizer, the Unicode tables and the
    stemmer), as loaded."""
    h = hashlib.blake2b(digest_size=12)
    for path in (*(os.path.join(_HERE, name) for name in _SOURCES), tokens.__file__):
        with open(path, "rb") as fh:
            h.update(fh.read())
    h.update(f"{unicodedata.unidata_version} {Stemmer.version()} {sys.version}".encode())
    return h.hexdigest()


FINGERPRINT = _source_fingerprint()


def serve() -> None:
    """The second process: reads batches of (docno, content, summary, tags)
    from stdin and writes what :func:`gather` makes of each to stdout, each a
    length-prefixed pickle.  Without the cyclic garbage collector: nothing
    here forms a cycle (each batch is freed by reference counting once
    answered), and its passes over the modules loaded cost 4% of the work."""
    if sys.argv[1:] != [FINGERPRINT]:
        return              # other code on disk than the replay's: it gathers every batch itself
    gc.disable()
    src, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        while head := src.read(4):
            data = pickle.dumps(gather(pickle.loads(src.read(int.from_bytes(head, "big")))), 5)
            out.write(len(data).to_bytes(4, "big") + data)
            out.flush()
    except (BrokenPipeError, EOFError, pickle.UnpicklingError):
        pass                # the replay went away (or was killed): nobody waits for more


class Worker:
    """One second process and the two threads that move its bytes: the
    frames sent to it, and its answers, in the same order, as they come."""

    def __init__(self, proc: subprocess.Popen, frame_max: int) -> None:
        self.proc = proc
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.frames: list[bytes] = []       # the answers of this round (see :meth:`again`)
        self.sent = 0                        # frames sent this round
        self.arrived = threading.Condition()
        weakref.finalize(self, _stop, proc, self.outbox)
        self.threads = [threading.Thread(target=_feed, args=(self.outbox, proc.stdin), daemon=True),
                        threading.Thread(target=self._drain, args=(frame_max,), daemon=True)]
        for thread in self.threads:
            thread.start()

    @classmethod
    def start(cls, frame_max: int) -> Worker | None:
        """A fresh second process, or None when none can start."""
        if not sys.executable:
            return None
        root = os.path.dirname(os.path.dirname(_HERE))
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", PROGRAM, FINGERPRINT],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=root, start_new_session=True)
        except (OSError, ValueError, TypeError):
            return None
        for pipe in (proc.stdin, proc.stdout):
            _widen(pipe)
        return cls(proc, frame_max)

    def send(self, frame: bytes) -> None:
        self.outbox.put(frame)
        self.sent += 1

    def wait(self, timeout: float, upto: int | None = None) -> bool:
        """Whether the first ``upto`` frames sent (all by default) came back
        (waiting up to ``timeout`` seconds)."""
        reading, upto = self.threads[1], self.sent if upto is None else upto
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.frames) >= upto or not reading.is_alive(), timeout)
            return len(self.frames) >= upto

    def again(self) -> bool:
        """Start a new round, if the process answered every frame of this one
        and still runs (else it is of no further use)."""
        if len(self.frames) != self.sent or not self.threads[1].is_alive():
            return False
        self.frames, self.sent = [], 0
        return True

    def _drain(self, frame_max: int) -> None:
        """Read length-prefixed frames off the process's stdout until it ends;
        a frame too long or cut, or any failure, stops the process (so that
        nothing waits on it) and the reading."""
        try:
            for data in _frames(self.proc.stdout, frame_max):
                with self.arrived:
                    self.frames.append(data)
                    self.arrived.notify_all()
        except Exception:
            self.proc.kill()
        with self.arrived:
            self.arrived.notify_all()

    def stop(self) -> None:
        """Stop the process (what it did not answer is lost)."""
        _stop(self.proc, self.outbox)
        for thread in self.threads:
            thread.join()


class WorkerHold:
    """The second process a run of bulk transactions shares (an import's,
    :meth:`projections.registry.Projector.bulk_run`): handed from one
    transaction to the next while :attr:`keep` is set, stopped when it is
    cleared.  Outside such a run each transaction starts its own."""

    def __init__(self) -> None:
        self.keep = False
        self.idle: Worker | None = None

    def take(self) -> Worker | None:
        worker, self.idle = self.idle, None
        return worker

    def give_back(self, worker: Worker) -> None:
        """Keep ``worker`` for the next transaction, if wanted and of use; else stop it."""
        if self.keep and self.idle is None and worker.again():
            self.idle = worker
        else:
            worker.stop()

    def release(self) -> None:
        self.keep = False
        if self.idle is not None:
            self.idle.stop()
            self.idle = None


class Builder:
    """The written messages' batches of one transaction, gathered (mostly in
    the second process) and added to one :class:`ColumnLists` in docno order."""

    def __init__(self, config: IndexConfig, hold: WorkerHold | None = None) -> None:
        self.config, self.hold = config, hold
        self.worker: Worker | None = None
        self.started = False                  # a second process was asked for (once a transaction)
        self._round()

    def _round(self) -> None:
        self.batches: list[list[tuple[int, Message]]] = [[]]
        self.here: dict[int, Gathered] = {}  # batch index → gathered here (not sent, or taken back)
        self.sent: list[int] = []            # indexes of the batches sent, in order
        self._added: ColumnLists | None = None
        self.done: list[Done] = []

    @property
    def added(self) -> ColumnLists:
        """The lists of the batches taken so far; made at the first (numpy,
        which they need, is loaded then: after the second process is started,
        whose start-up then overlaps the ~50 ms of loading it)."""
        if self._added is None:
            from .columns import ColumnLists  # never loaded by the second process
            self._added = ColumnLists(self.config.cut)
        return self._added

    def add_many(self, written: list[tuple[int, Message]]) -> None:
        """Add written messages (in docno order) to the batches; each batch
        filled goes to the second process (or is gathered here)."""
        if (not self.started and 4 * (len(self.batches[-1]) + len(written)) >= self.config.build_batch
                and self._second_process()):
            self._start()           # a quarter of a batch in: its start-up overlaps the rest of the filling
        size, at = self.config.build_batch, 0
        while at < len(written):
            batch = self.batches[-1]
            part = written[at:at + size - len(batch)]
            at += len(part)
            batch += part
            if len(batch) >= size:
                self._hand_over(batch)

    def _hand_over(self, batch: list[tuple[int, Message]]) -> None:
        items = items_of(batch)
        worker = self.worker
        if worker is not None and len(self.sent) - len(worker.frames) <= self.config.backlog:
            data = pickle.dumps(items, 5)
            worker.send(len(data).to_bytes(4, "big") + data)
            self.sent.append(len(self.batches) - 1)
        else:
            self.here[len(self.batches) - 1] = gather(items)
        self.batches.append([])
        self._take(waiting=False)

    def _second_process(self) -> bool:
        wanted = self.config.second_process
        return cpus() > 1 if wanted is None else wanted

    def _take(self, waiting: bool) -> None:
        """Add the batches that are back (all of them if ``waiting``), in order."""
        frames = self.worker.frames if self.worker is not None else []
        while len(self.done) < len(self.batches) - 1:
            i = len(self.done)
            gathered: object = self.here.pop(i, None)
            k = bisect_left(self.sent, i)
            if gathered is None and k < len(self.sent) and self.sent[k] == i:
                if k < len(frames):
                    gathered = loaded(frames[k])
                    frames[k] = b""                # its memory back
                elif not waiting:
                    return                         # not back yet
            batch = self.batches[i]
            if not (isinstance(gathered, Gathered) and gathered.fits(batch)):
                gathered = gather(items_of(batch))
            self.added.add_batch(gathered)
            self.done.append((batch, gathered.docnos, gathered.fields))

    def _take_back(self, worker: Worker) -> int:
        """Gather here, last first, sent batches the second process has not
        answered, while it works through the first ones (else this process
        would wait for it, idle); returns how many of its answers are still
        wanted.  (It still works on those taken back: it is stopped after.)
        The last, short batch (never sent) is gathered first."""
        short = len(self.batches) - 1
        if self.batches[short]:
            self.here[short] = gather(items_of(self.batches[short]))
        upto = worker.sent
        while upto - len(worker.frames) >= 2:
            upto -= 1
            i = self.sent[upto]
            self.here[i] = gather(items_of(self.batches[i]))
        return upto

    def _kept(self) -> bool:
        return self.hold is not None and self.hold.keep

    def _start(self) -> None:
        self.started = True
        self.worker = (self.hold.take() if self.hold is not None else None) or Worker.start(self.config.frame_max)

    def stop(self) -> None:
        """The transaction is over: its second process goes back to the hold
        (when every batch came back) or is stopped."""
        worker, self.worker = self.worker, None
        if worker is None:
            return
        if self.hold is not None and len(worker.frames) == worker.sent:
            self.hold.give_back(worker)
        else:
            worker.stop()

    def lists(self, last: bool = False) -> tuple[ColumnLists, list[Done]]:
        """Every batch added (the last, short one gathered here): the lists,
        and each batch with its docnos and gathered fields.  The builder
        starts a new round (with the same process), unless this is the
        ``last`` and the process is not kept for another transaction: then
        the batches it has not answered are shared with it
        (:meth:`_take_back`) and it is stopped."""
        worker = self.worker
        upto = self._take_back(worker) if worker is not None and last and not self._kept() else None
        if worker is not None and not worker.wait(self.config.join_wait, upto):
            self.worker = None              # it did not answer in time: what it did not is gathered here
            worker.stop()
        if self.batches[-1]:
            self.batches.append([])
        self._take(waiting=True)
        out = self.added, self.done
        if self.worker is not None and not self.worker.again():
            self.worker.stop()
            self.worker = None
        self._round()
        return out


def _widen(pipe: IO[bytes] | None) -> None:
    """Make ``pipe`` hold a few frames (Linux; 64 KB otherwise): a frame
    (~120 KB) then goes through in one system call, not several, between each
    of which the thread moving it waits for this process's GIL (up to 5 ms),
    and the second process for it."""
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is not None and setsize is not None:
        try:
            fcntl.fcntl(pipe.fileno(), setsize, PIPE_SIZE)
        except OSError:
            pass                # above the system's limit: the pipe keeps its size


def _feed(outbox: queue.SimpleQueue, pipe: IO[bytes]) -> None:
    """Write the frames put in ``outbox`` to ``pipe`` until ``None``; then close it."""
    try:
        for data in iter(outbox.get, None):
            pipe.write(data)
            pipe.flush()
        pipe.close()
    except (OSError, ValueError):        # the process is gone: what it missed is built here
        pass


def _frames(pipe: IO[bytes] | None, frame_max: int) -> Iterator[bytes]:
    """Frames until the pipe ends; raises on a frame too long or cut."""
    if pipe is None:
        raise ValueError("no pipe")
    while len(head := pipe.read(4)) == 4:
        n = int.from_bytes(head, "big")
        if n > frame_max or len(data := pipe.read(n)) != n:
            raise ValueError("a frame too long or cut")
        yield data


def loaded(frame: bytes) -> object:
    """A frame unpickled, or None when it cannot be."""
    try:
        return pickle.loads(frame)
    except Exception:
        return None


def _stop(proc: subprocess.Popen, outbox: queue.SimpleQueue) -> None:
    outbox.put(None)
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        try:
            if pipe is not None:
                pipe.close()
        except (OSError, ValueError):
            pass


def cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1
