"""The store an import opens, and the path its batches take into it.

A store of its own is written in its own transactions (:meth:`EventStore.execute`).
A replicated node's store — one that holds a stream position — is written
through the node's stream, like the node's own writes: the import runs a
*visitor* of the stream (:func:`server.replication.open_visitor`), which
catches up with the stream, publishes each batch expecting the stream's last
sequence and commits it locally once the stream acknowledged it.  The node's
server may be running on the same store meanwhile: both apply the stream, and
each skips what the other applied already; every node, that one included,
reads the import from the stream.

Where the stream is: ``--replicate`` and ``--stream`` when given, else the
servers and stream name the node was last served with (its server records
them in the store).  A store that is not a node is refused ``--replicate``:
an import never makes a store a node (``convmem serve --replicate`` does).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import NoReturn

from eventstore import meta
from eventstore.committer import Committer, CommitterFactory, LiveEvents
from eventstore.errors import ValidationError
from eventstore.group_commit import group_committer
from eventstore.store import DATA_FILE, EventStore
from projections.registry import Projector

from .options import Options


@contextlib.contextmanager
def opened(path: str, options: Options) -> Iterator[tuple[EventStore, Committer | None]]:
    """The store at ``path``, and the committer its batches go through (None: its own
    transactions; a dry run never needs one); both closed on leaving."""
    if options.replicate is not None and not os.path.isfile(os.path.join(path, DATA_FILE)):
        _not_a_node()                       # before a store is made
    store = EventStore(path, Projector())
    committer = None
    try:
        if not options.dry_run:
            committer = through(store, options)
        yield store, committer
    finally:
        if committer is not None:
            committer.close()
        store.close()


def committer_factory(options: Options) -> CommitterFactory:
    """What ``MemoryService(committer=…)`` takes for an import through a service (``import
    jsonl``): the store's own group commit, or a visitor of a replicated node's stream."""
    def make(store: EventStore, live: LiveEvents, exclusive: Callable[[], AbstractContextManager]) -> Committer:
        visitor = through(store, options)
        return visitor if visitor is not None else group_committer(store, live, exclusive)
    return make


def through(store: EventStore, options: Options) -> Committer | None:
    """A visitor of the node's stream for a replicated node's store; None for a store of its own."""
    with store.read() as tx:
        db = tx.db("meta")
        node, recorded = meta.stream_position(tx.txn, db) is not None, meta.node_settings(tx.txn, db)
    if not node:
        if options.replicate is not None:
            _not_a_node()
        return None
    from ..replication import import_settings, open_visitor
    settings = import_settings(recorded, options.replicate, options.stream)
    if importlib.util.find_spec("nats") is None:              # the optional extra
        raise ValidationError("store: is a replicated node's store: importing into it needs the NATS client "
                              "(pip install 'tiny-convmem[replication]')")
    return open_visitor(store, settings)


def _not_a_node() -> NoReturn:
    raise ValidationError("--replicate: only for a replicated node's store (this store is not one: "
                          "`convmem serve --replicate` makes a store a node)")


__all__ = ["committer_factory", "opened", "through"]
