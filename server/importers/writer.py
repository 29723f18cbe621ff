"""The bulk writer: imported turns appended as ``MessageWritten`` events, many
per durable transaction, skipping what the store already holds.

Each batch is one command submitted with ``bulk=True`` to the committer the
writer is given (:mod:`eventstore.committer`) — the service's when the store
is served, so that a batch into a replicated store is published to the
stream like a tool's write; the store's own transaction when the importer
has the store to itself.  The events go through the log and every projector
like any other write (replay and compaction keep working), the term index is
built the way a replay builds it, and nothing is reported written before its
transaction committed.

**Identity.**  A turn's import key is kept in its message's
``source_message_ids`` as a name-based id (:func:`.turns.import_id`).  The
first time a batch meets a session, inside the write transaction, it reads
the session's live messages and remembers which import ids they carry (and
their message ids, for relations); a turn whose import id is already there is
counted *present* and not written.  Importing a file
twice, or a transcript that has grown since, therefore writes only what is
new.  A follower reading on from its position sets ``since`` (see
:mod:`.positions`): only the session's messages written after that event
are read then, since no other can carry a turn it is about to write.
Message ids stay the store's ULIDs (strictly increasing: see
:mod:`eventstore.ids`); their time part is the turn's own timestamp
whenever that is later than the store's last id.

**Validity.**  Every message is checked with :func:`server.validation.message`
(the definition the tools and ``import jsonl`` use) as its event is built; the
turns are made valid by :class:`.turns.Turn`, so a refusal is a fault of an
importer: the batch is not committed and the import stops with
``VALIDATION_ERROR`` naming the field.

**Relations** name their target by import key; the writer resolves it among
the session's known messages and the batch (forward references within one
batch included, as the memory graph needs); a target found nowhere is left
out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import cast

from eventstore import ids, meta
from eventstore.committer import Submits
from eventstore.errors import ValidationError
from eventstore.events import Message, MessageUpdated, MessageWritten, Metadata, metadata, written
from eventstore.store import EventStore, Tx, WriteTx
from projections import history, messages, sessions

from .. import validation
from .turns import IMPORT_ID_PREFIX, Report, Turn, import_id

BATCH = 20_000          # turns per transaction
RUN = 256               # items a batch takes at once (their ids given in one step)
_IMPORTANCE = Metadata().importance     # an imported message's (the default)


Item = Turn | list[Turn]      # a turn, or turns that refer to one another (written in one transaction)


class Writer:
    def __init__(self, store: EventStore, report: Report, *, batch: int = BATCH, bulk: bool = True,
                 dry_run: bool = False, progress: Callable[[Report], None] | None = None,
                 principal: str | None = None, last: Callable[[WriteTx], None] | None = None,
                 committer: Submits | None = None) -> None:
        """``principal``: the name the events record (``import:<source>``).
        ``committer``: what the batches are submitted to (None: the store's own
        transactions, for a store this process opened for the import alone).
        ``last(w)`` runs in the transaction that ends the source (after its
        events; in a transaction of its own when the source gives nothing):
        where the source was read up to is kept with what was read."""
        self.store, self.report = store, report
        if committer is None and not dry_run:
            refuse_node(store)
        self.submit = committer.submit if committer is not None else store.execute
        self.principal = principal
        self.last = last
        # set: no turn to write can be in the store but as a message written after this event
        # (a follower reading on from its position): only those are read to know what is there
        self.since: int | None = None
        self.batch_size, self.bulk, self.dry_run = max(1, batch), bulk, dry_run
        self.progress = progress
        self.known: dict[str, dict[str, str]] = {}     # session → import id → message id (committed)
        self.items: Iterator[Item] = iter(())
        self.ahead: Item | None = None                  # read, not yet taken by a batch
        self.failure: Exception | None = None           # what reading the source raised

    def write(self, items: Iterable[Item]) -> None:
        """Write every item, ``batch`` turns a transaction (a group is never
        split: it starts a transaction of its own when it does not fit).

        A batch takes its items while its transaction is open, so that the
        turns are written while the source is still being read; should
        reading fail, what was read is written and committed, then the
        failure raised."""
        self.items, self.ahead, self.failure = iter(items), None, None
        batches = 0
        while self._more():
            self._batch()
            batches += 1
        if self.failure is not None:
            raise self.failure
        if not batches and self.last is not None and not self.dry_run:
            self.submit(self.last)

    def _more(self) -> bool:
        if self.ahead is None and self.failure is None:
            try:
                self.ahead = next(self.items, None)
            except Exception as exc:       # the reading failed: what it gave is still written
                self.failure = exc
        return self.ahead is not None

    def _take(self, count: int) -> Item | None:
        """The next item, when a batch that holds ``count`` turns can take it."""
        if not self._more():
            return None
        item = self.ahead
        assert item is not None
        size = len(item) if isinstance(item, list) else 1
        if count and count + size > self.batch_size:
            return None
        self.ahead = None
        self.report.turns += size
        return item

    def _run(self, count: int) -> list[Item]:
        """The next items (up to ``RUN``) that a batch holding ``count`` turns can take."""
        run: list[Item] = []
        while count < self.batch_size and len(run) < RUN and (item := self._take(count)) is not None:
            run.append(item)
            count += len(item) if isinstance(item, list) else 1
        return run

    def _batch(self) -> None:
        taken: list[Item] = []      # a transaction run again (full map, stream moved on) takes these first

        def plan(tx: Tx, w: WriteTx | None) -> _Plan:
            batch = _Plan(self, tx, w)
            if taken:       # run again: the store may hold more now (a replicated node caught up meanwhile)
                self.known = {}
                batch.take(taken)
            while run := self._run(batch.count):
                taken.extend(run)
                batch.take(run)
            batch.finish()
            if w is not None and self.last is not None and not self._more() and self.failure is None:
                self.last(w)
            return batch
        if self.dry_run:
            with self.store.read() as tx:
                done = plan(tx, None)
        else:
            done = cast(_Plan, self.submit(lambda w: plan(w, w), bulk=self.bulk))
        for sid, keys in done.added.items():
            self.known[sid].update(keys)
        if not self.dry_run:     # a cache of committed state: keep only the sessions still being read
            self.known = {sid: self.known[sid] for sid in done.added}
        self.report.written += done.written
        self.report.present += done.present
        self.report.updated += done.updated
        if self.progress is not None:
            self.progress(self.report)

    def _message(self, turn: Turn, mid: str, added: dict[str, dict[str, str]]) -> Message:
        return self._written(turn, mid, added).message

    def _written(self, turn: Turn, mid: str, added: dict[str, dict[str, str]]) -> MessageWritten:
        """The event writing ``turn`` as message ``mid`` (built at once: :func:`eventstore.events.written`)."""
        sid = turn.session_id
        rels = []
        for rtype, key in turn.relations:
            source = import_id(sid, key)
            target = added[sid].get(source) or self.known[sid].get(source)
            if target is not None and target != mid:
                rels.append((rtype, target))
        meta = metadata(turn.tags, "long" if turn.kind == "semantic" else "short", turn.kind, _IMPORTANCE,
                        turn.tool_call_id, turn.summary, tuple(dict.fromkeys(rels)) if rels else (),
                        (turn.import_id,))
        event = written(mid, sid, turn.role, turn.content, turn.timestamp, turn.timestamp, 1, meta, self.principal)
        try:
            validation.message(event.message)
        except ValidationError as exc:
            raise ValidationError(f"an imported turn is not a valid message, {exc.message} "
                                  "(an importer's fault: nothing of its batch was written)") from None
        return event

    def _known(self, tx: Tx, session_id: str) -> dict[str, str]:
        """The import ids of the session's live messages, read once per run
        (with ``since``: of those written after that event, when they are fewer)."""
        known = self.known.get(session_id)
        if known is None:
            known = self.known[session_id] = {}
            for mid in self._candidates(tx, session_id):
                state = messages.get(tx, mid)
                for source in state.metadata.source_message_ids if state is not None else ():
                    if source.startswith(IMPORT_ID_PREFIX):
                        known[source] = mid
                        break
        return known

    def _candidates(self, tx: Tx, session_id: str) -> Iterable[str]:
        """The session's messages that may carry an import id of the turns to write."""
        if self.since is not None:
            entry = sessions.get(tx, session_id)
            if entry is None:
                return ()
            if self.store.last_sequence(tx) - self.since < entry.message_count:
                events = self.store.iter_events(tx, self.since + 1)
                return dict.fromkeys(event.message.message_id for _, event, _ in events
                                     if isinstance(event, MessageWritten) and event.message.session_id == session_id)
        return history.after(tx, session_id, None, 1 << 62)


