"""Read model: whole-store statistics, maintained incrementally by the projectors.

One CBOR map under ``stats``/``s``: message counts, update records, dead bytes,
body and metadata bytes, and the per-field document counts and token totals the
ranker needs.  Nothing here is ever computed by scanning.  Within a write
transaction the map is decoded once, kept in the transaction's
:class:`Counters`, and written once when the transaction flushes.
"""

from __future__ import annotations

from collections.abc import Mapping

from eventstore import codec
from eventstore.store import Tx

DB = "stats"
SPECS: dict[str, dict] = {DB: {}}
KEYS = ("active", "deleted", "updates", "dead_bytes", "body_bytes", "metadata_bytes",
        "n_content", "n_summary", "n_tags", "len_content", "len_summary", "len_tags")
_ORDER = codec.canonical_order(KEYS)     # the map is kept in this order: written without sorting


def read(tx: Tx) -> dict[str, int]:
    return codec.loads_counts(tx.txn.get(b"s", db=tx.db(DB)), _ORDER, "the statistics record")


class Counters:
    """The statistics as one write transaction changes them."""

    def __init__(self) -> None:
        self._current: dict[str, int] | None = None

    def add(self, tx: Tx, deltas: Mapping[str, int] | None = None, **more: int) -> None:
        current = self._current
        if current is None:
            current = self._current = read(tx)
        for k, v in (deltas or {}).items():
            current[k] += v
        for k, v in more.items():
            current[k] += v

    def current(self, tx: Tx) -> dict[str, int]:
        """The statistics as they stand in this transaction."""
        return dict(self._current) if self._current is not None else read(tx)

    def flush(self, tx: Tx) -> None:
        if self._current is not None:
            tx.txn.put(b"s", codec.dumps_counts(self._current), db=tx.db(DB))
