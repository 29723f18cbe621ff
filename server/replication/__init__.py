"""Replication of the event log on NATS JetStream (``convmem serve --replicate``).

The stream is the truth; this node's LMDB store is a materialized view of it.
Nothing here imports ``nats`` at import time: the committers made by
:func:`committer_factory` and :func:`open_visitor` do, and only a replicated
server or an import into a node's store calls them.  See docs/replication.md.

* :mod:`.settings` — the flags, checked;
* :mod:`.layout` — names: streams, subjects, message ids, the meta keys;
* :mod:`.link` — the NATS client on its own event-loop thread, called from
  the writer thread; its errors become ``IO_ERROR``;
* :mod:`.apply` — stream messages into the local store (exactly once);
* :mod:`.publish` — a transaction's events to the stream, chained and retried;
* :mod:`.committer` — the writer thread: apply, run a command, publish, commit;
* :mod:`.generations` — ``rebuild_index``: a new stream generation from the
  live messages, every node switching to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .settings import DEFAULT_REPLICAS, DEFAULT_STREAM, Settings, import_settings, parse_settings

if TYPE_CHECKING:
    from eventstore.committer import CommitterFactory
    from eventstore.store import EventStore

    from .committer import ReplicatedCommitter
    from .generations import LiveEvents

def open_visitor(store: EventStore, settings: Settings) -> ReplicatedCommitter:
    """The writer of a process that writes a node's store for a while without serving it
    (an import): it follows the stream from the store's position, publishes each command
    like the node's own writes and commits it once the stream acknowledged it — beside
    the node's server if one runs (each applies the stream, skipping what the other did).
    It never moves the store to another generation: writes are refused then (imports nats)."""
    from .committer import ReplicatedCommitter
    return ReplicatedCommitter(store, settings, None, None)


def committer_factory(settings: Settings) -> CommitterFactory:
    """What ``MemoryService(committer=…)`` takes to make a node of the stream ``settings`` name."""
    def make(store: EventStore, live: LiveEvents, exclusive: Callable) -> ReplicatedCommitter:
        from .committer import ReplicatedCommitter  # imports nats: only a replicated server gets here
        return ReplicatedCommitter(store, settings, live, exclusive)
    return make


__all__ = ["DEFAULT_REPLICAS", "DEFAULT_STREAM", "Settings", "committer_factory", "import_settings", "open_visitor",
           "parse_settings"]