def refuse_node(store: EventStore) -> None:
    """Refuse to write a replicated node's store in its own transactions: events
    there that the stream never saw would fork the node from it (the node would
    refuse every later write).  Such a store is written through its service."""
    with store.read() as tx:
        if meta.stream_position(tx.txn, tx.db("meta")) is not None:
            raise ValidationError("store: is a node of a replicated store (served with --replicate); an import "
                                  "there must go through the node's service, never into its files")


class _Plan:
    """One batch in its transaction: each new turn gets its id and (``w``
    given) its event as it comes.  A turn with a relation to a turn not met
    yet may be pointing at one later in the batch: from it on, the turns
    are held and appended at the end of the batch, when every id of the
    batch is known — the events are those of giving every turn its id
    first, then appending them all.

    A turn already imported is left alone, unless the source says its turns
    change (``Turn.updatable``: a memory graph's entities): then, when the
    message the source gives now differs from the one stored, an update
    event brings it up to date (its content and the fields the import
    sets; importance and tier stay as they are)."""

    def __init__(self, writer: Writer, tx: Tx, w: WriteTx | None) -> None:
        self.writer, self.tx, self.w = writer, tx, w
        self.added: dict[str, dict[str, str]] = {}    # session → import id → message id, this batch
        self.held: list[tuple[Turn, str, bool]] = []  # (turn, message id, an update)
        self.count = self.written = self.present = self.updated = 0

    def take(self, items: list[Item]) -> None:
        """Take items in turn: the same events as taking them one by one (ids
        are given in order in one step, and an item whose relation names a
        turn further on holds the events from there to the end of the
        batch, when every id of the batch is known)."""
        known_of, added = self.writer._known, self.added
        new: list[Turn] = []
        plans: list[tuple[int, list[tuple[Turn, str]]]] = []   # per item: its new turns, then its updates
        sid, known, mine = None, {}, {}                          # the last turn's session (turns come in runs)
        for item in items:
            turns = item if isinstance(item, list) else (item,)
            self.count += len(turns)
            first = len(new)
            changed: list[tuple[Turn, str]] = []
            for turn in turns:
                if turn.session_id != sid:
                    sid = turn.session_id
                    known = known_of(self.tx, sid)
                    mine = added.setdefault(sid, {})
                key = turn.import_id
                if key in known or key in mine:
                    if turn.updatable and key in known:
                        changed.append((turn, known[key]))
                    else:
                        self.present += 1
                    continue
                mine[key] = ""            # its id comes below
                new.append(turn)
            plans.append((len(new) - first, changed))
        self.written += len(new)
        ids.remember([t.import_id for t in new], [t.import_raw for t in new])   # the codec needs their bytes
        mids = (self.w.new_ids([t.timestamp for t in new]) if self.w is not None
                else [f"dry-run-{self.written - len(new) + n}" for n in range(len(new))])
        for turn, mid in zip(new, mids):
            added[turn.session_id][turn.import_id] = mid
        if not self.held and not any(changed for _, changed in plans) and not any(t.relations for t in new):
            if self.w is not None:      # the usual run: new turns only, none naming another (what follows does this)
                self._write([self.writer._written(turn, mid, added) for turn, mid in zip(new, mids)])
            return
        at, ready, held = 0, [], self.held       # ready: events to append now, in one step
        for count, changed in plans:
            if count == 1 and not changed:      # the usual item: one new turn
                turn = new[at]
                event = (turn, mids[at], False)
                at += 1
                if held:
                    held.append(event)
                elif turn.relations and self._ahead(turn):
                    held = self.held = [event]
                else:
                    ready.append(event)
                continue
            events = [(turn, mid, False) for turn, mid in zip(new[at:at + count], mids[at:at + count])]
            events += [(t, m, True) for t, m in changed]
            at += count
            if not held and any(turn.relations and self._ahead(turn) for turn, _, _ in events):
                held = self.held = events
            elif held:
                held.extend(events)
            else:
                ready.extend(events)
        self._append(ready)

    def _ahead(self, turn: Turn) -> bool:
        """Whether a relation of ``turn`` names a turn not met yet."""
        sid = turn.session_id
        return any(import_id(sid, key) not in self.added[sid] and import_id(sid, key) not in self.writer.known[sid]
                   for _, key in turn.relations)

    def _append(self, events: list[tuple[Turn, str, bool]]) -> None:
        """Append the events in turn (the written messages of a run in one step)."""
        run: list[MessageWritten] = []
        for turn, mid, update in events:
            if not update:
                if self.w is not None:
                    run.append(self.writer._written(turn, mid, self.added))
                continue
            if run:
                self._write(run)
                run = []
            self._update(turn, mid)
        self._write(run)

    def _write(self, run: list[MessageWritten]) -> None:
        if run and self.w is not None:
            self.w.append(run)

    def _update(self, turn: Turn, mid: str) -> None:
        """Bring the stored message up to date with ``turn`` (a dry run counts it)."""
        old = messages.get(self.tx, mid)
        now = self.writer._message(turn, mid, self.added)
        if old is None:
            self.present += 1
            return
        content = messages.load(self.tx, old).content
        meta = replace(old.metadata, tags=now.metadata.tags, memory_kind=now.metadata.memory_kind,
                       tool_call_id=now.metadata.tool_call_id, summary=now.metadata.summary,
                       relations=now.metadata.relations, source_message_ids=now.metadata.source_message_ids)
        if now.content == content and meta == old.metadata:
            self.present += 1
            return
        self.updated += 1
        if self.w is not None:
            self.w.append([MessageUpdated(mid, old.revision + 1, max(turn.timestamp, old.updated_at),
                                          now.content if now.content != content else None, meta,
                                          self.writer.principal)])

    def finish(self) -> None:
        self._append(self.held)
        self.held = []

__all__ = ["BATCH", "Writer"]
