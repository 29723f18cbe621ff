"""The read commands for a person: ``search``, ``history``, ``sessions``, ``show``.

Each runs the tool of the same meaning (:data:`server.tools.BY_NAME`: the
same validation, the same service call, the same JSON) and prints its result
as a table or text (:class:`._out.Out`), or as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator

from eventstore.events import KINDS

from ..importers.turns import counted
from ..service import MemoryService
from ..tools import BY_NAME
from ._common import open_existing, store_path
from ._out import Cell, Out, local_time, one_line


def register(sub, common: argparse.ArgumentParser) -> None:
    for name, text, arguments, run in _COMMANDS:
        p = sub.add_parser(name, parents=[common], help=text, description=text)
        arguments(p)
        p.add_argument("--json", action="store_true", help="print the tool's JSON result(s) instead")
        p.set_defaults(run=run)


def _call(service: MemoryService, tool: str, **arguments) -> dict:
    return BY_NAME[tool].call(service, {k: v for k, v in arguments.items() if v is not None})


def _pages(service: MemoryService, view: str, key: str, **arguments) -> Iterator[dict]:
    """Every item of a paged view, page after page."""
    cursor = None
    while True:
        body = _call(service, "read_messages", view=view, cursor=cursor, limit=1000, **arguments)
        yield from body[key]
        cursor = body.get("nextCursor")
        if cursor is None:
            return


def _with_service(args: argparse.Namespace, fn) -> int:
    service = open_existing(store_path(args))
    try:
        return fn(service, Out())
    finally:
        service.close()


# ------------------------------------------------------------------ search
def _search_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY", help="words, identifiers or an error string to look for")
    p.add_argument("--session", help="only this session")
    p.add_argument("--kind", action="append", choices=KINDS, help="only this memory kind (repeatable)")
    p.add_argument("--tag", action="append", help="only messages with this tag (repeatable: all of them)")
    p.add_argument("--limit", type=int, default=10, help="results at most (default 10, at most 100)")


def run_search(args: argparse.Namespace) -> int:
    def show(service: MemoryService, out: Out) -> int:
        filters = {k: v for k, v in (("kinds", args.kind), ("tags", args.tag)) if v}
        body = _call(service, "search_messages", query=args.query, session_id=args.session,
                     filters_json=json.dumps(filters), limit=args.limit)
        if args.json:
            out.json(body)
            return 0
        words = args.query.split()
        rows = [(f"{r['score']:.2f}", local_time(r["timestamp"]), r["session_id"], r["role"],
                 out.highlighted(one_line(r["content"], 100), words), r["message_id"])
                for r in body["results"]]
        out.table(("score", "when", "session", "role", "content", "message id"), rows,
                  title=f"{counted(len(rows), 'result')} for {args.query!r}", whole=(2, 5), wide=4)
        return 0
    return _with_service(args, show)


# ----------------------------------------------------------------- history
def _history_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION", help="the session id")


def run_history(args: argparse.Namespace) -> int:
    def show(service: MemoryService, out: Out) -> int:
        items = list(_pages(service, "history", "history", session_id=args.session))
        if args.json:
            out.json(items)
            return 0
        if not out.terminal:
            out.table(HISTORY_FIELDS, [_record(m) for m in items])
            return 0
        if not items:
            out.line(f"session {args.session!r} has no live messages")
        for m in items:
            out.line(_heading(m), style="bold cyan")
            out.line(out.text(m["content"], newlines=True))
            out.line()
        return 0
    return _with_service(args, show)


HISTORY_FIELDS = ("when", "role", "message id", "kind", "tags", "revision", "content")


def _tags(m: dict) -> str:
    return ", ".join(m["metadata"]["tags"])


def _record(m: dict) -> tuple[str, ...]:
    """A message as the fields of :data:`HISTORY_FIELDS` (piped history)."""
    return (local_time(m["timestamp"]), m["role"], m["message_id"], m["metadata"]["memory_kind"], _tags(m),
            str(m["revision"]), m["content"])


def _heading(m: dict) -> str:
    """A message's first line on a terminal: time, role, id, kind, tags, revision."""
    tags = f"  [{_tags(m)}]" if m["metadata"]["tags"] else ""
    rev = f"  rev {m['revision']}, edited {local_time(m['updated_at'])}" if m["revision"] > 1 else ""
    return f"{local_time(m['timestamp'])}  {m['role']}  {m['message_id']}  {m['metadata']['memory_kind']}{tags}{rev}"


# ---------------------------------------------------------------- sessions
def run_sessions(args: argparse.Namespace) -> int:
    def show(service: MemoryService, out: Out) -> int:
        items = most_recent_first(_pages(service, "sessions", "sessions"))
        if args.json:
            out.json(items)
            return 0
        rows = [(s["session_id"], str(s["message_count"]), local_time(s["started_at"]),
                 local_time(s["last_message_at"]), one_line(s["representative_summary"], 60)) for s in items]
        out.table(("session", "messages", "started", "last message", "summary"), rows,
                  title=counted(len(rows), "session"), whole=(0,), wide=4)
        return 0
    return _with_service(args, show)


def most_recent_first(sessions: Iterable[dict]) -> list[dict]:
    """The sessions by their last live message, the latest first (ties: by id)."""
    return sorted(sessions, key=lambda s: (-s["last_message_at"], s["session_id"]))


# -------------------------------------------------------------------- show
def _show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("message_id", metavar="MESSAGE_ID", help="the message's id (a ULID)")


def run_show(args: argparse.Namespace) -> int:
    def show(service: MemoryService, out: Out) -> int:
        body = _call(service, "read_messages", view="context", message_id=args.message_id,
                     before=0, after=0, relation_depth=1)
        if args.json:
            out.json({"message": body["message"], "relations": body["relations"]})
            return 0
        out.fields(_shown(out, body["message"], body["relations"]))
        return 0
    return _with_service(args, show)


def _shown(out: Out, m: dict, relations: list[dict]) -> list[tuple[str, Cell]]:
    """``show``: one (label, value) row a field, the content whole, then a row a relation."""
    meta = m["metadata"]
    rows: list[tuple[str, Cell]] = [("message_id", m["message_id"]), ("session_id", m["session_id"]),
                                    ("when", local_time(m["timestamp"])), ("role", m["role"])]
    rows += [(key, str(meta[key])) for key in ("memory_kind", "memory_tier", "importance") if key in meta]
    rows.append(("tags", _tags(m)))
    rev = f", edited {local_time(m['updated_at'])}" if m["revision"] > 1 else ""
    rows.append(("revision", f"{m['revision']}{rev}"))
    rows += [(key, meta[key]) for key in ("tool_call_id", "summary") if key in meta]
    rows.append(("content", out.text(m["content"], newlines=True)))
    for rel in relations:
        other = rel.get("message")
        about = (f"{other['message_id']} ({other['role']}, {local_time(other['timestamp'])}): "
                 f"{one_line(other['content'], 60)}") if other else f"{rel['message_id']} (deleted)"
        rows.append((f"{'→' if rel['direction'] == 'outgoing' else '←'} {rel['type']}", about))
    return rows


_COMMANDS = (
    ("search", "search the store (the search_messages tool) and show the best matches", _search_arguments,
     run_search),
    ("history", "show every live message of a session, oldest first", _history_arguments, run_history),
    ("sessions", "list the sessions, most recent first, with counts", lambda p: None, run_sessions),
    ("show", "show one message with its relations", _show_arguments, run_show),
)
