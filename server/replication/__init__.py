"""Replication of the event log on NATS JetStream (``convmem serve --replicate``).

The stream is the truth; this node's LMDB store is a materialized view of it.
Nothing here imports ``nats`` at import time: :func:`open_committer` does,
and only a replicated server calls it.  See docs/replication.md.

* :mod:`.layout` — names: streams, subjects, message ids, the meta keys;
* :mod:`.link` — the NATS client on its own event-loop thread, called from
  the writer thread; its errors become ``IO_ERROR``;
* :mod:`.apply` — stream messages into the local store (exactly once);
* :mod:`.committer` — the writer thread: apply, run a command, publish, commit;
* :mod:`.generations` — ``rebuild_index``: a new stream generation from the
  live messages, every node switching to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eventstore.errors import ValidationError

if TYPE_CHECKING:
    from eventstore.store import EventStore

    from .committer import LiveEvents, ReplicatedCommitter

DEFAULT_STREAM = "CONVMEM"
DEFAULT_REPLICAS = 3


@dataclass(frozen=True)
class Settings:
    """Where the stream is and what it is called (from ``convmem serve`` flags)."""

    servers: tuple[str, ...]
    stream: str = DEFAULT_STREAM
    replicas: int = DEFAULT_REPLICAS
    sync_reads: bool = False
    write_timeout: float = 15.0     # seconds a write keeps trying (a leader election takes ~5-6 s)


def parse_settings(urls: str, stream: str = DEFAULT_STREAM, replicas: int = DEFAULT_REPLICAS,
                   sync_reads: bool = False) -> Settings:
    """``nats://h:p[,nats://h:p…]`` and a stream name, checked; ``VALIDATION_ERROR`` otherwise."""
    from .layout import check_stream_name
    servers = tuple(u.strip() for u in urls.split(",") if u.strip())
    if not servers:
        raise ValidationError("--replicate: give at least one nats:// URL")
    for url in servers:
        if not url.startswith(("nats://", "tls://")):
            raise ValidationError("--replicate: each URL must start with nats:// or tls://")
    check_stream_name(stream)
    if not 1 <= replicas <= 5:
        raise ValidationError("--replicas: must be between 1 and 5 (JetStream's limit)")
    return Settings(servers, stream, replicas, sync_reads)


def open_committer(store: EventStore, settings: Settings, live: LiveEvents,
                   exclusive: Callable) -> ReplicatedCommitter:
    """The writer of a replicated store (imports nats)."""
    from .committer import ReplicatedCommitter
    return ReplicatedCommitter(store, settings, live, exclusive)


__all__ = ["DEFAULT_STREAM", "Settings", "open_committer", "parse_settings"]
