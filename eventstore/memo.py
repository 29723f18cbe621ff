"""A bounded memo: values this process made, kept by what they were made
from (or of), so that meeting the same key again costs a lookup.

Every memo here is only ever a shortcut — a miss recomputes the same value —
so it is bounded the simplest way: full, it forgets everything and starts
again.  Each is sized to hold what one of its uses keeps meeting (a merge's
pending records, a session's entry between its writes, a source's facets).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(dict[K, V]):
    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def keep(self, key: K, value: V) -> V:
        """Remember ``value`` under ``key`` (forgetting everything first when full); returns it."""
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value

    def keep_all(self, items: Iterable[tuple[K, V]], count: int) -> None:
        """Remember the ``count`` pairs of ``items`` (forgetting everything
        first when they would not fit beside what is kept; only the last
        ``limit`` of them when they do not fit at all)."""
        if len(self) + count > self.limit:
            self.clear()
        if count > self.limit:
            items = list(items)[-self.limit:]
        self.update(items)
