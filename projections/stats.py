"""Read model: whole-store statistics, maintained incrementally by the projectors.

One CBOR map under ``stats``/``s``: message counts, update records, dead bytes,
body and metadata bytes, and the per-field document counts and token totals the
ranker needs.  Nothing here is ever computed by scanning.  Within a write
transaction the map is decoded once, kept in the transaction's memo, and
written once when the transaction flushes.
"""

from __future__ import annotations

from eventstore import codec
from eventstore.store import Tx, WriteTx

DB = "stats"
SPECS = {DB: {}}
KEYS = ("active", "deleted", "updates", "dead_bytes", "body_bytes", "metadata_bytes",
        "n_content", "n_summary", "n_tags", "len_content", "len_summary", "len_tags")


def _current(tx: Tx) -> dict[str, int]:
    current = tx.memo.get(DB)
    if current is None:
        raw = tx.txn.get(b"s", db=tx.db(DB))
        found = codec.loads(raw) if raw else {}
        current = tx.memo[DB] = {k: found.get(k, 0) for k in KEYS}
    return current


def read(tx: Tx) -> dict[str, int]:
    return dict(_current(tx))


def add(tx: WriteTx, **deltas: int) -> None:
    current = _current(tx)
    for k, v in deltas.items():
        current[k] += v
    if not tx.deferred_put(DB, b"s"):
        tx.defer_put(DB, b"s", lambda: codec.dumps(current))
