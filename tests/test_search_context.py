"""The context boost: a turn is ranked with the turns around it, but only a
turn that matches the query in its own fields is ever returned."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
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
            own = search.Options(context=False)
            plain = [h.doc.message_id for h in search.search(tx, query, Filters(), 10, options=own)]
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


# -------------------------------------------------- one definition, any history
WORDS = ("alpha", "beta", "gamma", "delta", "support", "group", "caroline", "yesterday")
QUERIES = ("alpha", "support group", "caroline yesterday gamma", "beta delta alpha")
ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from("abc"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=5)),
    st.tuples(st.just("update"), st.integers(0, 50), st.lists(st.sampled_from(WORDS), min_size=1, max_size=5)),
    st.tuples(st.just("delete"), st.integers(0, 50), st.just([]))), min_size=1, max_size=30)


def ranking(svc, query: str) -> list[tuple[str, float]]:
    return [(r["message_id"], r["score"]) for r in svc.search(query, Filters(), 0, 50)["results"]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=ops, merge_at=st.sampled_from([1, 2, 5, 10**6]))
def test_scores_depend_on_the_live_messages_only_not_on_their_history(tmp_path_factory, history, merge_at):
    """Updates and deletes recompute every context they touch: a store that went
    through ``history`` ranks exactly like one holding only its live messages,
    written afresh in the same order — and like itself compacted."""
    root = tmp_path_factory.mktemp("ctx")
    svc = open_service(str(root / "lived"), index_config=IndexConfig(merge_at=merge_at))
    fresh = open_service(str(root / "fresh"))
    try:
        written: list[str] = []          # the live ones
        for op, arg, words in history:
            if op == "write":
                written.append(write(svc, " ".join(words), f"s{arg}"))
            elif written and op == "update":
                svc.update_message(written[arg % len(written)], " ".join(words), {}, None)
            elif written:
                svc.delete_message(written.pop(arg % len(written)), None)
        with svc.snapshot() as (_, live):
            fresh.restore_messages(list(live))
        before = {q: ranking(svc, q) for q in QUERIES}
        assert before == {q: ranking(fresh, q) for q in QUERIES}
        svc.rebuild()
        assert before == {q: ranking(svc, q) for q in QUERIES}
    finally:
        svc.close()
        fresh.close()
