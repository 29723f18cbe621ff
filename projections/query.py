"""What a search filters on (:class:`Filters`), apart from the ranker.

The ranker (:mod:`projections.search`) loads numpy; the server builds
filters from a tool call's arguments at every start, and imports the ranker
only when it first searches — so starting a server does not pay for numpy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Filters:
    session_id: str | None = None
    kinds: frozenset[str] = frozenset()
    tiers: frozenset[str] = frozenset()
    tags: tuple[str, ...] = ()
    min_importance: int = 0
    roles: frozenset[str] = frozenset()
    after: int | None = None          # timestamp ≥ after (ms since the epoch)
    before: int | None = None         # timestamp < before
