"""How search_messages evaluates: it only reads, prunes exactly, and replays identically."""

from __future__ import annotations

import hashlib
import os

import pytest

from eventstore.events import Metadata
from projections import search
from projections.index import IndexConfig, filters
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
    svc = MemoryService(str(tmp_path_factory.mktemp("prune") / "store"),
                        index_config=IndexConfig(merge_at=256))      # most of them merged into the lists
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
                    for h in search.search(tx, query, Filters(), 10, options=search.Options(prune=prune))]
    assert hits(prune=True) == hits(prune=False)        # False: every list read whole


@pytest.mark.parametrize("limit", [1, 3])
def test_a_common_word_is_only_probed_once_rare_ones_settle_the_top(big, limit):
    trace = search.Trace()
    with big.store.read() as tx:
        own = search.Options(context=False)                                 # own fields' evaluation
        hits = search.search(tx, "zebra status", Filters(), limit, trace, own)
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


FILTERS = [Filters(min_importance=40), Filters(min_importance=80), Filters(session_id="s2"),
           Filters(session_id="s1", min_importance=40), Filters(kinds=frozenset({"semantic", "procedure"}))]


@pytest.fixture(scope="module")
def fielded(tmp_path_factory):
    """The ``big`` corpus with summaries, tags and kinds: every field in play;
    mostly merged (the last 50 pending), so the lists read whole may all be
    content lists while summary and tag lists are left to complete."""
    svc = MemoryService(str(tmp_path_factory.mktemp("fielded") / "store"), index_config=IndexConfig(merge_at=400))
    kinds = ("semantic", "procedure", "conversation")
    for i in range(450):
        words = ["status"] + (["weekly"] if i % 3 == 0 else []) + (["zebra"] if i % 90 == 7 else [])
        words += ["report"] * (1 + i % 4) + [f"item{i % 40}"]
        write(svc, " ".join(words), f"s{i % 5}", importance=i % 3 * 40, memory_kind=kinds[i % 3],
              summary="weekly report" if i % 4 == 0 else None, tags=("status", f"t{i % 6}") if i % 5 else ())
    try:
        yield svc
    finally:
        svc.close()


def _window(svc: MemoryService, low: float, high: float) -> tuple[int, int]:
    """(after, before) around the messages between the ``low`` and ``high`` shares by timestamp."""
    from projections.index.layout import TIMES
    with svc.store.read() as tx, tx.txn.cursor(db=tx.db(TIMES)) as cur:
        stamps = [int.from_bytes(k[:8], "big") for k in cur.iternext(values=False)]
    return stamps[int(low * len(stamps))], stamps[int(high * len(stamps))]


@pytest.mark.parametrize("path", ["set", "checks", "masks", "too-wide"])
@pytest.mark.parametrize("extra", [{}, {"min_importance": 40}, {"kinds": frozenset({"semantic", "procedure"})}],
                         ids=["window", "window+importance", "window+kinds"])
@pytest.mark.parametrize("corpus", ["big", "fielded"])
def test_a_time_window_gives_exactly_the_exhaustive_top_k_whichever_way_it_is_applied(corpus, extra, path, request,
                                                                                     monkeypatch):
    """A time window as the allowed set, checked on each candidate's row, read
    whole into an array with the other conditions (``masks``), or too wide
    for that (rows again): the exhaustive evaluation's hits, all in the window."""
    svc = request.getfixturevalue(corpus)
    after, before = _window(svc, 0.3, 0.6)
    flt = Filters(after=after, before=before, **extra)
    if path != "set":
        monkeypatch.setattr(search, "ALLOWED_MAX", 0)
    monkeypatch.setattr(filters, "MASK_AFTER", 1 << 60 if path == "checks" else 0)
    if path == "too-wide":
        monkeypatch.setattr(filters, "TIME_MASK_MAX", 3)

    def hits(query: str, prune: bool) -> list[search.Hit]:
        with svc.store.read() as tx:
            return search.search(tx, query, flt, 10, options=search.Options(prune=prune))

    found = 0
    for query in QUERIES:
        got = hits(query, True)
        assert [(h.doc, h.score, h.breakdown) for h in got] == [(h.doc, h.score, h.breakdown)
                                                                for h in hits(query, False)]
        assert all(after <= h.doc.timestamp < before and h.doc.importance >= flt.min_importance
                   and (not flt.kinds or h.doc.kind in flt.kinds) for h in got)
        found += len(got)
    assert found or (corpus == "big" and flt.kinds)


