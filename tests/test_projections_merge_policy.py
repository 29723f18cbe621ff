"""The merge policy: one object decides when pending index records are merged,
for the live writer and the replay alike, so a replay across a merge leaves
the bytes the live writes left; and the live writer spreads a merge's work
over the writes before it, so that no one write does all of it."""

from __future__ import annotations

from collections import Counter

import lmdb
import pytest
from strategies import open_service, write

from eventstore.errors import ConflictError
from eventstore.events import Message, MessageWritten, Metadata
from eventstore.transaction import WriteTx
from projections.index import DEFAULT, PENDING, IndexConfig, chunks, doc
from projections.index.layout import docno_of
from projections.index.policy import MergePolicy
from tools import replay


def test_a_merge_is_due_when_the_pending_records_reach_the_policys_count():
    policy = MergePolicy(3)
    assert [policy.due(n) for n in range(5)] == [False, False, False, True, True]
    assert [policy.room(n) for n in range(5)] == [3, 2, 1, 1, 1]
    assert IndexConfig(merge_at=3, chunk=4).layout() == "merge_at=3 chunk=4"
    with pytest.raises(ValueError, match="merge_at"):
        MergePolicy(0)


def test_a_spread_merge_is_due_spread_records_later_and_shares_its_work_among_the_writes_before():
    policy = MergePolicy(4, spread=3)
    assert [policy.due(n) for n in range(9)] == [False] * 7 + [True, True]
    assert [policy.room(n) for n in range(9)] == [7, 6, 5, 4, 3, 2, 1, 1, 1]
    assert [policy.share(n, 12) for n in range(9)] == [0, 0, 0, 0, 4, 6, 12, 0, 0]
    assert policy.layout() == "merge_at=4 spread=3"
    assert DEFAULT.policy == MergePolicy(2048, 16)
    assert DEFAULT.layout() == "merge_at=2048 spread=16 chunk=128"
    assert IndexConfig(merge_at=300, merge_spread=0).policy == MergePolicy(300)
    with pytest.raises(ValueError, match="merge_spread"):
        IndexConfig(merge_spread=-1)


