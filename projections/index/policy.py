"""When pending index records are merged into the posting lists.

A written message's record waits in ``pending``; a merge moves every pending
record into ``postings``, ``exact`` and ``facets`` at once, and its cost is
paid by the write that triggers it.  That cost grows with the number of
distinct posting lists the pending records touch (each list's tail chunk is
decoded, extended and written again), so the policy bounds how many records
one merge takes.  The live writer (:class:`~.live.LiveIndex`) and the bulk
one (:class:`~.bulk.BulkReplay`) ask the same policy the same question after
each indexed message, so a replay leaves the bytes the live writes left.
The decision depends on the number of pending records alone — a number both
writers know without tokenizing — and the policy's :meth:`MergePolicy.layout`
is part of the index fingerprint: a store written under another policy has
its read models rebuilt when opened.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MergePolicy:
    """Merge the pending records when there are ``records`` of them."""

    records: int

    def __post_init__(self) -> None:
        if self.records < 1:
            raise ValueError("merge_at must be at least 1")

    def due(self, pending: int) -> bool:
        """Whether the write that leaves ``pending`` records pending merges them."""
        return pending >= self.records

    def room(self, pending: int) -> int:
        """How many more records may join ``pending`` before a merge is due (at least one)."""
        return max(self.records - pending, 1)

    def layout(self) -> str:
        """The policy as it goes into the index fingerprint."""
        return f"merge_at={self.records}"
