"""What the store remembers for a project, as text to hand a new session
(the ``SessionStart`` hook, :mod:`server.hook`).

A session's project is the ``project:<cwd>`` tag its imported Claude Code
messages carry (:mod:`server.importers.claude_code`); a message written into
that session, by an import or by an agent, belongs to the project.  The
briefing holds the project's *distilled memories* — live messages of every
kind but ``conversation`` — that no live message supersedes (read as
``search_messages`` reads it: :meth:`server.scope.Seen.superseded_by`),
highest importance first, then newest first, each on one line (its summary
when it has one, else its content, cut at :data:`LINE_BYTES`), as many as
fit in the byte budget.

The sessions looked at are found from the term index's tag facet (the
live messages tagged ``project:<cwd>``, merged or pending, and their
sessions), not by walking every session; of those, only the ones whose entry
counts a message of another kind than ``conversation``, each read from its
newest message back until as many memories as it counts were found (an
import writes a session's summaries last).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from eventstore.events import KINDS
from eventstore.store import Tx
from projections import history, messages, sessions
from projections.index import sessions_of, tagged

from .importers.turns import cut, tag
from .principals import LOCAL
from .scope import Seen

BUDGET = 8192           # bytes of the briefing, by default
LINE_BYTES = 1024       # bytes of one memory's text at most
PAGE = 256              # message ids read at once, walking a session back
_CONVERSATION = KINDS.index("conversation")


@dataclass(frozen=True)
class Memory:
    importance: int
    timestamp: int
    message_id: str
    kind: str
    text: str


def project_tag(cwd: str) -> str:
    """The tag of the sessions of the project at ``cwd`` (as an import writes it)."""
    return tag(f"project:{cwd}")


def memories(tx: Tx, cwd: str) -> list[Memory]:
    """The project's distilled memories, not superseded, in briefing order."""
    wanted = project_tag(cwd)
    found: list[Memory] = []
    for sid in sorted(sessions_of(tx, tagged(tx, wanted))):
        entry = sessions.get(tx, sid)
        if entry is None:
            continue
        distilled = entry.message_count - entry.kind_counts[_CONVERSATION]
        if distilled <= 0 or _project(tx, sid) != wanted:
            continue
        found += _distilled(tx, sid, distilled)
    found.sort(key=lambda m: (-m.importance, -m.timestamp, m.message_id))
    return found


def _project(tx: Tx, session_id: str) -> str | None:
    """The session's ``project:`` tag: that of its first message carrying one
    (among its first :data:`PAGE`: an imported session's tag is on every line)."""
    for mid in history.after(tx, session_id, None, PAGE):
        state = messages.get(tx, mid)
        for t in state.metadata.tags if state is not None else ():
            if t.startswith("project:"):
                return t
    return None


def _distilled(tx: Tx, session_id: str, count: int) -> list[Memory]:
    """The session's ``count`` messages of another kind than conversation (newest first), superseded ones left out."""
    ends = history.first_last(tx, session_id)
    if ends is None:
        return []
    found: list[Memory] = []
    seen, seen_by = 0, Seen(tx, LOCAL)
    page = [ends[1]]
    while page and seen < count:
        for mid in reversed(page):
            state = messages.get(tx, mid)
            if state is None or state.metadata.memory_kind == "conversation":
                continue
            seen += 1
            if seen_by.superseded_by(mid) is None:
                text = state.metadata.summary or messages.content(tx, state)
                found.append(Memory(state.metadata.importance, state.timestamp, mid, state.metadata.memory_kind,
                                    cut(" ".join(text.split()), LINE_BYTES)))
        page = history.before(tx, session_id, page[0], PAGE)
    return found


def render(cwd: str, found: list[Memory], budget: int = BUDGET) -> str:
    """The briefing: a heading and one line a memory, within ``budget`` UTF-8 bytes ("" when none)."""
    if not found:
        return ""
    head = f"Memories from earlier sessions in {cwd} (convmem; most important first):"
    lines = [head]
    size = len(head.encode())
    for m in found:
        day = dt.datetime.fromtimestamp(m.timestamp / 1000, dt.UTC).strftime("%Y-%m-%d")
        line = f"- [{m.kind}, importance {m.importance}, {day}] {m.text}"
        cost = len(line.encode()) + 1
        if size + cost > budget:
            break
        lines.append(line)
        size += cost
    if len(lines) == 1:
        return ""
    left = len(found) - (len(lines) - 1)
    tail = f"({left} more: search_messages finds them)" if left else ""
    if tail and size + len(tail.encode()) + 1 <= budget:
        lines.append(tail)
    return "\n".join(lines)


def briefing(tx: Tx, cwd: str, budget: int = BUDGET) -> str:
    return render(cwd, memories(tx, cwd), budget)
