"""The read views' results, built under a principal's scope (:class:`~server.scope.Seen`):
search hits and their previews, the context walk, and a content range's end."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventstore.errors import ValidationError
from eventstore.events import Metadata
from projections import history as history_index
from projections import index as term_index
from projections import messages, relations
from projections.query import Filters

from . import render
from .scope import Seen

if TYPE_CHECKING:
    from projections.search import Hit

CONTEXT_CAP = 50


def hits(seen: Seen, query: str, flt: Filters, limit: int, boost: bool,
          superseded: str) -> list[tuple[Hit, str | None]]:
    """The best ``limit`` hits this principal sees that pass the ``superseded`` filter, each with
    the message superseding it.  Hits that do not pass are left out after ranking: while they
    leave fewer than ``limit``, the ranker is asked again for four times as many."""
    from projections import search as search_index  # the ranker loads numpy: not at start-up
    asked = limit
    while True:
        hits = search_index.search(seen.tx, query, flt, asked, options=search_index.Options(context=boost))
        kept = []
        for hit in hits:
            if not seen.session(hit.doc.session_id):
                continue
            by = seen.superseded_by(hit.doc.message_id)
            if (superseded == "exclude" and by is not None) or (superseded == "only" and by is None):
                continue
            kept.append((hit, by))
            if len(kept) == limit:
                return kept
        if len(hits) < asked:
            return kept
        asked *= 4

def result(seen: Seen, hit: Hit) -> dict:
    tx = seen.tx
    state = messages.required(messages.get(tx, hit.doc.message_id))
    item = seen.render(messages.load(tx, state))
    item["score"] = hit.score
    item["score_breakdown"] = hit.breakdown
    item["matched_fields"] = [f for f in term_index.FIELDS if hit.breakdown[f] > 0]
    item["relation_count"] = relations.count(tx, state.message_id) if not seen.limited else \
        sum(1 for _, _, other in relations.edges(tx, state.message_id) if seen.message(other))
    return item

def preview(seen: Seen, item: dict, size: int, budget: render.Budget) -> None:
    """Fill ``context_preview`` nearest neighbours first, as far as the budget allows."""
    tx, sid, mid = seen.tx, item["session_id"], item["message_id"]
    preview = item["context_preview"]
    for side, ids in (("before", reversed(history_index.before(tx, sid, mid, size))),
                      ("after", history_index.after(tx, sid, mid, size))):
        for other in ids:
            neighbour = seen.render(messages.load(tx, messages.get(tx, other)))
            if not budget.take(neighbour):
                break
            preview[side].append(neighbour)
    preview["before"].reverse()


class ContextWalk:
    """Loads messages for the context view within the 50-message cap and the budget."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen
        self.tx = seen.tx
        self.count = 0
        self.budget = render.Budget()
        self.truncated = False

    def take(self, message_id: str, wrapper: dict | None = None) -> dict | None:
        """The message, counted against the cap and the budget (with the relation
        entry ``wrapper`` around it, when it is one); None when it does not fit."""
        if self.count >= CONTEXT_CAP:
            self.truncated = True
            return None
        item = self.seen.render(messages.load(self.tx, messages.get(self.tx, message_id)))
        if not self.budget.take({**wrapper, "message": item} if wrapper else item) and self.count:
            self.truncated = True
            return None
        self.count += 1
        return item

    def relations(self, focal: str, depth: int, types: frozenset[str]) -> list[dict]:
        seen, out, frontier = {focal}, list[dict](), [focal]
        for level in range(1, depth + 1):
            nxt = []
            for node in frontier:
                for direction, rtype, other in relations.edges(self.tx, node):
                    if rtype not in types or other in seen or not self.seen.message(other):
                        continue
                    seen.add(other)
                    entry = {"type": rtype, "direction": direction, "depth": level}
                    if not messages.exists(self.tx, other):
                        entry.update(message_id=other, status="deleted")
                        if not self.budget.take(entry):        # deleted ends count against the budget too
                            self.truncated = True
                            return out
                        out.append(entry)
                        continue
                    item = self.take(other, wrapper=entry)
                    if item is None:
                        return out
                    out.append({**entry, "message": item})
                    nxt.append(other)
            frontier = nxt
        return out


def keep_unseen(seen: Seen, old: Metadata, patch: dict) -> dict:
    """A metadata patch from a limited principal, keeping the relations and source ids it
    does not see (it was never shown them, so its new lists cannot mean to drop them)."""
    if not seen.limited:
        return patch
    out = dict(patch)
    if "relations" in patch:
        hidden = tuple(r for r in old.relations if not seen.message(r[1]))
        out["relations"] = tuple(dict.fromkeys(patch["relations"] + hidden))
    if "source_message_ids" in patch:
        hidden_ids = tuple(m for m in old.source_message_ids if not seen.message(m))
        out["source_message_ids"] = tuple(dict.fromkeys(patch["source_message_ids"] + hidden_ids))
    return out


def range_end(data: bytes, offset: int, limit: int) -> int:
    """End of the range at ``offset``: shortened to a code-point boundary, or one
    whole code point when the limit is smaller than it."""
    if offset > len(data) or (offset < len(data) and _continuation(data[offset])):
        raise ValidationError("content_offset: must be 0, the end, or a UTF-8 code-point boundary")
    end = min(offset + limit, len(data))
    while offset < end < len(data) and _continuation(data[end]):
        end -= 1
    if end == offset and offset < len(data):
        end = offset + 1
        while end < len(data) and _continuation(data[end]):
            end += 1
    return end


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80
