"""Read model: whole-store statistics, maintained incrementally by the projectors.

One CBOR map under ``stats``/``s``: message counts, update records, dead bytes,
body and metadata bytes, and the per-field document counts and token totals the
ranker needs.  Nothing here is ever computed by scanning.
"""

from __future__ import annotations

from eventstore import codec
from eventstore.store import Tx

DB = "stats"
SPECS = {DB: {}}
KEYS = ("active", "deleted", "updates", "dead_bytes", "body_bytes", "metadata_bytes",
        "n_content", "n_summary", "n_tags", "len_content", "len_summary", "len_tags")


def read(tx: Tx) -> dict[str, int]:
    raw = tx.txn.get(b"s", db=tx.db(DB))
    found = codec.loads(raw) if raw else {}
    return {k: found.get(k, 0) for k in KEYS}


def add(tx: Tx, **deltas: int) -> None:
    current = read(tx)
    for k, v in deltas.items():
        current[k] += v
    tx.txn.put(b"s", codec.dumps(current), db=tx.db(DB))
