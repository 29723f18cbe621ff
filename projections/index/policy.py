"""When pending index records are merged, and how a merge's work is spread.

A written message's record waits in ``pending``; a merge moves the oldest
``records`` of them into ``postings``, ``exact`` and ``facets`` at once.
Its cost grows with the number of distinct posting lists those records touch
(each list's tail chunk is decoded, extended and written again: thousands of
lists for 2,048 records), so merging fewer records at a time costs more in
all; instead the work of one merge is *spread*: once ``records`` are pending,
each of the next ``spread`` writes does a share of it ahead
(:class:`~.merging.MergeWork`: gathering the records, computing the new
chunks), and the write after them — the one that finds the merge due — only
puts what was computed.  No byte depends on the spreading, only on which
records are merged: the oldest ``records`` when ``records + spread`` are
pending.

The live writer (:class:`~.live.LiveIndex`) and the bulk one
(:class:`~.bulk.BulkReplay`) ask the same policy the same question after
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
    """Merge the oldest ``records`` pending records when ``records + spread``
    are pending, the work spread over the ``spread`` writes before."""

    records: int
    spread: int = 0

    def __post_init__(self) -> None:
        if self.records < 1:
            raise ValueError("merge_at must be at least 1")
        if self.spread < 0:
            raise ValueError("merge_spread must be at least 0")

    def due(self, pending: int) -> bool:
        """Whether the write that leaves ``pending`` records pending merges the oldest :attr:`records`."""
        return pending >= self.records + self.spread

    def room(self, pending: int) -> int:
        """How many more records may join ``pending`` before a merge is due (at least one)."""
        return max(self.records + self.spread - pending, 1)

    def share(self, pending: int, todo: int) -> int:
        """How much of a merge's ``todo`` units of work (a record gathered, a
        list computed: about the same cost) the write that leaves ``pending``
        records pending does ahead: none before ``records`` are pending, then
        an even share of what is left over the writes left before the merge."""
        if pending < self.records or self.due(pending):
            return 0
        left = self.records + self.spread - pending
        return -(-todo // left)

    def layout(self) -> str:
        """The policy as it goes into the index fingerprint."""
        return f"merge_at={self.records}" + (f" spread={self.spread}" if self.spread else "")
