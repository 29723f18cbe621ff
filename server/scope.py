"""What one principal sees of one read transaction: the single place every tool and view asks.

A principal limited to session patterns sees a message only when it is live
and its session matches.  Ids a visible message names — its
``metadata.relations`` targets and ``source_message_ids`` — are shown only when
they name such a message: a deleted or unknown id cannot be placed in a scope,
so it is left out too (the stored metadata is unchanged).  A principal with
every session (``local``, ``default``, a token without ``--sessions``) takes
none of these steps: :attr:`Seen.limited` is False and each check returns at
once.

Supersession is read here as well: a message is superseded while a live
message it can see has a ``supersedes`` relation to it
(:func:`superseded_by`, from the relation edges, which exist while their
source is live — deleting the superseding message makes the old one current).
"""

from __future__ import annotations

from eventstore.events import Message
from eventstore.store import Tx
from projections import messages, relations

from . import render
from .principals import Principal


class Seen:
    def __init__(self, tx: Tx, principal: Principal) -> None:
        self.tx = tx
        self.principal = principal
        self.limited = principal.limited
        self._sessions: dict[str, bool] = {}
        self._messages: dict[str, bool] = {}

    def session(self, session_id: str) -> bool:
        if not self.limited:
            return True
        known = self._sessions.get(session_id)
        if known is None:
            known = self._sessions[session_id] = self.principal.sees(session_id)
        return known

    def message(self, message_id: str) -> bool:
        """Whether ``message_id`` names a live message this principal sees."""
        if not self.limited:
            return True
        known = self._messages.get(message_id)
        if known is None:       # a hit's relations are asked for again by its count and supersession
            state = messages.get(self.tx, message_id)
            known = self._messages[message_id] = state is not None and self.session(state.session_id)
        return known

    def render(self, msg: Message) -> dict:
        """The message as docs/tools.md shapes it, less the ids this principal does not see."""
        item = render.message(msg)
        if self.limited:
            md = item["metadata"]
            md["relations"] = [r for r in md["relations"] if self.message(r["message_id"])]
            md["source_message_ids"] = [m for m in md["source_message_ids"] if self.message(m)]
        return item

    def superseded_by(self, message_id: str) -> str | None:
        """The newest live message this principal sees that supersedes ``message_id``; None when current."""
        best = None
        for direction, rtype, other in relations.edges(self.tx, message_id):
            if direction == "incoming" and rtype == "supersedes" and other != message_id \
                    and (best is None or other > best) and self.message(other):
                best = other
        return best