def pending_records(path: str) -> int:
    env = lmdb.open(path, max_dbs=32, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            return txn.stat(env.open_db(b"pending", txn=txn, create=False))["entries"]
    finally:
        env.close()


@pytest.mark.parametrize("extra", [-1, 1])
def test_live_writes_and_a_replay_across_the_default_policys_merges_give_the_same_bytes(tmp_path, extra):
    path = str(tmp_path / "store")
    records, spread = DEFAULT.policy.records, DEFAULT.policy.spread
    svc = open_service(path)
    try:
        first = records + records // 2
        ids = [write(svc, f"note {n} about topic{n % 7} and item{n}") for n in range(first)]
        svc.delete_message(ids[records + 1], None)      # a pending record fewer: the next merge comes a write later
        svc.update_message(ids[records + 2], "a pending note, edited", {}, None)
        svc.update_message(ids[0], "a merged note, edited", {}, None)
        for n in range(first, 2 * records + spread + extra):
            write(svc, f"note {n} about topic{n % 7} and item{n}")
        live = replay.dump_projections(svc.store)
    finally:
        svc.close()
    assert pending_records(path) == spread + (records - 1 + extra) % records
    assert replay.run(path) == 0
    svc = open_service(path)
    try:
        assert replay.dump_projections(svc.store) == live
    finally:
        svc.close()


# ------------------------------------------------------------- shared contract
SPREAD = IndexConfig(merge_at=16, merge_spread=6, chunk=4)
WORDS = ["deploy", "billing", "東京の天気", "ERR_CONN_RESET", "retries", "the", "backoff", "cache"]


def text(n: int) -> str:
    """Content with a few common words and a few of its own: many lists, some shared."""
    return " ".join([WORDS[n % 8], WORDS[n * 3 % 8], f"own{n}", f"pair{n // 2}", f"seventh{n % 7}"])


def pending_ids(svc) -> list[str]:
    """The message ids of the pending records, in docno order."""
    with svc.store.read() as tx, tx.txn.cursor(db=tx.db(PENDING)) as cur:
        return [doc(tx, docno_of(k)).message_id for k in cur.iternext(values=False)]


def modelled(policy: MergePolicy, ops: list[tuple[str, int]], ids: list[str]) -> list[str]:
    """What the policy says is pending after ``ops``: ("write", n) writes the
    message ``ids[n]``, ("delete", n) deletes it; the oldest ``records`` are
    merged when ``records + spread`` are pending."""
    pending: list[str] = []
    for kind, n in ops:
        if kind == "write":
            pending.append(ids[n])
            if policy.due(len(pending)):
                del pending[:policy.records]
        elif ids[n] in pending:
            pending.remove(ids[n])
    return pending


class WriterContract:
    """What every index writer leaves under a merge policy: the pending records
    the policy says, and the bytes every other writer leaves.  Subclasses name
    the writer (:meth:`written`)."""

    def written(self, svc) -> None:
        """Leave ``svc``'s read models as this writer writes them (from its log)."""
        raise NotImplementedError

    @pytest.mark.parametrize("config", [SPREAD, IndexConfig(merge_at=5, merge_spread=0, chunk=4)])
    def test_the_pending_records_are_the_ones_the_policy_leaves(self, tmp_path, config):
        svc = open_service(str(tmp_path / "s"), index_config=config)
        try:
            ops, ids = [], []
            for n in range(3 * (config.merge_at + 8)):
                ids.append(write(svc, text(n)))
                ops.append(("write", n))
                if n % 9 == 4:                        # now and then, a pending message deleted
                    svc.delete_message(ids[n - 2], None)
                    ops.append(("delete", n - 2))
            self.written(svc)
            assert pending_ids(svc) == modelled(config.policy, ops, ids)
        finally:
            svc.close()


class TestLiveWriter(WriterContract):
    def written(self, svc) -> None:
        """The live writer wrote them as the messages came."""


class TestBulkWriter(WriterContract):
    def written(self, svc) -> None:
        svc.store.rebuild_projections()


# ------------------------------------------------------------- the write tail
def chunks_computed_per_write(monkeypatch, svc, writes: int) -> list[int]:
    """How many posting chunks each of ``writes`` writes encodes."""
    sealed, count = chunks.sealed, Counter[str]()

    def counted(key: bytes, body: bytes) -> bytes:
        count["chunks"] += 1
        return sealed(key, body)
    monkeypatch.setattr(chunks, "sealed", counted)
    out = []
    for n in range(writes):
        before = count["chunks"]
        write(svc, text(n))
        out.append(count["chunks"] - before)
    return out


def test_no_single_write_computes_more_than_a_share_of_a_merges_chunks(tmp_path, monkeypatch):
    config = IndexConfig(merge_at=64, merge_spread=8, chunk=4)
    svc = open_service(str(tmp_path / "s"), index_config=config)
    try:
        per_write = chunks_computed_per_write(monkeypatch, svc, 3 * (64 + 8))
    finally:
        svc.close()
    windows = [per_write[at:at + 9] for at in (63, 127, 191)]     # each merge's writes: the spread ones
    assert sum(map(sum, windows)) == sum(per_write)                # and the merging one
    for window in windows:
        assert sum(window) > 150                                  # hundreds of lists touched
        assert max(window) <= sum(window) / 2 and sum(map(bool, window)) >= 4


@pytest.mark.parametrize("ahead", [0, 1, 3, 5])
@pytest.mark.parametrize("event", ["update pending", "delete pending", "update merged", "abort", "reopen"])
def test_a_change_during_a_spread_merge_leaves_the_bytes_a_replay_leaves(tmp_path, event, ahead):
    """Work done ahead that a change makes stale is done again: an update or
    delete of a document gathered or merged, a write aborted after its work
    was done (its docno is given again to the next message), the store
    reopened.  ``ahead``: how many writes did work ahead before the change."""
    path = str(tmp_path / "s")
    # an aborted write's own record is gathered when its write does all the work: a spread of one
    config = IndexConfig(merge_at=16, merge_spread=1 if event == "abort" else 6, chunk=4)
    records = config.merge_at
    svc = open_service(path, index_config=config)
    try:
        # after 3 × records writes, records are pending (the oldest: ids[2 × records:]), a merge under way
        ids = [write(svc, text(n)) for n in range(3 * records - (event == "abort") + ahead)]
        if event == "update pending":
            svc.update_message(ids[2 * records], "deploy rewritten entirely", {}, None)
        elif event == "delete pending":
            svc.delete_message(ids[2 * records], None)
        elif event == "update merged":
            svc.update_message(ids[2 * records - 3], "billing rewritten entirely", {}, None)
        elif event == "abort":
            def aborted(w: WriteTx) -> None:
                now = w.now_ms()
                w.append([MessageWritten(Message(w.new_ids([now])[0], "s", "user", "aborted words", now, now, 1,
                                                 Metadata()))])
                raise ConflictError("expected_revision: refused after appending")
            with pytest.raises(ConflictError):
                svc.submit(aborted)
        elif event == "reopen":
            svc.close()
            svc = open_service(path, index_config=config, seed=2)
        for n in range(100, 100 + records):
            write(svc, text(n))
        live = replay.dump_projections(svc.store)
        svc.store.rebuild_projections()
        assert replay.dump_projections(svc.store) == live
    finally:
        svc.close()
