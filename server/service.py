"""The application service: the seven tools' behaviour, with no MCP in sight.

Commands (write, update, delete) decide everything non-deterministic inside
the store's write transaction and append one event.  Views read the
projections in one short read transaction.  ``rebuild`` compacts the store
and excludes every other call while it runs.  The service remembers the last
storage failure (``last_error``) for health until a later write succeeds.

With ``replication`` (``convmem serve --replicate``) the writes go through a
:class:`~server.replication.committer.ReplicatedCommitter` instead of the
group committer: published to the stream before they commit, other nodes'
events applied as they come; ``rebuild`` makes a new stream generation; health
reports the lag.  See docs/replication.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from eventstore.compaction import compact
from eventstore.errors import (
    ConflictError,
    ConvMemError,
    CorruptStoreError,
    NotFoundError,
    StoreIOError,
    ValidationError,
)
from eventstore.events import KINDS, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from eventstore.group_commit import GroupCommitter
from eventstore.ids import to_bytes, to_str
from eventstore.store import EventStore, Tx, WriteTx
from projections import history as history_index
from projections import index as term_index
from projections import messages, relations, stats
from projections import sessions as session_index
from projections.index import IndexConfig
from projections.query import Filters
from projections.registry import Projector

from . import cursors, render
from ._rwlock import RWLock
from .replication import Settings as ReplicationSettings

if TYPE_CHECKING:
    from projections.search import Hit

    from .replication.committer import ReplicatedCommitter

log = logging.getLogger("convmem")
CONTEXT_CAP = 50


class MemoryService:
    def __init__(self, path: str, *, index_config: IndexConfig = term_index.DEFAULT,
                 replication: ReplicationSettings | None = None, **store_options) -> None:
        """``index_config``: the term index's knobs (tests use small ones); ``replication``:
        where the stream is (None: a store of its own)."""
        self.path = path
        self.store = EventStore(path, Projector(index_config), **store_options)
        self.last_error = ""
        self._lock = RWLock()
        self.replication = replication
        self.replicated: ReplicatedCommitter | None = None
        self.committer: GroupCommitter | ReplicatedCommitter
        if replication is None:
            self.committer = GroupCommitter(self.store)
            return
        from .replication import open_committer
        try:
            self.committer = self.replicated = open_committer(self.store, replication, self._live_events,
                                                              self._lock.exclusive)
        except BaseException:
            self.store.close()
            raise

    def close(self) -> None:
        if self.replicated is not None:
            self.replicated.close()     # outside the lock: its writer thread takes it to replace the file
        with self._lock.exclusive():
            self.committer.close()
            self.store.close()

    # ------------------------------------------------------------- commands
    def _write(self, command):
        """``command`` in a durable commit, grouped with the other callers' writes of the moment
        (replicated: the committer excludes the reads itself when it replaces the file)."""
        with self._lock.shared() if self.replicated is None else contextlib.nullcontext():
            try:
                result = self.committer.submit(command)
            except (StoreIOError, CorruptStoreError) as exc:
                self.last_error = exc.message
                raise
        self.last_error = ""
        return result

    def write_message(self, session_id: str, role: str, content: str, metadata: Metadata) -> dict:
        def command(w: WriteTx) -> Message:
            now = w.now_ms()
            msg = Message(w.new_id(now), session_id, role, content, now, now, 1, metadata)
            w.append(MessageWritten(msg))
            return msg
        return {"status": "OK", "message": render.message(self._write(command))}

    def update_message(self, message_id: str, content: str | None, patch: dict,
                       expected_revision: int | None) -> dict:
        def command(w: WriteTx) -> tuple[bool, Message]:
            old = self._live(w, message_id, expected_revision)
            msg = messages.load(w, old)
            meta = replace(old.metadata, **patch)
            new_content = content if content is not None and content != msg.content else None
            if new_content is None and meta == old.metadata:
                return False, msg
            updated_at = max(w.now_ms(), old.updated_at)
            w.append(MessageUpdated(message_id, old.revision + 1, updated_at, new_content, meta))
            return True, replace(msg, content=msg.content if new_content is None else new_content,
                                 metadata=meta, revision=old.revision + 1, updated_at=updated_at)
        changed, msg = self._write(command)
        return {"status": "OK", "changed": changed, "message": render.message(msg)}

    def delete_message(self, message_id: str, session_id: str | None) -> dict:
        def command(w: WriteTx) -> bool:
            state = messages.get(w, message_id)
            if state is None or (session_id is not None and state.session_id != session_id):
                return False
            w.append(MessageDeleted(message_id))
            return True
        return {"status": "OK" if self._write(command) else "NOT_FOUND"}

    def restore_messages(self, batch: Sequence[Message]) -> int:
        """Write ``batch`` exactly as given — ids, timestamps, revisions,
        ``updated_at``, metadata — in one durable transaction (one
        ``MessageWritten`` event each, as compaction writes a message's current
        state); the number written.  A message whose id is live already is
        skipped when identical and refused (``CONFLICT``, nothing written)
        otherwise, so a re-run adds only what is missing.  New ids stay after
        every id given so far.  For ``convmem import`` (validate first:
        :func:`server.archive.message_from_object`)."""
        def command(w: WriteTx) -> int:
            written, top = 0, self.store.carried_meta(w).get(b"last_id", b"")
            for msg in batch:
                state = messages.get(w, msg.message_id)
                if state is not None:
                    if messages.load(w, state) != msg:
                        raise ConflictError("message_id: a live message has this id and other contents")
                    continue
                w.append(MessageWritten(msg))
                top, written = max(top, to_bytes(msg.message_id)), written + 1
            if top:
                self.store.restore_meta(w, {b"last_id": top})
            return written
        return self._write(command)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[tuple[int, Iterator[Message]]]:
        """The number of live messages and every one of them in id order, all
        from one read transaction (open until the block ends: for export)."""
        with self._read() as tx:
            count, events = self._live_events(tx)
            yield count, (event.message for event in events)

    @staticmethod
    def _live(tx: Tx, message_id: str, expected_revision: int | None) -> messages.State:
        state = messages.get(tx, message_id)
        if state is None:
            raise NotFoundError("message_id: no live message has this id")
        if expected_revision is not None and expected_revision != state.revision:
            raise ConflictError(f"expected_revision: does not match the message's current revision ({state.revision})")
        return state

    # ---------------------------------------------------------------- reads
    @contextlib.contextmanager
    def _read(self, synced: bool = True) -> Iterator[Tx]:
        """Shared lock + one short read transaction; storage failures are remembered.
        Replicated with ``sync_reads``, a read (``synced``) first waits until this node
        has applied what the stream held when it began."""
        if synced and self.replicated is not None and self.replicated.settings.sync_reads:
            self.replicated.sync()
        with self._lock.shared():
            try:
                with self.store.read() as tx:
                    yield tx
            except (StoreIOError, CorruptStoreError) as exc:
                self.last_error = exc.message
                raise

    def history(self, session_id: str, limit: int, cursor: str | None) -> dict:
        with self._read() as tx:
            secret = self.store.secret(tx)
            start = cursors.decode(secret, cursor, "history", session_id) if cursor is not None else None
            load = lambda mid: render.message(messages.load(tx, messages.get(tx, mid)))
            pairs, more = render.page(history_index.after(tx, session_id, start, limit + 1), load, limit)
            page = [item for _, item in pairs]
            out: dict = {"status": "OK", "history": page}
            if more:
                out["nextCursor"] = cursors.encode(secret, "history", session_id, page[-1]["message_id"])
            return out

    def content_range(self, message_id: str, offset: int, limit: int,
                      expected_revision: int | None) -> dict:
        with self._read() as tx:
            state = self._live(tx, message_id, expected_revision)
            data = messages.content(tx, state).encode("utf-8", "surrogatepass")
        end = _range_end(data, offset, limit)
        return {"status": "OK", "content_range": {
            "message_id": message_id, "revision": state.revision, "total_bytes": len(data),
            "content_offset": offset, "next_content_offset": end, "complete": end == len(data),
            "content": data[offset:end].decode("utf-8", "surrogatepass")}}

    def context(self, message_id: str, before: int, after: int, depth: int,
                types: frozenset[str]) -> dict:
        with self._read() as tx:
            state = self._live(tx, message_id, None)
            walk = _ContextWalk(tx)
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

    def sessions(self, limit: int, cursor: str | None) -> dict:
        with self._read() as tx:
            secret = self.store.secret(tx)
            start = bytes.fromhex(cursors.decode(secret, cursor, "sessions", "")) if cursor is not None else None
            pairs, more = render.page(session_index.ordered(tx, start),
                                      lambda ks: self._session_entry(tx, ks[1]), limit)
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

    def search(self, query: str, flt: Filters, context_size: int, limit: int,
               *, boost: bool = True) -> dict:
        """``boost=False`` ranks by the own fields alone (for benchmarks)."""
        from projections import search as search_index  # the ranker loads numpy: not at start-up
        with self._read() as tx:
            hits = search_index.search(tx, query, flt, limit, options=search_index.Options(context=boost))
            budget, results = render.Budget(), list[dict]()
            for hit in hits:
                item = self._result(tx, hit)
                if context_size:
                    item["context_preview"] = {"before": [], "after": []}
                if not budget.take(item) and results:
                    break
                if context_size:
                    self._preview(tx, item, context_size, budget)
                results.append(item)
        return {"status": "OK", "results": results}

    @staticmethod
    def _result(tx: Tx, hit: Hit) -> dict:
        state = messages.required(messages.get(tx, hit.doc.message_id))
        item = render.message(messages.load(tx, state))
        item["score"] = hit.score
        item["score_breakdown"] = hit.breakdown
        item["matched_fields"] = [f for f in term_index.FIELDS if hit.breakdown[f] > 0]
        item["relation_count"] = relations.count(tx, state.message_id)
        return item

    @staticmethod
    def _preview(tx: Tx, item: dict, size: int, budget: render.Budget) -> None:
        """Fill ``context_preview`` nearest neighbours first, as far as the budget allows."""
        sid, mid = item["session_id"], item["message_id"]
        preview = item["context_preview"]
        for side, ids in (("before", reversed(history_index.before(tx, sid, mid, size))),
                          ("after", history_index.after(tx, sid, mid, size))):
            for other in ids:
                neighbour = render.message(messages.load(tx, messages.get(tx, other)))
                if not budget.take(neighbour):
                    break
                preview[side].append(neighbour)
        preview["before"].reverse()

    # -------------------------------------------------------- maintenance
    def rebuild(self) -> dict:
        if self.replicated is not None:
            return self._rebuild_replicated(self.replicated)
        with self._lock.exclusive():
            try:
                result = compact(self.store, self._live_events)
            except (StoreIOError, CorruptStoreError) as exc:
                self.last_error = exc.message
                raise
        self.last_error = ""
        return {"status": "OK", **result}

    def _rebuild_replicated(self, replicated: ReplicatedCommitter) -> dict:
        try:
            result = replicated.rebuild()
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
                    state = messages.get_raw_id(tx, raw_id, to_str(raw_id))
                    yield MessageWritten(messages.load(tx, state))
        return stats.read(tx)["active"], events()

    def health(self) -> dict:
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
        if self.replicated is not None:
            report["replication"] = self.replicated.status()
            if self.replicated.refused:        # it can never write: say so even before a write tries
                report.update(status="DEGRADED", last_error=self.last_error or self.replicated.refused)
        return report


class _ContextWalk:
    """Loads messages for the context view within the 50-message cap and the budget."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.count = 0
        self.budget = render.Budget()
        self.truncated = False

    def take(self, message_id: str, wrapper: dict | None = None) -> dict | None:
        """The message, counted against the cap and the budget (with the relation
        entry ``wrapper`` around it, when it is one); None when it does not fit."""
        if self.count >= CONTEXT_CAP:
            self.truncated = True
            return None
        item = render.message(messages.load(self.tx, messages.get(self.tx, message_id)))
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
                    if rtype not in types or other in seen:
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


def _range_end(data: bytes, offset: int, limit: int) -> int:
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


def default_store_path() -> str:
    env = os.environ.get("CONVMEM_STORE")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "convmem")


__all__ = ["MemoryService", "ConvMemError", "default_store_path"]