@pytest.mark.parametrize("path", ["walk", "set", "checks", "masks"])
@pytest.mark.parametrize("context", [True, False], ids=["context", "own"])
@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: repr(f)[8:40])
@pytest.mark.parametrize("corpus", ["big", "fielded"])
def test_filtered_pruned_evaluation_gives_exactly_the_exhaustive_top_k(corpus, flt, context, path, request,
                                                                       monkeypatch):
    """Each way a filter is applied — walking a small allowed set, top k
    against the set, top k with each candidate checked on its row or on the
    facet lists read as arrays — gives the exhaustive
    evaluation's hits, and only hits that pass."""
    svc = request.getfixturevalue(corpus)
    if path == "set":
        monkeypatch.setattr(search, "SELECTIVE_WORK", 0)
        monkeypatch.setattr(search, "WALK_SHARE", 1 << 60)       # never walk: top k against the set
    elif path == "checks":
        monkeypatch.setattr(search, "ALLOWED_MAX", 0)
        monkeypatch.setattr(filters, "MASK_AFTER", 1 << 60)
    elif path == "masks":
        monkeypatch.setattr(search, "ALLOWED_MAX", 0)
        monkeypatch.setattr(filters, "MASK_AFTER", 0)

    def hits(query: str, prune: bool) -> list[search.Hit]:
        with svc.store.read() as tx:
            return search.search(tx, query, flt, 10, options=search.Options(prune, context))

    def passes(doc) -> bool:
        return (doc.importance >= flt.min_importance and flt.session_id in (None, doc.session_id)
                and (not flt.kinds or doc.kind in flt.kinds))
    found = 0
    for query in QUERIES:
        got = hits(query, True)
        assert [(h.doc, h.score, h.breakdown) for h in got] == [(h.doc, h.score, h.breakdown)
                                                                for h in hits(query, False)]
        assert all(passes(h.doc) for h in got)
        found += len(got)
    assert found or (corpus == "big" and flt.kinds)         # big's messages are all conversation


@pytest.mark.parametrize("path", ["checks", "masks"])
def test_a_document_that_reaches_the_top_k_only_by_its_summary_or_tags_is_not_dropped(fielded, path, monkeypatch):
    """Once the lists read whole are all content lists, a candidate whose content
    sum falls short of the k-th best may still reach it by the summary and tag
    lists left: the top k is that of every message scored, then filtered."""
    monkeypatch.setattr(search, "ALLOWED_MAX", 0)
    monkeypatch.setattr(filters, "MASK_AFTER", 1 << 60 if path == "checks" else 0)
    after, before = _window(fielded, 0.3, 0.6)
    flt = Filters(after=after, before=before, min_importance=40)
    own = search.Options(prune=True, context=False)
    for query in QUERIES:
        with fielded.store.read() as tx:
            every = search.search(tx, query, Filters(), 1000, options=search.Options(prune=False, context=False))
            got = search.search(tx, query, flt, 10, options=own)
        expected = [h for h in every if after <= h.doc.timestamp < before and h.doc.importance >= 40][:10]
        assert [(h.doc, h.score) for h in got] == [(h.doc, h.score) for h in expected], query


@pytest.mark.parametrize("prune", [True, False])
def test_messages_tied_past_the_context_pool_are_ranked_by_importance_then_newest(tmp_path, prune):
    """Forty equal messages, each alone in its session, tie in every score: more
    than the context pool holds.  The best ten are settled by the contract's
    rule — higher importance, then newer — not by which were written last."""
    svc = MemoryService(str(tmp_path / "store"), index_config=IndexConfig(merge_at=16))   # mostly merged
    try:
        ids = [write(svc, "deploy schedule for the release", f"s{i}", importance=(i % 3) * 40) for i in range(40)]
        with svc.store.read() as tx:
            hits = search.search(tx, "deploy schedule", Filters(), 10, options=search.Options(prune=prune))
    finally:
        svc.close()
    assert len({h.score for h in hits}) == 1
    expected = [ids[i] for i in range(39, -1, -1) if i % 3 == 2][:10]
    assert [h.doc.message_id for h in hits] == expected
