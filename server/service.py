"""The application service: the seven tools' behaviour, with no MCP in sight.

Commands (write, update, delete) decide everything non-deterministic inside
the store's write transaction and append one event.  Views read the
projections in one short read transaction.  ``rebuild`` compacts the store
and excludes every other call while it runs.  The service remembers the last
storage failure (``last_error``) for health until a later write succeeds.

Every write — the tools', and an import's batches (:meth:`MemoryService.submit`)
— goes through one committer (:mod:`eventstore.committer`), chosen by whoever
builds the service: the group committer by default; with ``convmem serve
--replicate`` the replication package's (:func:`server.replication.committer_factory`),
which publishes each command's events to the stream before they commit,
applies other nodes' events as they come, makes a new stream generation on
``rebuild`` and reports the lag in health.  See docs/replication.md.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import replace

from eventstore.committer import Command, Committer, CommitterFactory
from eventstore.compaction import compact
from eventstore.errors import (
    ConflictError,
    ConvMemError,
    CorruptStoreError,
    NotFoundError,
    StoreIOError,
)
from eventstore.events import KINDS, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from eventstore.group_commit import group_committer
from eventstore.ids import to_bytes, to_str
from eventstore.store import EventStore, Tx, WriteTx
from projections import history as history_index
from projections import index as term_index
from projections import messages, relations, revisions, stats
from projections import sessions as session_index
from projections.index import IndexConfig
from projections.query import Filters
from projections.registry import Projector

from . import cursors, render, validation, views
from ._rwlock import RWLock
from .paths import default_store_path
from .principals import LOCAL, Principal
from .scope import Seen

log = logging.getLogger("convmem")


class MemoryService:
    def __init__(self, path: str, *, index_config: IndexConfig = term_index.DEFAULT,
                 committer: CommitterFactory = group_committer, **store_options) -> None:
        """``index_config``: the term index's knobs (tests use small ones); ``committer``:
        what every write goes through (default: a store of its own, group commit)."""
        self.path = path
        self.store = EventStore(path, Projector(index_config), **store_options)
        self.last_error = ""
        self._lock = RWLock()
        try:
            self.committer: Committer = committer(self.store, self._live_events, self._lock.exclusive)
        except BaseException:
            self.store.close()
            raise

    @property
    def replicated(self) -> Committer | None:
        """The committer when its writes go through a stream (a replicated node), else None."""
        return self.committer if self.committer.streamed else None

    def close(self) -> None:
        if self.committer.excludes_reads:
            self.committer.close()     # outside the lock: its writer thread takes it to replace the file
        with self._lock.exclusive():
            self.committer.close()
            self.store.close()

    # ------------------------------------------------------------- commands
    def submit(self, command: Command, *, bulk: bool = False):
        """``command`` in a durable commit, grouped with the other callers' writes of the moment
        (``bulk``: a batch of an import, in a transaction of its own), through this service's
        committer: the one way anything writes the store (a replicating committer excludes
        the reads itself when it replaces the file)."""
        with contextlib.nullcontext() if self.committer.excludes_reads else self._lock.shared():
            try:
                result = self.committer.submit(command, bulk=bulk)
            except (StoreIOError, CorruptStoreError) as exc:
                self.last_error = exc.message
                raise
        self.last_error = ""
        return result

    def write_message(self, session_id: str, role: str, content: str, metadata: Metadata,
                      *, principal: Principal = LOCAL) -> dict:
        principal.check_session_write(session_id)
        validation.given(session_id, role, content, metadata)      # the id, clock and revision are valid

        def command(w: WriteTx) -> Message:
            now = w.now_ms()
            msg = Message(w.new_ids([now])[0], session_id, role, content, now, now, 1, metadata)
            w.append([MessageWritten(msg, principal.name)])
            return msg
        msg = self.submit(command)
        if not principal.limited:
            return {"status": "OK", "message": render.message(msg)}
        with self._read(synced=False) as tx:
            return {"status": "OK", "message": Seen(tx, principal).render(msg)}

    def update_message(self, message_id: str, content: str | None, patch: dict,
                       expected_revision: int | None, *, principal: Principal = LOCAL) -> dict:
        principal.check_write("message_id")
        validation.changes(content, patch)      # the stored fields and the new clock and revision are valid

        def command(w: WriteTx) -> tuple[bool, Message]:
            old = self._live(w, message_id, expected_revision, principal)
            msg = messages.load(w, old)
            meta = replace(old.metadata, **views.keep_unseen(Seen(w, principal), old.metadata, patch))
            new_content = content if content is not None and content != msg.content else None
            if new_content is None and meta == old.metadata:
                return False, msg
            if principal.limited:       # its lists gained what it does not see: known only here
                validation.metadata(meta)
            updated_at = max(w.now_ms(), old.updated_at)
            new = replace(msg, content=msg.content if new_content is None else new_content,
                          metadata=meta, revision=old.revision + 1, updated_at=updated_at)
            w.append([MessageUpdated(message_id, old.revision + 1, updated_at, new_content, meta, principal.name)])
            return True, new
        changed, msg = self.submit(command)
        if not principal.limited:
            return {"status": "OK", "changed": changed, "message": render.message(msg)}
        with self._read(synced=False) as tx:
            return {"status": "OK", "changed": changed, "message": Seen(tx, principal).render(msg)}

    def delete_message(self, message_id: str, session_id: str | None, *, principal: Principal = LOCAL) -> dict:
        principal.check_write("message_id")

        def command(w: WriteTx) -> bool:
            state = messages.get(w, message_id)
            if state is None or (session_id is not None and state.session_id != session_id) \
                    or not principal.sees(state.session_id):
                return False
            w.append([MessageDeleted(message_id, principal.name, w.now_ms())])
            return True
        return {"status": "OK" if self.submit(command) else "NOT_FOUND"}

    def restore_messages(self, batch: Sequence[Message], principals: Sequence[str | None] | None = None,
                         default_principal: str | None = LOCAL.name, *, checked: bool = False) -> int:
        """Write ``batch`` exactly as given — ids, timestamps, revisions,
        ``updated_at``, metadata — in one durable transaction (one
        ``MessageWritten`` event each, as compaction writes a message's current
        state); the number written.  A message whose id is live already is
        skipped when identical and refused (``CONFLICT``, nothing written)
        otherwise, so a re-run adds only what is missing.  New ids stay after
        every id given so far.  For ``convmem import`` (messages read with
        :func:`server.archive.read`).  ``principals``: each message's principal
        as the archive gives it (None, or missing: ``default_principal``).
        ``checked``: every message was checked with :func:`validation.message`
        already (else it is here, before the commit)."""
        given = list(principals) if principals is not None else [None] * len(batch)
        if not checked:
            for msg in batch:           # before the commit: none of it under the commit lock
                validation.message(msg)

        def command(w: WriteTx) -> int:
            written, top = 0, b""
            for msg, by in zip(batch, given):
                state = messages.get(w, msg.message_id)
                if state is not None:
                    if messages.load(w, state) != msg:
                        raise ConflictError("message_id: a live message has this id and other contents")
                    continue
                w.append([MessageWritten(msg, by or default_principal)])
                top, written = max(top, to_bytes(msg.message_id)), written + 1
            self.store.raise_last_id(w, top)
            return written
        return self.submit(command)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[tuple[int, Iterator[Message]]]:
        """The number of live messages and every one of them in id order, all
        from one read transaction (open until the block ends: for export)."""
        with self.snapshot_events() as (count, events):
            yield count, (event.message for event in events)

    @contextlib.contextmanager
    def snapshot_events(self) -> Iterator[tuple[int, Iterator[MessageWritten]]]:
        """:meth:`snapshot` as events, each with the principal of the message's current revision."""
        with self._read() as tx:
            yield self._live_events(tx)

    @staticmethod
    def _live(tx: Tx, message_id: str, expected_revision: int | None,
              principal: Principal = LOCAL) -> messages.State:
        state = messages.get(tx, message_id)
        if state is None:
            raise NotFoundError("message_id: no live message has this id")
        principal.check_session_read(state.session_id)
        if expected_revision is not None and expected_revision != state.revision:
            raise ConflictError(f"expected_revision: does not match the message's current revision ({state.revision})")
        return state

    # ---------------------------------------------------------------- reads
    @contextlib.contextmanager
    def _read(self, synced: bool = True) -> Iterator[Tx]:
        """Shared lock + one short read transaction; storage failures are remembered.
        Replicated with ``sync_reads``, a read (``synced``) first waits until this node
        has applied what the stream held when it began."""
        if synced:
            self.committer.wait_applied()
        with self._lock.shared():
            try:
                with self.store.read() as tx:
                    yield tx
            except (StoreIOError, CorruptStoreError) as exc:
                self.last_error = exc.message
                raise

    def history(self, session_id: str, limit: int, cursor: str | None, *, principal: Principal = LOCAL) -> dict:
        with self._read() as tx:
            secret = self.store.secret(tx)
            start = cursors.decode(secret, cursor, "history", session_id) if cursor is not None else None
            if not principal.sees(session_id):       # as a session without live messages
                return {"status": "OK", "history": []}
            seen = Seen(tx, principal)
            load = lambda mid: seen.render(messages.load(tx, messages.get(tx, mid)))
            pairs, more = render.page(history_index.after(tx, session_id, start, limit + 1), load, limit)
            page = [item for _, item in pairs]
            out: dict = {"status": "OK", "history": page}
            if more:
                out["nextCursor"] = cursors.encode(secret, "history", session_id, page[-1]["message_id"])
            return out

    def content_range(self, message_id: str, offset: int, limit: int,
                      expected_revision: int | None, *, principal: Principal = LOCAL) -> dict:
        with self._read() as tx:
            state = self._live(tx, message_id, expected_revision, principal)
            data = messages.content(tx, state).encode("utf-8", "surrogatepass")
        end = views.range_end(data, offset, limit)
        return {"status": "OK", "content_range": {
            "message_id": message_id, "revision": state.revision, "total_bytes": len(data),
            "content_offset": offset, "next_content_offset": end, "complete": end == len(data),
            "content": data[offset:end].decode("utf-8", "surrogatepass")}}

    def context(self, message_id: str, before: int, after: int, depth: int,
                types: frozenset[str], *, principal: Principal = LOCAL) -> dict:
        with self._read() as tx:
            state = self._live(tx, message_id, None, principal)
            walk = views.ContextWalk(Seen(tx, principal))
            focal = walk.take(message_id)
            nearest_first = reversed(history_index.before(tx, state.session_id, message_id, before))
            older = [walk.take(m) for m in nearest_first][::-1]
            newer = [walk.take(m) for m in history_index.after(tx, state.session_id, message_id, after)]
            rels = walk.relations(message_id, depth, types)
            entry = session_index.get(tx, state.session_id)
        return {"status": "OK", "message": focal,
                "chronological_context": {"before": [m for m in older if m is not None],
                                          "after": [m for m in newer if m is not None]},
                "relations": rels,
                "session": {"session_id": state.session_id, "message_count": entry[0] if entry else 0},
                "truncated": walk.truncated}

    def sessions(self, limit: int, cursor: str | None, *, principal: Principal = LOCAL) -> dict:
        with self._read() as tx:
            secret = self.store.secret(tx)
            start = bytes.fromhex(cursors.decode(secret, cursor, "sessions", "")) if cursor is not None else None
            listed = session_index.ordered(tx, start)
            if principal.limited:
                listed = (ks for ks in listed if principal.sees(ks[1]))
            pairs, more = render.page(listed, lambda ks: self._session_entry(tx, ks[1]), limit)
            page = [item for _, item in pairs]
            out: dict = {"status": "OK", "sessions": page}
            if more:
                out["nextCursor"] = cursors.encode(secret, "sessions", "", pairs[-1][0][0].hex())
            return out

    @staticmethod
    def _session_entry(tx: Tx, sid: str) -> dict:
        entry = session_index.get(tx, sid)
        if entry is None:
            raise CorruptStoreError("a session is listed in the session order but has no record")
        count, kinds, started, last = entry
        ends = history_index.first_last(tx, sid)
        if ends is None:
            raise CorruptStoreError("a session is listed whose history is empty")
        latest = messages.required(messages.get(tx, ends[1]))
        summary = latest.metadata.summary or messages.content(tx, latest)     # read only when needed
        return {"session_id": sid, "message_count": count, "kind_counts": dict(zip(KINDS, kinds)),
                "representative_summary": summary, "started_at": started, "last_message_at": last}

    def revisions(self, message_id: str, *, principal: Principal = LOCAL) -> dict:
        """One live message's revisions, oldest first (:mod:`projections.revisions`)."""
        with self._read() as tx:
            state = self._live(tx, message_id, None, principal)
            return {"status": "OK", "message_id": message_id, "session_id": state.session_id,
                    "revision": state.revision, "revisions": revisions.of(tx, state)}

    def search(self, query: str, flt: Filters, context_size: int, limit: int,
               *, boost: bool = True, superseded: str = "include", principal: Principal = LOCAL) -> dict:
        """``boost=False`` ranks by the own fields alone (for benchmarks); ``superseded``:
        ``include``, ``exclude`` or ``only`` the messages a live message supersedes."""
        with self._read() as tx:
            seen = Seen(tx, principal)
            if flt.session_id is not None and not seen.session(flt.session_id):
                return {"status": "OK", "results": []}
            hits = views.hits(seen, query, flt, limit, boost, superseded)
            budget, results = render.Budget(), list[dict]()
            for hit, by in hits:
                item = views.result(seen, hit)
                if by is not None:
                    item["superseded_by"] = by
                if context_size:
                    item["context_preview"] = {"before": [], "after": []}
                if not budget.take(item) and results:
                    break
                if context_size:
                    views.preview(seen, item, context_size, budget)
                results.append(item)
        return {"status": "OK", "results": results}

    def written_per_day(self, days: int, *, principal: Principal = LOCAL) -> tuple[dict[int, int], int]:
        """Live messages by UTC day of their write time, for the ``days`` days up to the newest
        message's, and how many are older (:func:`projections.messages.per_day`); whole-store
        counts, so refused to a limited principal, as health is."""
        principal.check_every_session("written_per_day: counts the whole store and")
        with self._read() as tx:
            counts = messages.per_day(tx, days)
            return counts, stats.read(tx)["active"] - sum(counts.values())

    # -------------------------------------------------------- maintenance
    def rebuild(self, *, principal: Principal = LOCAL) -> dict:
        principal.check_write("rebuild_index")
        principal.check_every_session("rebuild_index:")
        try:
            result = self.committer.rebuild()
            if result is None:
                with self._lock.exclusive():
                    result = compact(self.store, self._live_events)
        except (StoreIOError, CorruptStoreError) as exc:
            self.last_error = exc.message
            raise
        self.last_error = ""
        return {"status": "OK", **result}

    @staticmethod
    def _live_events(tx: Tx) -> tuple[int, Iterator[MessageWritten]]:
        def events() -> Iterator[MessageWritten]:
            with tx.txn.cursor(db=tx.db(messages.DB)) as cur:
                for key in cur.iternext(values=False):
                    raw_id = bytes(key)
                    mid = to_str(raw_id)
                    state = messages.required(messages.get_raw_id(tx, raw_id, mid))
                    yield MessageWritten(messages.load(tx, state), revisions.last_principal(tx, state))
        return stats.read(tx)["active"], events()

    def health(self, *, principal: Principal = LOCAL) -> dict:
        principal.check_every_session("get_system_health: reports on the whole store and")
        with self._read(synced=False) as tx:
            st = stats.read(tx)
            size = lambda *names: sum(self.store.db_bytes(tx, n) for n in names)
            estimate = {
                "store_entries_bytes": size(messages.DB, term_index.DOCS),
                "body_bytes": st["body_bytes"], "metadata_bytes": st["metadata_bytes"],
                "search_index_bytes": size(*(n for n in term_index.SPECS if n != term_index.DOCS)),
                "history_index_bytes": size(*history_index.SPECS, *session_index.SPECS),
                "relation_index_bytes": size(*relations.SPECS)}
            last = self.store.last_sequence(tx)
            report = {
                "status": "DEGRADED" if self.last_error else "OK",
                "format_version": self.store.format_version(tx),
                "log_size": size("events"), "snapshot_size": size(*Projector.db_specs),
                "active_messages": st["active"], "session_count": session_index.count(tx),
                "deleted_messages": st["deleted"], "last_sequence": last,
                "update_records": st["updates"], "dead_bytes": st["dead_bytes"],
                "memory_estimate": {"total_bytes": sum(estimate.values()), **estimate},
                "io": self.store.io_counters(tx.txn), "recovered_tail": self.store.recovered_tail,
                "snapshot_valid": self.store.watermark(tx) == last, "last_error": self.last_error}
        status = self.committer.status()
        if status is not None:
            report["replication"] = status
        if self.committer.refused:        # it can never write: say so even before a write tries
            report.update(status="DEGRADED", last_error=self.last_error or self.committer.refused)
        return report




__all__ = ["MemoryService", "ConvMemError", "default_store_path"]
