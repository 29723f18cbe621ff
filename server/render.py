"""The JSON shapes of docs/tools.md (§The message object and each tool's result), built explicitly,
and the response budget (§Common rules)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TypeVar

from eventstore.events import Message

K = TypeVar("K")
BUDGET = 8 * 1024 * 1024 - 64 * 1024   # room for the envelope around the items


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))   # json.dumps with options builds one a call


def dumps(value: object) -> str:
    return _ENCODER.encode(value)


def size(value: object) -> int:
    return len(dumps(value).encode("utf-8", "surrogatepass"))


def message(m: Message) -> dict:
    meta = m.metadata
    md: dict = {}
    if meta.tool_call_id is not None:
        md["tool_call_id"] = meta.tool_call_id
    md.update(tags=list(meta.tags), memory_tier=meta.memory_tier, memory_kind=meta.memory_kind,
              importance=meta.importance)
    if meta.summary:
        md["summary"] = meta.summary
    md["relations"] = [{"type": t, "message_id": i} for t, i in meta.relations]
    md["source_message_ids"] = list(meta.source_message_ids)
    return {"message_id": m.message_id, "session_id": m.session_id, "timestamp": m.timestamp,
            "role": m.role, "content": m.content, "revision": m.revision,
            "updated_at": m.updated_at, "metadata": md}


class Budget:
    """Counts the JSON bytes of a page's items against the response budget."""

    def __init__(self, limit: int = BUDGET) -> None:
        self.left = limit

    def take(self, item: object) -> bool:
        """Reserve room for ``item``; False (and nothing reserved) when it does not fit."""
        n = size(item) + 1
        if n > self.left:
            return False
        self.left -= n
        return True


def page(keys: Iterable[K], load: Callable[[K], dict], limit: int) -> tuple[list[tuple[K, dict]], bool]:
    """Up to ``limit`` (key, item) pairs within the budget, and whether more remain.

    Items are loaded one at a time and only when they may still go in the page;
    the first one always does, whatever its size.
    """
    budget = Budget()
    out: list[tuple[K, dict]] = []
    for key in keys:
        if len(out) == limit:
            return out, True
        item = load(key)
        if not budget.take(item):
            if out:
                return out, True
            budget.left = 0
        out.append((key, item))
    return out, False
