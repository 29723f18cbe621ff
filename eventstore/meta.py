"""The ``meta`` sub-database: the store's own values, one key each.

=================  ==========================================================
key                value
=================  ==========================================================
``format_version`` 8-byte big-endian int: the layout of the whole store
``schema_version`` 8-byte int: the projections' schema the read models follow
``fingerprint``    UTF-8 text: everything else the read models' bytes depend on
                   (the projector's :attr:`fingerprint`: tokenizer, stemmer and
                   Unicode versions, index layout knobs)
``watermark``      8-byte int: the last sequence the read models include
``seq_floor``      8-byte int: the last sequence is never below it (compaction)
``last_id``        16 bytes: the greatest message id given so far
``secret``         32 random bytes: the key that signs paging cursors
``io``             CBOR map of the logical I/O counters (:data:`IO_KEYS`)
``repl_generation``, ``repl_sequence``, ``repl_offset``
                   8-byte ints: a replicated node's position in its stream
                   (:func:`stream_position`; written by the replication package)
``repl_servers``, ``repl_stream``
                   UTF-8 text: the NATS URLs (comma-separated) and the stream
                   name the node was last served with (:func:`node_settings`):
                   where an import into the node's store publishes
``follow/…``       a caller's own values (:data:`CALLER_PREFIX`): where
                   ``import --follow`` and the hook stopped reading each
                   transcript (:mod:`server.importers.positions`)
=================  ==========================================================

Every reader checks the shape of what it reads: damage is ``CORRUPT_STORE``.
"""

from __future__ import annotations

import os

from . import codec
from .errors import CorruptStoreError

FORMAT_VERSION = 2
IO_KEYS = ("write_bytes", "write_calls", "flush_calls", "truncate_calls", "replace_calls")
# kept across compaction besides the counters (and the callers' values)
CARRIED = (b"last_id", b"secret", b"repl_servers", b"repl_stream")
CALLER_PREFIX = b"follow/"          # keys a caller may read and write through the store (kept by compaction)
_STREAM_KEYS = (b"repl_generation", b"repl_sequence", b"repl_offset")
_NODE_KEYS = (b"repl_servers", b"repl_stream")
_IO_ORDER = codec.canonical_order(IO_KEYS)     # the counters' map is built in this order: written without sorting


def find_int(txn, db, key: bytes) -> int | None:
    raw = txn.get(key, db=db)
    if raw is None:
        return None
    if len(raw) != 8:
        raise CorruptStoreError("a number in the store's meta is not 8 bytes")
    return int.from_bytes(raw, "big")


def get_int(txn, db, key: bytes, default: int = 0) -> int:
    found = find_int(txn, db, key)
    return default if found is None else found


def put_int(txn, db, key: bytes, value: int) -> None:
    txn.put(key, value.to_bytes(8, "big"), db=db)


def stream_position(txn, db) -> tuple[int, int, int] | None:
    """(generation, sequence, offset) of a node of a replicated store; None
    for a store that never followed a stream."""
    generation = find_int(txn, db, _STREAM_KEYS[0])
    if generation is None:
        return None
    return generation, get_int(txn, db, _STREAM_KEYS[1]), get_int(txn, db, _STREAM_KEYS[2])


def put_stream_position(txn, db, generation: int, sequence: int, offset: int) -> None:
    for key, value in zip(_STREAM_KEYS, (generation, sequence, offset)):
        put_int(txn, db, key, value)


def node_settings(txn, db) -> tuple[str, str] | None:
    """(servers, stream) a node of a replicated store was last served with; None when unknown."""
    servers, stream = (find_text(txn, db, key) for key in _NODE_KEYS)
    return None if servers is None or stream is None else (servers, stream)


def put_node_settings(txn, db, servers: str, stream: str) -> None:
    for key, value in zip(_NODE_KEYS, (servers, stream)):
        txn.put(key, value.encode("utf-8"), db=db)


def find_text(txn, db, key: bytes) -> str | None:
    raw = txn.get(key, db=db)
    if raw is None:
        return None
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptStoreError("a text in the store's meta is not UTF-8") from exc


def put_projection(txn, db, schema_version: int, fingerprint: str) -> None:
    """Say which projections the read models were built by."""
    put_int(txn, db, b"schema_version", schema_version)
    txn.put(b"fingerprint", fingerprint.encode("utf-8"), db=db)


def initialize(txn, db, schema_version: int, fingerprint: str) -> None:
    """The meta of a new, empty store."""
    put_int(txn, db, b"format_version", FORMAT_VERSION)
    put_projection(txn, db, schema_version, fingerprint)
    put_int(txn, db, b"watermark", 0)
    put_io_counters(txn, db, dict.fromkeys(IO_KEYS, 0))
    txn.put(b"secret", os.urandom(32), db=db)


def io_counters(txn, db) -> dict[str, int]:
    return codec.loads_counts(txn.get(b"io", db=db), _IO_ORDER, "the store's I/O counters")


def put_io_counters(txn, db, io: dict[str, int]) -> None:
    txn.put(b"io", codec.dumps_counts({k: io[k] for k in _IO_ORDER}), db=db)


def carried(txn, db) -> dict[bytes, bytes]:
    """The values of :data:`CARRIED` that are set, and the callers' values."""
    found = {k: txn.get(k, db=db) for k in CARRIED}
    kept = {k: bytes(v) for k, v in found.items() if v is not None}
    kept.update(caller_values(txn, db, CALLER_PREFIX))
    return kept


def put_all(txn, db, values: dict[bytes, bytes]) -> None:
    for k, v in values.items():
        txn.put(k, v, db=db)


def raise_last_id(txn, db, top: bytes) -> None:
    """``last_id`` becomes ``top`` when that is greater (an empty ``top`` changes nothing)."""
    if top and top > bytes(txn.get(b"last_id", db=db) or b""):
        txn.put(b"last_id", top, db=db)


def caller_values(txn, db, prefix: bytes) -> dict[bytes, bytes]:
    """Every caller's value whose key starts with ``prefix`` (itself under :data:`CALLER_PREFIX`)."""
    check_caller_key(prefix)
    found: dict[bytes, bytes] = {}
    with txn.cursor(db=db) as cur:
        if cur.set_range(prefix):
            for k, v in cur:
                if not k.startswith(prefix):
                    break
                found[bytes(k)] = bytes(v)
    return found


def put_caller_value(txn, db, key: bytes, value: bytes) -> None:
    check_caller_key(key)
    txn.put(key, value, db=db)


def check_caller_key(key: bytes) -> None:
    """A caller reads and writes only keys under :data:`CALLER_PREFIX` (never the store's own)."""
    if not key.startswith(CALLER_PREFIX) or len(key) > 511:
        raise ValueError("key: must start with 'follow/' and be at most 511 bytes")
