"""The store against a plain in-memory model of docs/tools.md, under random command sequences.

Rules: write, update (no-ops and revision conflicts included), delete (session
guard included), the four read views, search, clock steps, close/reopen,
replay and compaction.  Invariants: the health counters agree with the model
after every step; the rules that read compare whole views with the model;
the sessions view agrees with it; replay reproduces the live read models byte
for byte.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, replace

import pytest
from helpers import Clock
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from strategies import canonical_ids, contents, metadata, open_service, patches, roles, session_ids, unique_word

from eventstore.errors import ConflictError, NotFoundError
from eventstore.events import KINDS, RELATION_TYPES, Metadata
from projections.index import IndexConfig
from projections.search import Filters
from tools.replay import dump_projections


@dataclass(frozen=True)
class Msg:
    message_id: str
    session_id: str
    role: str
    content: str
    word: str                   # the unique word its current content holds
    timestamp: int
    updated_at: int
    revision: int
    metadata: Metadata


def rendered(m: Msg) -> dict:
    """The message object (docs/tools.md §The message object), built from the model."""
    meta = m.metadata
    md = {"tags": list(meta.tags), "memory_tier": meta.memory_tier, "memory_kind": meta.memory_kind,
          "importance": meta.importance,
          "relations": [{"type": t, "message_id": i} for t, i in meta.relations],
          "source_message_ids": list(meta.source_message_ids)}
    if meta.tool_call_id is not None:
        md["tool_call_id"] = meta.tool_call_id
    if meta.summary:
        md["summary"] = meta.summary
    return {"message_id": m.message_id, "session_id": m.session_id, "timestamp": m.timestamp,
            "role": m.role, "content": m.content, "revision": m.revision,
            "updated_at": m.updated_at, "metadata": md}


# merge pending search records every 3 writes, cut lists every ~4 docnos
SMALL_INDEX = IndexConfig(merge_at=3, chunk=4)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="convmem-stateful-")
        self.path = self.dir + "/store"
        self.clock = Clock(now=1_720_843_200_000, step=0)
        self.svc = open_service(self.path, self.clock, seed=11, index_config=SMALL_INDEX)
        self.live: dict[str, Msg] = {}          # id → current state, in creation order
        self.deleted: dict[str, Msg] = {}
        self.words = 0
        self.events = 0                         # last_sequence
        self.writes = 0                         # io.write_calls
        self.updates = 0                        # update records since the last compaction
        self.deletes = 0

    def teardown(self) -> None:
        try:
            self.check_replay_equals_live()
        finally:
            self.svc.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # --------------------------------------------------------------- model
    def new_word(self) -> str:
        self.words += 1
        return unique_word(self.words)

    def known(self) -> list[str]:
        return [*self.live, *self.deleted]

    def session(self, sid: str) -> list[Msg]:
        return [m for m in self.live.values() if m.session_id == sid]

    def expected_sessions(self) -> list[dict]:
        out = []
        for sid in {m.session_id for m in self.live.values()}:
            msgs = self.session(sid)
            kinds = {k: 0 for k in KINDS}
            for m in msgs:
                kinds[m.metadata.memory_kind] += 1
            out.append({"session_id": sid, "message_count": len(msgs), "kind_counts": kinds,
                        "representative_summary": msgs[-1].metadata.summary or msgs[-1].content,
                        "started_at": msgs[0].timestamp, "last_message_at": msgs[-1].timestamp})
        return sorted(out, key=lambda s: (s["started_at"], s["session_id"]))

    def counted_write(self) -> None:
        self.events += 1
        self.writes += 1

    # --------------------------------------------------------------- rules
    @rule(delta=st.sampled_from([1, 1, 7, 1000, -3, -60_000]))
    def step_clock(self, delta: int) -> None:
        self.clock.now += delta

    @rule(data=st.data(), session=session_ids, role=roles)
    def write(self, data, session: str, role: str) -> None:
        word = self.new_word()
        content = data.draw(contents(word), label="content")
        meta = data.draw(metadata(self.known()), label="metadata")
        got = self.svc.write_message(session, role, content, meta)["message"]
        assert all(got["message_id"] > other for other in self.known())
        msg = Msg(got["message_id"], session, role, content, word, self.clock.now, self.clock.now, 1, meta)
        assert got == rendered(msg)
        self.live[msg.message_id] = msg
        self.counted_write()

    @precondition(lambda self: self.live)
    @rule(data=st.data(), change_content=st.booleans(), revision=st.sampled_from(["none", "right", "wrong"]))
    def update(self, data, change_content: bool, revision: str) -> None:
        old = self.live[data.draw(st.sampled_from(list(self.live)), label="target")]
        word = self.new_word() if change_content else old.word
        content = data.draw(contents(word) | st.just(old.content), label="content") if change_content else None
        if content == old.content:
            word = old.word
        patch = data.draw(patches(self.known()), label="patch")
        expected = {"none": None, "right": old.revision, "wrong": old.revision + 1}[revision]
        before = self.svc.health()
        if revision == "wrong":
            with pytest.raises(ConflictError):
                self.svc.update_message(old.message_id, content, patch, expected)
            assert self.svc.health() == before
            return
        result = self.svc.update_message(old.message_id, content, patch, expected)
        meta = replace(old.metadata, **patch)
        if (content is None or content == old.content) and meta == old.metadata:
            assert result["changed"] is False and result["message"] == rendered(old)
            assert self.svc.health() == before
            return
        new = replace(old, content=content if content is not None else old.content, word=word,
                      metadata=meta, revision=old.revision + 1,
                      updated_at=max(self.clock.now, old.updated_at))
        assert result["changed"] is True and result["message"] == rendered(new)
        self.live[new.message_id] = new
        self.counted_write()
        self.updates += 1

    @precondition(lambda self: self.deleted)
    @rule(data=st.data())
    def update_a_deleted_message_is_not_found(self, data) -> None:
        target = data.draw(st.sampled_from(list(self.deleted)))
        with pytest.raises(NotFoundError):
            self.svc.update_message(target, "new text", {}, None)

    @rule(data=st.data(), guard=st.sampled_from(["none", "right", "wrong"]))
    def delete(self, data, guard: str) -> None:
        target = data.draw(st.sampled_from(self.known()) | canonical_ids if self.known() else canonical_ids,
                           label="target")
        msg = self.live.get(target)
        session = {"none": None, "right": msg.session_id if msg else "s1", "wrong": "no such session"}[guard]
        before = self.svc.health()
        result = self.svc.delete_message(target, session)
        if msg is None or guard == "wrong":
            assert result["status"] == "NOT_FOUND"
            assert self.svc.health() == before
            return
        assert result["status"] == "OK"
        self.deleted[target] = self.live.pop(target)
        self.counted_write()
        self.deletes += 1

    @rule(session=session_ids, limit=st.integers(1, 4))
    def history_pages_match_the_model(self, session: str, limit: int) -> None:
        got, cursor = [], None
        while True:
            page = self.svc.history(session, limit, cursor)
            assert len(page["history"]) <= limit
            got += page["history"]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert got == [rendered(m) for m in self.session(session)]

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def content_matches_the_model(self, data) -> None:
        msg = self.live[data.draw(st.sampled_from(list(self.live)))]
        got = self.svc.content_range(msg.message_id, 0, 65536, msg.revision)["content_range"]
        assert got["content"] == msg.content and got["complete"] is True
        assert got["total_bytes"] == len(msg.content.encode("utf-8"))
        with pytest.raises(ConflictError):
            self.svc.content_range(msg.message_id, 0, 10, msg.revision + 1)

    @precondition(lambda self: self.deleted)
    @rule(data=st.data())
    def reads_of_a_deleted_message_are_not_found(self, data) -> None:
        target = data.draw(st.sampled_from(list(self.deleted)))
        with pytest.raises(NotFoundError):
            self.svc.content_range(target, 0, 10, None)
        with pytest.raises(NotFoundError):
            self.svc.context(target, 1, 1, 1, frozenset(RELATION_TYPES))

    @precondition(lambda self: self.live)
    @rule(data=st.data(), before=st.integers(0, 3), after=st.integers(0, 3))
    def context_matches_the_model(self, data, before: int, after: int) -> None:
        msg = self.live[data.draw(st.sampled_from(list(self.live)))]
        got = self.svc.context(msg.message_id, before, after, 1, frozenset(RELATION_TYPES))
        ids = [m.message_id for m in self.session(msg.session_id)]
        at = ids.index(msg.message_id)
        assert got["message"] == rendered(msg)
        assert [m["message_id"] for m in got["chronological_context"]["before"]] == ids[max(0, at - before):at]
        assert [m["message_id"] for m in got["chronological_context"]["after"]] == ids[at + 1:at + 1 + after]
        assert got["session"] == {"session_id": msg.session_id, "message_count": len(ids)}
        edges: dict[str, set] = {}
        for t, other in msg.metadata.relations:
            edges.setdefault(other, set()).add((t, "outgoing"))
        for m in self.live.values():
            for t, other in m.metadata.relations:
                if other == msg.message_id:
                    edges.setdefault(m.message_id, set()).add((t, "incoming"))
        edges.pop(msg.message_id, None)
        seen = []
        for rel in got["relations"]:
            other = rel["message_id"] if "status" in rel else rel["message"]["message_id"]
            seen.append(other)
            assert (rel["type"], rel["direction"]) in edges[other] and rel["depth"] == 1
            assert ("status" in rel) == (other not in self.live)
            if other in self.live:
                assert rel["message"] == rendered(self.live[other])
        assert sorted(seen) == sorted(edges)

    @rule(data=st.data())
    def search_finds_live_messages_by_their_unique_word_and_never_deleted_ones(self, data) -> None:
        if self.deleted:
            gone = self.deleted[data.draw(st.sampled_from(list(self.deleted)))]
            found = self.svc.search(gone.word, Filters(), 0, 100)["results"]
            assert gone.message_id not in {r["message_id"] for r in found}
        if self.live:
            msg = self.live[data.draw(st.sampled_from(list(self.live)))]
            found = self.svc.search(msg.word, Filters(), 0, 100)["results"]
            assert msg.message_id in {r["message_id"] for r in found}
            assert {r["message_id"] for r in found} <= set(self.live)

    @rule()
    def close_and_reopen(self) -> None:
        before = self.svc.health()
        self.svc.close()
        self.svc = open_service(self.path, self.clock, seed=12, index_config=SMALL_INDEX)
        assert self.svc.health() == before

    @rule()
    def replay_equals_live(self) -> None:
        self.check_replay_equals_live()

    @rule()
    def compact(self) -> None:
        before = self.svc.health()
        result = self.svc.rebuild()
        assert result["messages_indexed"] == len(self.live)
        self.updates = self.deletes = 0
        after = self.svc.health()
        assert after["io"]["replace_calls"] == before["io"]["replace_calls"] + 1
        assert after["dead_bytes"] == 0

    # ---------------------------------------------------------- invariants
    @invariant()
    def health_agrees_with_the_model(self) -> None:
        report = self.svc.health()
        assert report["active_messages"] == len(self.live)
        assert report["session_count"] == len({m.session_id for m in self.live.values()})
        assert report["last_sequence"] == self.events
        assert report["io"]["write_calls"] == report["io"]["flush_calls"] == self.writes
        assert report["update_records"] == self.updates
        assert report["deleted_messages"] == self.deletes
        assert report["snapshot_valid"] is True and report["status"] == "OK"

    @invariant()
    def sessions_agree_with_the_model(self) -> None:
        assert self.svc.sessions(1000, None)["sessions"] == self.expected_sessions()

    def check_replay_equals_live(self) -> None:
        live = dump_projections(self.svc.store)
        self.svc.store.rebuild_projections()
        assert dump_projections(self.svc.store) == live


StoreMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_the_store_behaves_like_the_model = StoreMachine.TestCase
