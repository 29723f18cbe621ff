"""Corrections: a live message with a ``supersedes`` relation makes its target superseded;
search can include, exclude or keep only superseded messages, says ``superseded_by``, and a
deleted correction makes the old message current again."""

from __future__ import annotations

import json

import pytest

from eventstore.errors import ValidationError
from server.principals import LOCAL, Principal
from server.tools import BY_NAME


def call(svc, name: str, principal: Principal = LOCAL, **arguments) -> dict:
    return BY_NAME[name].call(svc, arguments, principal)


def write(svc, content: str, session: str = "s", **meta) -> str:
    return call(svc, "write_message", session_id=session, role="user", content=content,
                metadata_json=json.dumps(meta))["message"]["message_id"]


def found(svc, superseded: str | None = None, principal: Principal = LOCAL, limit: int = 20) -> dict[str, str | None]:
    flt = json.dumps({} if superseded is None else {"superseded": superseded})
    results = call(svc, "search_messages", principal, query="deadline", filters_json=flt, limit=limit)["results"]
    return {r["message_id"]: r.get("superseded_by") for r in results}


@pytest.fixture
def corrected(svc):
    old = write(svc, "the project deadline is March")
    new = write(svc, "correction: the project deadline is April",
                relations=[{"type": "supersedes", "message_id": old}])
    other = write(svc, "an unrelated deadline for taxes")
    return svc, old, new, other


def test_filters_include_exclude_only(corrected):
    svc, old, new, other = corrected
    assert found(svc) == {old: new, new: None, other: None}            # the default: include
    assert found(svc, "include") == found(svc)
    assert found(svc, "exclude") == {new: None, other: None}
    assert found(svc, "only") == {old: new}


def test_a_current_result_has_no_superseded_by_field(corrected):
    svc, old, new, _ = corrected
    results = call(svc, "search_messages", query="April")["results"]
    assert [r["message_id"] for r in results] == [new] and "superseded_by" not in results[0]


def test_deleting_the_correction_makes_the_old_message_current(corrected):
    svc, old, new, other = corrected
    call(svc, "delete_message", message_id=new)
    assert found(svc, "exclude") == {old: None, other: None}
    assert found(svc, "only") == {}


def test_an_update_removing_the_relation_ends_the_supersession(corrected):
    svc, old, new, _ = corrected
    call(svc, "update_message", message_id=new, metadata_json=json.dumps({"relations": []}))
    assert found(svc, "only") == {}


def test_the_newest_of_several_corrections_is_named(corrected):
    svc, old, new, _ = corrected
    newer = write(svc, "second correction of the deadline: May", relations=[{"type": "supersedes", "message_id": old}])
    assert found(svc, "only") == {old: newer}


def test_exclude_still_fills_the_limit_past_superseded_hits(svc):
    olds = [write(svc, f"deadline deadline deadline version {i}") for i in range(12)]
    for old in olds:
        write(svc, f"fix {old[-4:]}", relations=[{"type": "supersedes", "message_id": old}])
    current = [write(svc, f"deadline note {i}") for i in range(3)]
    assert set(found(svc, "exclude", limit=3)) == set(current)


def test_a_correction_outside_the_scope_does_not_count(svc):
    old = write(svc, "the deadline is March", session="pa/1")
    write(svc, "the deadline is April", session="pb/1", relations=[{"type": "supersedes", "message_id": old}])
    scoped = Principal("a", sessions=("pa/*",))
    assert found(svc, "exclude", scoped) == {old: None}


def test_a_bad_superseded_value_names_the_field(svc):
    with pytest.raises(ValidationError, match=r"filters_json\.superseded: must be one of include, exclude, only"):
        call(svc, "search_messages", query="x", filters_json=json.dumps({"superseded": "never"}))
