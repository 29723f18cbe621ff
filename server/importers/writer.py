"""The bulk writer: imported turns appended as ``MessageWritten`` events, many
per durable transaction, skipping what the store already holds.

Each batch is one :meth:`EventStore.execute` with ``bulk=True``: the events
go through the log and every projector like any other write (replay and
compaction keep working), the term index is built the way a replay builds
it, and nothing is reported written before its transaction committed.

**Identity.**  A turn's import key is kept in its message's
``source_message_ids`` as a name-based id (:func:`.turns.import_id`).  The
first time a batch meets a session, inside the write transaction, it reads
the session's live messages and remembers which import ids they carry (and
their message ids, for relations); a turn whose import id is already there is
counted *present* and not written.  Importing a file
twice, or a transcript that has grown since, therefore writes only what is
new.  Message ids stay the store's ULIDs (strictly increasing: see
:mod:`eventstore.ids`); their time part is the turn's own timestamp
whenever that is later than the store's last id.

**Relations** name their target by import key; the writer resolves it among
the session's known messages and the batch (forward references within one
batch included, as the memory graph needs); a target found nowhere is left
out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from eventstore.events import Message, MessageWritten, Metadata
from eventstore.store import EventStore, Tx, WriteTx
from projections import history, messages

from .turns import IMPORT_ID_PREFIX, Report, Turn, import_id

BATCH = 20_000          # turns per transaction


class Writer:
    def __init__(self, store: EventStore, report: Report, *, batch: int = BATCH, bulk: bool = True,
                 dry_run: bool = False, progress: Callable[[Report], None] | None = None) -> None:
        self.store, self.report = store, report
        self.batch_size, self.bulk, self.dry_run = max(1, batch), bulk, dry_run
        self.progress = progress
        self.known: dict[str, dict[str, str]] = {}     # session → import id → message id (committed)
        self.pending: list[Turn] = []

    def add(self, turn: Turn) -> None:
        self.report.turns += 1
        self.pending.append(turn)
        if len(self.pending) >= self.batch_size:
            self.flush()

    def add_group(self, turns: Iterable[Turn]) -> None:
        """Turns that refer to one another: written in one transaction (a larger one if need be)."""
        group = list(turns)
        if self.pending and len(self.pending) + len(group) > self.batch_size:
            self.flush()
        self.report.turns += len(group)
        self.pending.extend(group)
        if len(self.pending) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        turns, self.pending = self.pending, []
        if not turns:
            return
        if self.dry_run:
            with self.store.read() as tx:
                added, written, present = self._plan(tx, turns, None)
        else:
            added, written, present = self.store.execute(lambda w: self._plan(w, turns, w), bulk=self.bulk)
        for sid, keys in added.items():
            self.known[sid].update(keys)
        if not self.dry_run:     # a cache of committed state: keep only the sessions still being read
            self.known = {sid: self.known[sid] for sid in added}
        self.report.written += written
        self.report.present += present
        if self.progress is not None:
            self.progress(self.report)

    # ---------------------------------------------------------------- a batch
    def _plan(self, tx: Tx, turns: list[Turn], w: WriteTx | None) -> tuple[dict[str, dict[str, str]], int, int]:
        """Give each new turn its id, then (``w`` given) append its event.
        Returns (import ids → message ids added per session, written, already present)."""
        added: dict[str, dict[str, str]] = {}
        new: list[Turn] = []
        present = 0
        for turn in turns:
            sid = turn.session_id
            known = self._known(tx, sid)
            mine = added.setdefault(sid, {})
            if turn.import_id in known or turn.import_id in mine:
                present += 1
                continue
            mine[turn.import_id] = ""           # its id comes below
            new.append(turn)
        mids = w.new_ids([t.timestamp for t in new]) if w is not None else [f"dry-run-{n}" for n in range(len(new))]
        for turn, mid in zip(new, mids):
            added[turn.session_id][turn.import_id] = mid
        if w is not None:
            for turn, mid in zip(new, mids):
                w.append(MessageWritten(self._message(turn, mid, added)))
        return added, len(new), present

    def _message(self, turn: Turn, mid: str, added: dict[str, dict[str, str]]) -> Message:
        sid = turn.session_id
        rels = []
        for rtype, key in turn.relations:
            source = import_id(sid, key)
            target = added[sid].get(source) or self.known[sid].get(source)
            if target is not None and target != mid:
                rels.append((rtype, target))
        meta = Metadata(tags=turn.tags, memory_kind=turn.kind, tool_call_id=turn.tool_call_id,
                        summary=turn.summary, relations=tuple(dict.fromkeys(rels)),
                        source_message_ids=(turn.import_id,),
                        memory_tier="long" if turn.kind == "semantic" else "short")
        return Message(mid, sid, turn.role, turn.content, turn.timestamp, turn.timestamp, 1, meta)

    def _known(self, tx: Tx, session_id: str) -> dict[str, str]:
        """The import ids of the session's live messages, read once per run."""
        known = self.known.get(session_id)
        if known is None:
            known = self.known[session_id] = {}
            for mid in history.after(tx, session_id, None, 1 << 62):
                state = messages.get(tx, mid)
                for source in state.metadata.source_message_ids if state is not None else ():
                    if source.startswith(IMPORT_ID_PREFIX):
                        known[source] = mid
                        break
        return known


__all__ = ["BATCH", "Writer"]
