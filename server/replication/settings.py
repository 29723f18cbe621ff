"""The settings of a replicated store, from the ``convmem serve`` flags, or, for an
import into a node's store, from its flags and what the node recorded (no nats here)."""

from __future__ import annotations

from dataclasses import dataclass

from eventstore.errors import ValidationError

from .layout import check_stream_name

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


def import_settings(recorded: tuple[str, str] | None, urls: str | None, stream: str | None) -> Settings:
    """Where an import into a node's store publishes: ``--replicate`` and ``--stream`` when
    given, else the servers and stream the node was last served with (``recorded``)."""
    if urls is None and recorded is None:
        raise ValidationError("--replicate: required: the store is a node of a replicated store and does "
                              "not record its NATS servers (serve it once with --replicate, or give them)")
    servers = urls if urls is not None else recorded[0]          # type: ignore[index]
    name = stream if stream is not None else recorded[1] if recorded is not None else DEFAULT_STREAM
    return parse_settings(servers, name)
