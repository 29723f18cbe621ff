"""The committer interface: how every writer of an open store submits its commands.

A *command* is a function of a :class:`~eventstore.store.WriteTx` that reads
state, decides and appends events.  Every writer of a served store — the
tools, ``rebuild``, an import through the service — hands its commands to
one committer, which runs each in a durable commit and returns its result
(or raises its error); an import, ``import --follow`` or the Claude Code hook
that opened a store of its own runs them in the store's own transactions
(:meth:`EventStore.execute`), and one that opened a replicated node's store
through a committer of the node's stream made for the import.
Which committer runs them is chosen by whoever opens the store for serving:

* :class:`~eventstore.group_commit.GroupCommitter` — a store of its own:
  concurrent commands gathered into one commit;
* the replication package's committer (``convmem serve --replicate``):
  each command's events published to the stream before they commit.

So an import into a replicated store reaches the stream like a tool's write,
and the service never needs to know which of the two it writes through.

:class:`Submits` is the part a writer needs (``submit``); :class:`Committer`
adds what the service asks of the committer it owns: health, reads that wait
for other nodes, ``rebuild_index``.  Its defaults are those of a store with no
stream behind it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .events import MessageWritten
from .store import EventStore, Tx, WriteTx

Command = Callable[[WriteTx], object]
LiveEvents = Callable[[Tx], tuple[int, Iterator[MessageWritten]]]


class Submits(Protocol):
    def submit(self, command: Command, *, bulk: bool = False) -> object:
        """Run ``command`` in a durable commit; its result, or its error raised here.
        ``bulk``: a batch appending many events (an import): in a bulk transaction
        of its own (:meth:`EventStore.execute`), never grouped with other commands."""
        ...


class Committer(Submits, Protocol):
    #: why this store can never be written (shown by health before a write tries); "" when it can
    refused: str = ""
    #: True when the committer excludes reads itself while it replaces the data file: the
    #: caller must then not hold a shared read lock around :meth:`submit` (it would deadlock)
    excludes_reads: bool = False
    #: True when a commit waits for a stream's acknowledgement (a replicated node's writes)
    streamed: bool = False

    def close(self) -> None: ...

    def wait_applied(self) -> None:
        """Before a read that must see every write made elsewhere (a replicated node's
        ``--sync-reads``): wait until they are applied here.  Nothing to wait for locally."""
        return None

    def rebuild(self) -> dict[str, int] | None:
        """``rebuild_index`` when the committer owns it (a new stream generation);
        None: compact the store in place (the caller does, excluding every other call)."""
        return None

    def status(self) -> dict[str, Any] | None:
        """What health reports of the committer (``replication``); None: nothing."""
        return None


#: how the service gets its committer: (the open store, its live messages as events,
#: the service's exclusive lock) → the committer
CommitterFactory = Callable[[EventStore, LiveEvents, Callable[[], AbstractContextManager]], Committer]


__all__ = ["Command", "Committer", "CommitterFactory", "LiveEvents", "Submits"]
