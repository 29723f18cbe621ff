"""The merge policy: one object decides when pending index records are merged,
for the live writer and the replay alike, so a replay across a merge leaves
the bytes the live writes left."""

from __future__ import annotations

import lmdb
import pytest
from strategies import open_service, write

from projections.index import DEFAULT, IndexConfig
from projections.index.policy import MergePolicy
from tools import replay


def test_a_merge_is_due_when_the_pending_records_reach_the_policys_count():
    policy = MergePolicy(3)
    assert [policy.due(n) for n in range(5)] == [False, False, False, True, True]
    assert [policy.room(n) for n in range(5)] == [3, 2, 1, 1, 1]
    assert IndexConfig(merge_at=3, chunk=4).layout() == "merge_at=3 chunk=4"
    with pytest.raises(ValueError, match="merge_at"):
        MergePolicy(0)


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
