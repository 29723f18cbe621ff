"""search_messages filters through MemoryService: meaning, and use of the indexes."""

from __future__ import annotations

import pytest

from eventstore.events import Metadata
from projections import evaluation
from projections.index import IndexConfig, filters
from projections.search import Filters
from server.service import MemoryService


def write(svc: MemoryService, content: str, session: str = "s", **meta) -> str:
    return svc.write_message(session, "user", content, Metadata(**meta))["message"]["message_id"]


def ids(svc: MemoryService, query: str, flt: Filters = Filters(), limit: int = 50) -> list[str]:
    return [r["message_id"] for r in svc.search(query, flt, 0, limit)["results"]]


@pytest.fixture
def board(service):
    """Four messages about one topic with different kinds, tiers, tags, importance."""
    def put(kind, tier, tags, importance, session):
        return write(service, "shared topic words", session, memory_kind=kind, memory_tier=tier,
                     tags=tuple(tags), importance=importance)
    return service, {
        "a": put("semantic", "long", ["project", "confirmed"], 90, "one"),
        "b": put("preference", "mid", ["project"], 70, "one"),
        "c": put("semantic", "short", ["confirmed"], 30, "two"),
        "d": put("episode", "long", [], 10, "two")}


def test_filters_or_within_a_category_and_and_across_categories(board):
    svc, m = board

    def found(**kw) -> set[str]:
        return {k for k, v in m.items() if v in ids(svc, "topic", Filters(**kw))}
    assert found() == {"a", "b", "c", "d"}
    assert found(kinds=frozenset({"semantic", "preference"})) == {"a", "b", "c"}
    assert found(tiers=frozenset({"mid", "long"})) == {"a", "b", "d"}
    assert found(kinds=frozenset({"semantic"}), tiers=frozenset({"long"})) == {"a"}
    assert found(tags=("project",)) == {"a", "b"}
    assert found(tags=("project", "confirmed")) == {"a"}
    assert found(tags=("missing",)) == set()
    assert found(min_importance=70) == {"a", "b"}
    assert found(min_importance=100) == set()
    assert found(session_id="two") == {"c", "d"}
    assert found(session_id="two", kinds=frozenset({"semantic"})) == {"c"}
    assert found(session_id="nowhere") == set()


@pytest.fixture
def crowd(store_path):
    """3 special messages and 200 in session "big", all about deploys; all but
    the last 11 merged into the index (the rest pending); lists cut into chunks
    of ~2 postings, so that "deploy" is a long list of ~100 chunks (a short
    one is decoded whole, once, and kept)."""
    service = MemoryService(store_path, index_config=IndexConfig(merge_at=64, chunk=2))
    special = [write(service, f"deploy decision {i}", f"small-{i % 2}", memory_kind="procedure",
                     importance=95, tags=("rare",)) for i in range(3)]
    for i in range(200):
        write(service, f"deploy notes {i} for the release", "big")
    try:
        yield service, special
    finally:
        service.close()


@pytest.fixture
def counted(monkeypatch):
    """Counts per-document lookups and whole-list reads made by the ranker."""
    counts = {"doc": 0, "blocks": 0}
    real_doc, real_block = filters.doc, evaluation.QueryList.whole

    def doc(tx, docno):
        counts["doc"] += 1
        return real_doc(tx, docno)

    def block(*args):
        counts["blocks"] += 1
        return real_block(*args)
    monkeypatch.setattr(filters, "doc", doc)
    monkeypatch.setattr(evaluation.QueryList, "whole", block)
    return counts


@pytest.mark.parametrize("flt", [Filters(session_id="small-0"),
                                 Filters(kinds=frozenset({"procedure"})),
                                 Filters(tags=("rare",)),
                                 Filters(min_importance=90)], ids=["session", "kinds", "tags", "importance"])
def test_a_selective_filter_is_answered_from_its_index(crowd, counted, flt):
    svc, special = crowd
    expected = [m for m in special if m in ids(svc, "deploy", Filters(), limit=300)]
    counted.update(doc=0, blocks=0)
    got = ids(svc, "deploy", flt)
    assert got and set(got) <= set(expected)
    assert counted["blocks"] == 0                 # "deploy" is not read whole
    assert counted["doc"] <= len(got)             # only the results are looked up


def test_a_filter_that_matches_nothing_reads_nothing(crowd, counted):
    svc, _ = crowd
    assert ids(svc, "deploy", Filters(kinds=frozenset({"summary"}))) == []
    assert counted == {"doc": 0, "blocks": 0}


def test_a_filter_that_keeps_everything_gives_the_unfiltered_ranking(crowd):
    svc, _ = crowd
    everything = Filters(kinds=frozenset({"conversation", "procedure"}), min_importance=0)
    assert ids(svc, "deploy release", everything, 20) == ids(svc, "deploy release", Filters(), 20)


def test_a_filtered_ranking_agrees_with_the_unfiltered_one(crowd):
    """The context boost re-ranks the best candidates by own score (and their
    windows' matches), which a filter changes: a message the unfiltered top 100
    left out may come up filtered.  But a message scores the same either way,
    and the filtered ranking is in score order."""
    svc, _ = crowd
    everything = {r["message_id"]: r for r in svc.search("deploy notes 7", Filters(), 0, 100)["results"]}
    got = svc.search("deploy notes 7", Filters(session_id="big"), 0, 10)["results"]
    in_big = [r for r in everything.values() if r["session_id"] == "big"][:10]
    assert len(got) == 10 and all(r["session_id"] == "big" for r in got)
    shared = [r for r in got if r["message_id"] in everything]
    assert len(shared) >= 5
    assert all(everything[r["message_id"]]["score"] == r["score"] for r in shared)
    assert [r["score"] for r in got] == sorted((r["score"] for r in got), reverse=True)
    assert got[0]["message_id"] == in_big[0]["message_id"]
