"""Time-aware search: filters_json "after"/"before" on the message timestamp and
"roles", answered from the index, combined with the other filters by AND."""

from __future__ import annotations

import json

import pytest
from helpers import Clock
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import open_service, write

from eventstore.errors import ValidationError
from projections import search
from projections.index import IndexConfig
from projections.search import Filters
from server.tools import TOOLS

T0 = 1_720_843_200_000
DAY = 86_400_000


def found(svc, query: str, **flt) -> list[str]:
    return [r["message_id"] for r in svc.search(query, Filters(**flt), 0, 100)["results"]]


@pytest.fixture
def days(store_path):
    """Ten messages, one a day at T0 + i days, alternating user/assistant; the
    last three still pending (merged every 7)."""
    clock = Clock(now=T0)
    svc = open_service(store_path, clock, index_config=IndexConfig(merge_at=7))
    ids = []
    for i in range(10):
        clock.now = T0 + i * DAY
        ids.append(write(svc, f"decision number {i} about the deploy", role=("user", "assistant")[i % 2]))
    try:
        yield svc, ids
    finally:
        svc.close()


def test_after_is_inclusive_and_before_exclusive(days):
    svc, ids = days
    assert set(found(svc, "deploy", after=T0 + 3 * DAY, before=T0 + 6 * DAY)) == set(ids[3:6])
    assert set(found(svc, "deploy", after=T0 + 3 * DAY + 1, before=T0 + 6 * DAY + 1)) == set(ids[4:7])


def test_one_side_of_the_window_may_be_left_open(days):
    svc, ids = days
    assert set(found(svc, "deploy", after=T0 + 8 * DAY)) == set(ids[8:])       # both still pending
    assert set(found(svc, "deploy", before=T0 + 2 * DAY)) == set(ids[:2])


def test_an_empty_or_inverted_window_finds_nothing(days):
    svc, _ = days
    assert found(svc, "deploy", after=T0 + 5 * DAY, before=T0 + 5 * DAY) == []
    assert found(svc, "deploy", after=T0 + 6 * DAY, before=T0 + 2 * DAY) == []
    assert found(svc, "deploy", after=T0 + 100 * DAY) == []


def test_roles_and_time_combine_with_the_other_filters(days):
    svc, ids = days
    assert set(found(svc, "deploy", roles=frozenset({"assistant"}))) == set(ids[1::2])
    assert set(found(svc, "deploy", roles=frozenset({"assistant"}), after=T0 + 4 * DAY)) == {ids[5], ids[7], ids[9]}
    assert found(svc, "deploy", roles=frozenset({"system"})) == []
    assert found(svc, "deploy", session_id="elsewhere", after=T0) == []


def test_messages_written_in_the_same_millisecond_are_all_in_or_all_out(store_path):
    svc = open_service(store_path, Clock(now=T0))             # the clock stands still
    try:
        ids = [write(svc, f"same instant {i}") for i in range(5)]
        assert set(found(svc, "instant", after=T0, before=T0 + 1)) == set(ids)
        assert found(svc, "instant", after=T0 + 1) == []
        assert found(svc, "instant", before=T0) == []
    finally:
        svc.close()


def test_a_narrow_window_over_many_messages_is_read_from_the_time_index(store_path):
    clock = Clock(now=T0, step=1000)
    svc = open_service(store_path, clock)
    try:
        for i in range(600):
            write(svc, f"status report {i}")
        trace = search.Trace()
        with svc.store.read() as tx:
            hits = search.search(tx, "status", Filters(after=T0 + 100_000, before=T0 + 110_000), 10, trace)
        assert len(hits) == 10 and trace.path == "walk"      # only the window's documents were scored
        assert all(T0 + 100_000 <= h.doc.timestamp < T0 + 110_000 for h in hits)
    finally:
        svc.close()


def test_deleted_messages_leave_the_time_index(days):
    svc, ids = days
    svc.delete_message(ids[4], None)
    assert set(found(svc, "deploy", after=T0 + 3 * DAY, before=T0 + 6 * DAY)) == {ids[3], ids[5]}


@settings(max_examples=40, deadline=None)
@given(stamps=st.lists(st.integers(0, 20), min_size=1, max_size=25), after=st.none() | st.integers(-1, 22),
       before=st.none() | st.integers(-1, 22), merge_at=st.sampled_from([2, 5, 1000]))
def test_a_window_finds_exactly_the_messages_whose_timestamp_is_inside(tmp_path_factory, stamps, after, before,
                                                                        merge_at):
    clock = Clock(now=T0)
    svc = open_service(str(tmp_path_factory.mktemp("w") / "s"), clock, index_config=IndexConfig(merge_at=merge_at))
    try:
        written = {}
        for i, stamp in enumerate(stamps):
            clock.now = T0 + stamp
            written[write(svc, f"topic word {i}")] = T0 + stamp
        lo = None if after is None else T0 + after
        hi = None if before is None else T0 + before
        expected = {m for m, t in written.items() if (lo is None or t >= lo) and (hi is None or t < hi)}
        assert set(found(svc, "topic", after=lo, before=hi)) == expected
    finally:
        svc.close()


SEARCH = next(t for t in TOOLS if t.name == "search_messages")


@pytest.mark.parametrize("filters, field", [
    ({"after": "yesterday"}, "filters_json.after"),
    ({"after": -1}, "filters_json.after"),
    ({"before": 1.5}, "filters_json.before"),
    ({"before": True}, "filters_json.before"),
    ({"after": 1 << 64}, "filters_json.after"),
    ({"roles": "user"}, "filters_json.roles"),
    ({"roles": ["robot"]}, "filters_json.roles[]"),
])
def test_bad_time_and_role_filters_are_validation_errors_naming_the_key(filters, field):
    with pytest.raises(ValidationError) as err:
        SEARCH.parse({"query": "x", "filters_json": json.dumps(filters)})
    assert err.value.message.startswith(field + ":")
