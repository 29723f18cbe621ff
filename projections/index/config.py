"""The term index's tuning knobs, in one frozen value.

Every process that touches one store must use the same values for the knobs
marked *layout* — they decide the bytes of the read models (when pending
records are merged, where posting lists are cut) — so they are part of the
index fingerprint kept in the store's ``meta`` (:func:`IndexConfig.layout`):
a store opened with other values has its read models rebuilt from the log.
The other knobs only decide how fast a replay runs, never a byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .policy import MergePolicy


@dataclass(frozen=True, slots=True)
class IndexConfig:
    merge_at: int = 2048         # layout: pending records a merge takes (see :class:`.policy.MergePolicy`)
    chunk: int = 128             # layout: one docno in ``chunk`` starts a posting chunk
    merge_spread: int | None = None  # layout: writes a merge's work is spread over (None: merge_at // 128, ≤ 16)
    bulk_hold: int = 100_000     # records a bulk replay keeps in memory before writing them
    build_batch: int = 512       # written messages a replay hands the second process at a time
    backlog: int = 2             # batches the second process may have waiting before the replay gathers one itself
    frame_max: int = 1 << 28     # bytes in a frame from the second process (a 512-message batch's is ~250 KB)
    join_wait: float = 30.0      # seconds the end of a replay waits for the second process before stopping it
    second_process: bool | None = None   # None: when this process may run on more than one CPU

    def __post_init__(self) -> None:
        if self.merge_at < 1 or self.chunk < 1 or self.build_batch < 1 or self.bulk_hold < 1:
            raise ValueError("merge_at, chunk, build_batch and bulk_hold must be at least 1")
        _policy(self.merge_at, self.merge_spread)      # its knobs checked by the policy itself

    @property
    def policy(self) -> MergePolicy:
        """When the live and the bulk writers merge pending records (one value
        for these knobs: every write transaction asks for it)."""
        return _policy(self.merge_at, self.merge_spread)

    @property
    def cut(self) -> int:
        """A docno whose hash (see :func:`projections.index.chunks.boundary`) is below this starts a chunk."""
        return (1 << 64) // self.chunk

    def layout(self) -> str:
        """The knobs that decide bytes, as they go into the fingerprint."""
        return f"{self.policy.layout()} chunk={self.chunk}"


@lru_cache(maxsize=16)
def _policy(merge_at: int, merge_spread: int | None) -> MergePolicy:
    spread = min(merge_at // 128, 16) if merge_spread is None else merge_spread
    return MergePolicy(merge_at, spread)


DEFAULT = IndexConfig()
