"""How search_messages evaluates: it only reads, prunes exactly, and replays identically."""

from __future__ import annotations

import hashlib
import os

import pytest

from eventstore.events import Metadata
from projections import search
from projections.search import Filters
from server.service import MemoryService
from tools.replay import differences


def write(svc: MemoryService, content: str, session: str = "s", **meta) -> str:
    return svc.write_message(session, "user", content, Metadata(**meta))["message"]["message_id"]


def ranked(svc: MemoryService, query: str, limit: int = 10, flt: Filters = Filters()) -> list[tuple]:
    return [(r["message_id"], r["score"], r["score_breakdown"])
            for r in svc.search(query, flt, 0, limit)["results"]]


def data_digest(path: str) -> str:
    with open(os.path.join(path, "data.mdb"), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def test_search_writes_nothing_not_even_counters(service, store_path):
    a = write(service, "the billing database is PostgreSQL", tags=("db",), summary="billing")
    write(service, "東京タワーの写真", "ja")
    service.update_message(a, "the billing database is PostgreSQL 16", {}, None)
    before = (service.health(), data_digest(store_path))
    for query in ("postgresql", "東京", "billing db", "ERR_CONN_RESET", "the", "!!!"):
        for flt in (Filters(), Filters(session_id="ja"), Filters(tags=("db",), min_importance=10)):
            service.search(query, flt, 3, 5)
    assert (service.health(), data_digest(store_path)) == before


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """600 messages of varied length: one word in all, one in a third, rare words in a few."""
    svc = MemoryService(str(tmp_path_factory.mktemp("prune") / "store"))
    for i in range(600):
        words = ["status"] + (["weekly"] if i % 3 == 0 else []) + (["zebra"] if i % 150 == 7 else [])
        words += ["report"] * (1 + i % 4) + [f"item{i % 40}"] + [f"filler{j}" for j in range(i * 7 % 23)]
        write(svc, " ".join(words), f"s{i % 5}", importance=i % 3 * 40)
    try:
        yield svc
    finally:
        svc.close()


QUERIES = ["status", "weekly status", "zebra status report", "item7 weekly", "report item12 zebra",
           "status status weekly report"]


@pytest.mark.parametrize("query", QUERIES)
def test_pruned_evaluation_gives_exactly_the_exhaustive_top_k(big, query):
    def hits(prune: bool) -> list[tuple]:
        with big.store.read() as tx:
            return [(h.doc.message_id, h.score, h.breakdown)
                    for h in search.search(tx, query, Filters(), 10, prune=prune)]
    assert hits(prune=True) == hits(prune=False)        # False: every list read whole


@pytest.mark.parametrize("limit", [1, 3])
def test_a_common_word_is_only_probed_once_rare_ones_settle_the_top(big, limit):
    trace = search.Trace()
    with big.store.read() as tx:
        hits = search.search(tx, "zebra status", Filters(), limit, trace, context=False)   # own fields' evaluation
    assert len(hits) == limit and trace.path == "top-k"
    assert trace.postings > 600 - trace.pending        # "status" is in every merged message ...
    assert trace.read < 10 and 0 < trace.probes <= 4   # ... but only zebra's 4 are looked up


def test_replay_rebuilds_the_search_index_byte_for_byte(store_path):
    svc = MemoryService(store_path)
    try:
        a = write(svc, "fetch failed with ERR_CONN_RESET", tags=("net", "bug"), summary="reset")
        write(svc, "グスタフ・マーラーの交響曲第5番", "ja", memory_kind="semantic", importance=80)
        c = write(svc, "os.path.join and getUserName()", memory_tier="long")
        svc.update_message(a, None, {"tags": ("net",), "summary": "connection reset"}, None)
        svc.update_message(c, "now using pathlib instead", {}, None)
        svc.delete_message(c, None)
        before = ranked(svc, "reset ERR_CONN_RESET")
    finally:
        svc.close()
    assert differences(store_path) == []
    svc = MemoryService(store_path)
    try:
        assert ranked(svc, "reset ERR_CONN_RESET") == before
    finally:
        svc.close()
