"""The context boost: a turn is ranked with the turns around it, but only a
turn that matches the query in its own fields is ever returned."""

from __future__ import annotations

from strategies import open_service, write

from projections import search
from projections.index import IndexConfig
from projections.search import Filters


def ids(svc, query: str, limit: int = 10) -> list[str]:
    return [r["message_id"] for r in svc.search(query, Filters(), 0, limit)["results"]]


def conversation(svc) -> dict[str, str]:
    """A short reply whose neighbours carry the question's other words, and an
    unrelated turn sharing one word with it."""
    out = {}
    out["q"] = write(svc, "Caroline, how was the support group meeting?", "chat", "assistant")
    out["reply"] = write(svc, "It was great yesterday, the group was lovely", "chat", "user")
    out["after"] = write(svc, "Caroline said the support people were kind", "chat", "assistant")
    out["noise"] = write(svc, "the hiking group meets on sundays", "other", "user")
    for i in range(6):
        write(svc, f"unrelated turn {i} about cooking pasta", "other", "user")
    return out


def test_a_reply_whose_neighbours_carry_the_query_ranks_above_a_turn_sharing_one_word(store_path):
    svc = open_service(store_path)
    try:
        turns = conversation(svc)
        query = "when did caroline go to the support group"
        with svc.store.read() as tx:
            plain = [h.doc.message_id for h in search.search(tx, query, Filters(), 10, context=False)]
        assert plain.index(turns["noise"]) < plain.index(turns["reply"])     # by its own words alone
        found = ids(svc, query)
        assert found.index(turns["reply"]) < found.index(turns["noise"])     # with its neighbours
        assert set(found) == set(plain)                                      # nothing admitted
    finally:
        svc.close()


def test_the_context_never_admits_a_message_without_an_own_match(store_path):
    svc = open_service(store_path)
    try:
        between = write(svc, "zebra crossing", "s")
        silent = write(svc, "nothing here at all", "s")
        write(svc, "another zebra", "s")
        found = svc.search("zebra", Filters(), 0, 10)["results"]
        assert silent not in [r["message_id"] for r in found] and between in [r["message_id"] for r in found]
        for r in found:
            assert r["matched_fields"] and set(r["score_breakdown"]) == {"content", "summary", "tags"}
    finally:
        svc.close()


def test_context_scores_do_not_depend_on_whether_neighbours_are_merged(tmp_path):
    runs = []
    for merge_at in (1, 3, 10**6):
        svc = open_service(str(tmp_path / f"s{merge_at}"), index_config=IndexConfig(merge_at=merge_at))
        try:
            conversation(svc)
            runs.append([(r["score"]) for r in svc.search("caroline support group", Filters(), 0, 10)["results"]])
        finally:
            svc.close()
    assert runs[0] == runs[1] == runs[2]
