"""The pages: each one reads through :class:`~server.ui.reader.Reader` and names a
template and what it shows.  Nothing here knows HTTP or HTML; :mod:`server.ui.app`
does the requests and :mod:`server.ui.text` the escaping.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

from eventstore.errors import ValidationError
from eventstore.events import KINDS, ROLES, TIERS

from . import chart, text
from .reader import Reader

SESSIONS_PAGE = 100             # sessions a page
HISTORY_PAGE = 100              # messages of a session a page: within the time budget on a loaded machine
SEARCH_LIMIT = 20
NEIGHBOURS = 3                  # messages before and after on a message's page
CLIP = 4000                     # characters of a message shown in a list; its own page shows it whole
TOOL_TAGS = frozenset({"tool_use", "tool_result"})


@dataclass
class Page:
    template: str
    values: dict[str, Any] = field(default_factory=dict)
    status: int = 200


def sessions(reader: Reader, cursor: str | None) -> Page:
    args: dict[str, Any] = {"view": "sessions", "limit": SESSIONS_PAGE}
    if cursor:
        args["cursor"] = cursor
    body = reader.tool("read_messages", args)
    return Page("sessions.html", {"sessions": body["sessions"], "next_cursor": body.get("nextCursor")})


def is_tool_call(message: dict) -> bool:
    meta = message["metadata"]
    return "tool_call_id" in meta or not TOOL_TAGS.isdisjoint(meta["tags"])


def session(reader: Reader, session_id: str, cursor: str | None, deleted: str | None) -> Page:
    args: dict[str, Any] = {"view": "history", "session_id": session_id, "limit": HISTORY_PAGE}
    if cursor:
        args["cursor"] = cursor
    body = reader.tool("read_messages", args)
    return Page("session.html", {"session_id": session_id, "messages": body["history"],
                                 "next_cursor": body.get("nextCursor"), "deleted": deleted},
                status=200 if body["history"] or cursor else 404)


@dataclass(frozen=True)
class SearchForm:
    """The search page's form, as given (strings), and the tool arguments it stands for."""

    q: str = ""
    session: str = ""
    kinds: tuple[str, ...] = ()
    tiers: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    tags: str = ""
    after: str = ""                 # YYYY-MM-DD, from the start of that day (UTC)
    before: str = ""                # YYYY-MM-DD, to the end of that day (UTC)
    min_importance: str = ""

    @classmethod
    def from_query(cls, params: dict[str, list[str]]) -> SearchForm:
        one = lambda key: (params.get(key) or [""])[-1].strip()
        return cls(q=one("q"), session=one("session"), kinds=tuple(params.get("kind", ())),
                   tiers=tuple(params.get("tier", ())), roles=tuple(params.get("role", ())), tags=one("tags"),
                   after=one("after"), before=one("before"), min_importance=one("min_importance"))

    def arguments(self) -> dict[str, Any]:
        """The ``search_messages`` arguments; ``ValidationError`` naming the form field otherwise."""
        filters: dict[str, Any] = {}
        for key, values in (("kinds", self.kinds), ("tiers", self.tiers), ("roles", self.roles)):
            if values:
                filters[key] = list(values)
        tags = [t.strip() for t in self.tags.split(",") if t.strip()]
        if tags:
            filters["tags"] = tags
        if self.after:
            filters["after"] = _day_ms(self.after, "after")
        if self.before:
            filters["before"] = _day_ms(self.before, "before") + 86_400_000
        args: dict[str, Any] = {"query": self.q, "filters_json": json.dumps(filters), "limit": SEARCH_LIMIT}
        if self.session:
            args["session_id"] = self.session
        if self.min_importance:
            if not self.min_importance.isdigit():
                raise ValidationError("min_importance: must be an integer from 0 to 100")
            args["min_importance"] = int(self.min_importance)
        return args


def _day_ms(value: str, name: str) -> int:
    try:
        day = datetime.date.fromisoformat(value)
    except ValueError:
        raise ValidationError(f"{name}: must be a date, YYYY-MM-DD") from None
    return int(datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.UTC).timestamp() * 1000)


def search(reader: Reader, form: SearchForm) -> Page:
    values: dict[str, Any] = {"form": form, "kinds": KINDS, "tiers": TIERS, "roles": ROLES,
                              "results": None, "error": None}
    if not form.q:
        return Page("search.html", values)
    try:
        body = reader.tool("search_messages", form.arguments())
    except ValidationError as exc:
        return Page("search.html", {**values, "error": exc.message}, status=400)
    return Page("search.html", {**values, "results": body["results"], "pattern": text.highlighter(form.q)})


def message(reader: Reader, message_id: str) -> Page:
    """The message, its relations and context, and its revisions oldest first (who wrote it, who
    changed what): two tool calls as the signed-in principal, so its scope applies to both."""
    body = reader.tool("read_messages", {"view": "context", "message_id": message_id, "before": NEIGHBOURS,
                                         "after": NEIGHBOURS, "relation_depth": 1})
    revisions = reader.tool("read_messages", {"view": "revisions", "message_id": message_id})["revisions"]
    return Page("message.html", {"m": body["message"], "context": body["chronological_context"],
                                 "relations": body["relations"], "session": body["session"],
                                 "truncated": body["truncated"], "revisions": revisions})


def confirm_delete(reader: Reader, message_id: str) -> Page:
    page = message(reader, message_id)
    return Page("confirm.html", page.values)


def delete(reader: Reader, message_id: str, session_id: str) -> dict:
    """Delete ``message_id`` if it is still in ``session_id`` (the session shown when it was confirmed)."""
    return reader.tool("delete_message", {"message_id": message_id, "session_id": session_id})


def health(reader: Reader) -> Page:
    report = reader.tool("get_system_health", {})
    return Page("health.html", {"rows": list(_flat(report)), "status": report["status"],
                                "chart": chart.bars(*reader.written_per_day(chart.DAYS))})


def _flat(value: Any, prefix: str = ""):
    """(dotted key, value) of every leaf of the health document, in its order."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _flat(inner, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, value
