"""search_messages ranking through MemoryService: English text, scores, ties."""

from __future__ import annotations

import itertools

import pytest

from eventstore.events import Metadata
from projections.search import WEIGHTS, Filters
from server.service import MemoryService


def write(svc: MemoryService, content: str, session: str = "s", **meta) -> str:
    return svc.write_message(session, "user", content, Metadata(**meta))["message"]["message_id"]


def search(svc: MemoryService, query: str, limit: int = 20, flt: Filters = Filters()) -> list[dict]:
    return svc.search(query, flt, 0, limit)["results"]


def ids(svc: MemoryService, query: str, limit: int = 20, flt: Filters = Filters()) -> list[str]:
    return [r["message_id"] for r in search(svc, query, limit, flt)]


@pytest.fixture
def ticking(store_path):
    """A service whose clock advances one millisecond per reading."""
    clock = itertools.count(1_720_000_000_000)
    svc = MemoryService(store_path, clock=lambda: next(clock))
    try:
        yield svc
    finally:
        svc.close()


# ------------------------------------------------------------- matching
def test_a_partly_present_query_still_finds_what_matches(service):
    a = write(service, "the nightly backup job failed")
    write(service, "lunch menu for friday")
    assert ids(service, "backup restore procedure kubernetes") == [a]


def test_more_query_terms_present_rank_higher(service):
    one = write(service, "the backup finished")
    two = write(service, "the backup of the database finished")
    three = write(service, "restoring the database backup failed")
    assert ids(service, "database backup failed") == [three, two, one]


def test_inflected_forms_find_each_other(service):
    a = write(service, "We deployed the service and it crashed")
    assert ids(service, "deploying crash") == [a]
    b = write(service, "Caroline's paintings of the sunrise")
    assert ids(service, "caroline painting sunrises") == [b]


def test_matching_ignores_case_and_width(service):
    a = write(service, "the billing database is PostgreSQL")
    assert ids(service, "ＰＯＳＴＧＲＥＳＱＬ") == [a]
    assert ids(service, "postgresql") == [a]


def test_stopwords_alone_do_not_make_a_match(service):
    meeting = write(service, "the meeting moved to thursday")
    write(service, "it is what it is and the rest of it")
    assert ids(service, "what is the meeting") == [meeting]


def test_a_query_of_only_stopwords_still_finds_its_text(service):
    a = write(service, "to be or not to be")
    write(service, "completely different words here")
    assert ids(service, "To be or not to be") == [a]


def test_a_rare_word_outweighs_a_common_one(service):
    for i in range(6):
        write(service, f"project status update number {i}")
    zebra = write(service, "the zebra escaped")
    both = ids(service, "project zebra")
    assert both[0] == zebra and len(both) == 7


def test_a_word_in_every_message_still_scores_above_zero(service):
    a = write(service, "alpha")
    assert [r["score"] > 0 for r in search(service, "alpha")] == [True]
    b = write(service, "alpha beta")
    assert set(ids(service, "alpha")) == {a, b}
    assert all(r["score"] > 0 for r in search(service, "alpha"))


def test_summary_and_tags_are_searched(service):
    s = write(service, "nothing relevant", summary="Quarterly revenue forecast")
    t = write(service, "also nothing", tags=("revenue",))
    found = search(service, "revenue")
    assert {r["message_id"] for r in found} == {s, t}
    by_id = {r["message_id"]: r for r in found}
    assert by_id[s]["matched_fields"] == ["summary"]
    assert by_id[t]["matched_fields"] == ["tags"]


def test_updated_text_is_found_and_the_old_text_is_not(service):
    a = write(service, "the cache uses memcached")
    service.update_message(a, "the cache uses redis now", {}, None)
    assert ids(service, "memcached") == []
    assert ids(service, "redis") == [a]
    service.delete_message(a, None)
    assert ids(service, "redis") == []


# ---------------------------------------------------------------- scores
def test_scores_are_in_zero_to_one_and_their_own_fields_bound_them(service):
    write(service, "kafka consumer lag alert", summary="kafka lag", tags=("kafka", "alerts"))
    write(service, "consumer group rebalanced", tags=("ops",))
    write(service, "lag in the kafka consumer again and again")
    for r in search(service, "kafka consumer lag"):
        b = r["score_breakdown"]
        assert 0 < r["score"] <= 1 and all(0 <= v <= 1 for v in b.values())
        assert r["matched_fields"] == [f for f in ("content", "summary", "tags") if b[f] > 0]
        miss = 1.0
        for w, f in zip(WEIGHTS, ("content", "summary", "tags")):
            miss *= 1 - w * b[f]
        own = 1 - miss        # the context may only raise it, never past 1 - (1 - own) * (1 - 0.8)
        assert own - 1e-5 <= r["score"] <= 1 - (1 - own) * (1 - 0.8) + 1e-5


def test_a_whole_field_equal_to_the_query_scores_one(service):
    whole = write(service, "Deploy Checklist")
    partial = write(service, "deploy checklist for friday")
    [first, second] = search(service, "ｄｅｐｌｏｙ　checklist")
    assert (first["message_id"], first["score"], first["score_breakdown"]["content"]) == (whole, 1.0, 1.0)
    assert second["message_id"] == partial and second["score"] < 1.0
    assert second["score_breakdown"]["content"] < 1.0


def test_a_whole_summary_or_tag_scores_one_in_that_field(service):
    s = write(service, "unrelated", summary="Weekly Sync")
    t = write(service, "unrelated too", tags=("Project-X", "misc"))
    [r] = search(service, "weekly sync")
    assert r["message_id"] == s and r["score_breakdown"]["summary"] == 1.0
    [r] = search(service, "PROJECT-X")
    assert r["message_id"] == t and r["score_breakdown"]["tags"] == 1.0


def test_partial_matches_score_below_one(service):
    write(service, "alpha beta gamma")
    write(service, "alpha")
    for r in search(service, "alpha beta gamma delta"):
        assert r["score"] < 1.0


# ----------------------------------------------------------------- ties
def test_equal_scores_go_to_higher_importance_first(service):
    low = write(service, "same words here", importance=10)
    high = write(service, "same words here", importance=90)
    mid = write(service, "same words here", importance=50)
    assert ids(service, "words") == [high, mid, low]


def test_equal_scores_and_importance_go_newest_first(ticking):
    first = write(ticking, "identical text")
    second = write(ticking, "identical text")
    third = write(ticking, "identical text")
    assert ids(ticking, "identical") == [third, second, first]


def test_equal_scores_importance_and_time_go_by_message_id_newest_first(store_path):
    svc = MemoryService(store_path, clock=lambda: 1_720_000_000_000)
    try:
        written = [write(svc, "identical text") for _ in range(3)]
        assert ids(svc, "identical") == sorted(written, reverse=True) == written[::-1]
    finally:
        svc.close()


def test_the_limit_cuts_the_ranked_list(service):
    for i in range(7):
        write(service, f"note {i} about the release")
    assert len(ids(service, "release", limit=3)) == 3
    assert ids(service, "release", limit=3) == ids(service, "release", limit=7)[:3]
