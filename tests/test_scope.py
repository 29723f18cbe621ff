"""Scopes: a principal limited to session patterns sees and touches only those sessions, in
every tool and view; a read-only one writes nothing.  The property test draws stores, scopes
and tool calls and checks that no answer carries an id, session id or text from outside."""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import open_service

from eventstore.errors import ConvMemError, NotFoundError, ValidationError
from server.principals import LOCAL, Principal
from server.tools import BY_NAME

SESSIONS = ("pa/one", "pa/two", "pb/three", "qc")


def call(svc, name: str, principal: Principal, **arguments) -> dict:
    return BY_NAME[name].call(svc, arguments, principal)


def written(svc, session: str, content: str, principal: Principal = LOCAL, **meta) -> str:
    meta_json = json.dumps(meta)
    body = call(svc, "write_message", principal, session_id=session, role="user", content=content,
                metadata_json=meta_json)
    return body["message"]["message_id"]


A = Principal("agent-a", sessions=("pa/*",))
READER = Principal("reader", read_only=True)


@pytest.fixture
def store(svc):
    """Two sessions in scope of ``pa/*``, two outside; relations cross the boundary."""
    outside = written(svc, "pb/three", "secret zebra outside")
    inside = written(svc, "pa/one", "zebra inside first", relations=[{"type": "related_to", "message_id": outside}],
                     source_message_ids=[outside])
    second = written(svc, "pa/one", "zebra inside second")
    other = written(svc, "qc", "zebra qc text", relations=[{"type": "depends_on", "message_id": inside}])
    return svc, {"outside": outside, "inside": inside, "second": second, "other": other}


def test_search_sees_only_the_scope(store):
    svc, ids = store
    everyone = {r["message_id"] for r in call(svc, "search_messages", LOCAL, query="zebra")["results"]}
    assert ids["outside"] in everyone
    seen = call(svc, "search_messages", A, query="zebra")["results"]
    assert {r["message_id"] for r in seen} == {ids["inside"], ids["second"]}
    first = next(r for r in seen if r["message_id"] == ids["inside"])
    assert first["metadata"]["relations"] == [] and first["metadata"]["source_message_ids"] == []
    assert call(svc, "search_messages", A, query="zebra", session_id="pb/three")["results"] == []


def test_reads_outside_the_scope_are_not_found(store):
    svc, ids = store
    for view in ("content", "context", "revisions"):
        with pytest.raises(NotFoundError):
            call(svc, "read_messages", A, view=view, message_id=ids["outside"])
    assert call(svc, "read_messages", A, session_id="pb/three")["history"] == []
    listed = [s["session_id"] for s in call(svc, "read_messages", A, view="sessions")["sessions"]]
    assert listed == ["pa/one"]


def test_context_leaves_out_neighbours_and_relations_outside(store):
    svc, ids = store
    full = call(svc, "read_messages", LOCAL, view="context", message_id=ids["inside"])
    assert {r["message"]["message_id"] for r in full["relations"]} == {ids["outside"], ids["other"]}
    scoped = call(svc, "read_messages", A, view="context", message_id=ids["inside"])
    assert scoped["relations"] == []
    assert ids["outside"] not in json.dumps(scoped)


def test_writes_outside_the_scope_are_refused_naming_the_scope(store):
    svc, ids = store
    with pytest.raises(ValidationError, match=r"session_id: .*scope.*pa/\*"):
        written(svc, "pb/new", "no", A)
    with pytest.raises(NotFoundError):
        call(svc, "update_message", A, message_id=ids["outside"], content="changed")
    assert call(svc, "delete_message", A, message_id=ids["outside"]) == {"status": "NOT_FOUND"}
    assert call(svc, "read_messages", LOCAL, view="content", message_id=ids["outside"])["content_range"][
        "content"] == "secret zebra outside"
    with pytest.raises(ValidationError, match="rebuild_index"):
        call(svc, "rebuild_index", A)
    with pytest.raises(ValidationError, match="get_system_health"):
        call(svc, "get_system_health", A)


def test_an_update_keeps_the_relations_the_token_does_not_see(store):
    svc, ids = store
    call(svc, "update_message", A, message_id=ids["inside"],
         metadata_json=json.dumps({"relations": [{"type": "supersedes", "message_id": ids["second"]}]}))
    full = call(svc, "read_messages", LOCAL, view="context", message_id=ids["inside"])["message"]
    assert {r["message_id"] for r in full["metadata"]["relations"]} == {ids["second"], ids["outside"]}


def test_read_only_writes_nothing(store):
    svc, ids = store
    before = call(svc, "get_system_health", READER)["last_sequence"]
    with pytest.raises(ValidationError, match="read-only"):
        written(svc, "pa/one", "no", READER)
    with pytest.raises(ValidationError, match="read-only"):
        call(svc, "update_message", READER, message_id=ids["inside"], content="x")
    with pytest.raises(ValidationError, match="read-only"):
        call(svc, "delete_message", READER, message_id=ids["inside"])
    with pytest.raises(ValidationError, match="read-only"):
        call(svc, "rebuild_index", READER)
    assert call(svc, "get_system_health", READER)["last_sequence"] == before
    assert len(call(svc, "search_messages", READER, query="zebra")["results"]) == 4


# ----------------------------------------------------------------- the property
PATTERNS = ("pa/*", "pa/one", "pb/*", "q?", "*three", "[pq]b/*")
WORDS = ("zebra", "apple", "kiwi", "mango")


@st.composite
def stores(draw):
    """(session, content word, relation targets as indexes of earlier messages) per message."""
    n = draw(st.integers(2, 9))
    out = []
    for i in range(n):
        session = draw(st.sampled_from(SESSIONS))
        word = draw(st.sampled_from(WORDS))
        targets = draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True)) if i else []
        rtype = draw(st.sampled_from(("supersedes", "related_to", "derived_from")))
        out.append((session, word, rtype, targets))
    return out


def _calls(ids: st.SearchStrategy[int]):
    session = st.sampled_from(SESSIONS)
    return st.one_of(
        st.tuples(st.just("search"), st.sampled_from(WORDS), st.one_of(st.none(), session),
                  st.sampled_from(("include", "exclude", "only")), st.integers(0, 2)),
        st.tuples(st.just("history"), session),
        st.tuples(st.sampled_from(("sessions", "health", "rebuild"))),
        st.tuples(st.sampled_from(("content", "context", "revisions", "update", "delete", "relate")), ids),
        st.tuples(st.just("write"), session, ids),
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data(), plan=stores(), patterns=st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=2,
                                                         unique=True))
def test_no_answer_carries_anything_outside_the_scope(data, plan, patterns):
    principal = Principal("p", sessions=tuple(patterns))
    path = tempfile.mkdtemp()
    svc = open_service(path + "/store")
    try:
        ids, texts, sessions_of = [], [], {}
        for i, (session, word, rtype, targets) in enumerate(plan):
            text = f"{word} body{i:02d}x"
            rels = [{"type": rtype, "message_id": ids[t]} for t in targets]
            mid = written(svc, session, text, relations=rels, source_message_ids=[ids[t] for t in targets])
            ids.append(mid)
            texts.append(text)
            sessions_of[mid] = session
        for step in data.draw(st.lists(_calls(st.integers(0, len(ids) - 1)), min_size=1, max_size=12)):
            answer = _run(svc, principal, step, ids)
            if answer is None:
                continue
            for mid, text in zip(ids, texts):
                if not principal.sees(sessions_of[mid]):
                    assert mid not in answer, step
                    assert text not in answer, step
            for session in SESSIONS:
                if not principal.sees(session):
                    assert session not in answer, step
    finally:
        svc.close()
        shutil.rmtree(path)


def _run(svc, principal: Principal, step: tuple, ids: list[str]) -> str | None:
    kind = step[0]
    try:
        if kind == "search":
            flt = json.dumps({"superseded": step[3]})
            args = {"query": step[1], "filters_json": flt, "context_size": step[4]}
            if step[2] is not None:
                args["session_id"] = step[2]
            body = call(svc, "search_messages", principal, **args)
        elif kind == "history":
            body = call(svc, "read_messages", principal, session_id=step[1])
        elif kind == "sessions":
            body = call(svc, "read_messages", principal, view="sessions")
        elif kind == "health":
            body = call(svc, "get_system_health", principal)
        elif kind == "rebuild":
            body = call(svc, "rebuild_index", principal)
        elif kind in ("content", "context", "revisions"):
            body = call(svc, "read_messages", principal, view=kind, message_id=ids[step[1]])
        elif kind == "update":
            body = call(svc, "update_message", principal, message_id=ids[step[1]], content="updated text")
        elif kind == "relate":
            rel = json.dumps({"relations": [{"type": "supersedes", "message_id": m} for m in ids[:3]]})
            body = call(svc, "update_message", principal, message_id=ids[step[1]], metadata_json=rel)
        elif kind == "delete":
            body = call(svc, "delete_message", principal, message_id=ids[step[1]])
        else:
            meta = json.dumps({"relations": [{"type": "related_to", "message_id": ids[step[2]]}],
                               "source_message_ids": [ids[step[2]]]})
            body = call(svc, "write_message", principal, session_id=step[1], role="user", content="new words",
                        metadata_json=meta)
    except ConvMemError as exc:
        return json.dumps({"code": exc.code, "message": exc.message})
    return json.dumps(body, ensure_ascii=False)


def test_a_principal_with_every_session_sees_what_local_sees(store):
    svc, _ = store
    full = Principal("default")
    assert call(svc, "search_messages", full, query="zebra") == call(svc, "search_messages", LOCAL, query="zebra")
    assert call(svc, "get_system_health", full)["active_messages"] == 4


def test_patterns_match_like_the_shell():
    p = Principal("p", sessions=("proj-a/*", "x?", "[ab]c"))
    assert p.sees("proj-a/1") and p.sees("proj-a/deep/er") and p.sees("xy") and p.sees("bc")
    assert not p.sees("proj-b/1") and not p.sees("xyz") and not p.sees("cc") and not p.sees("proj-a")
    assert Principal("q").sees("anything") and not Principal("q").limited


def test_metadata_written_stays_stored_unchanged(store):
    svc, ids = store
    stored = call(svc, "read_messages", LOCAL, view="context", message_id=ids["inside"])["message"]["metadata"]
    assert stored["source_message_ids"] == [ids["outside"]]      # shown to a scoped reader without it


def test_the_worked_example_of_docs_http(svc):
    """Two agents share proj-a/*, a read-only third limited to sandbox/* is kept out."""
    planner, coder = Principal("planner", sessions=("proj-a/*",)), Principal("coder", sessions=("proj-a/*",))
    intern = Principal("intern", read_only=True, sessions=("sandbox/*",))
    mid = written(svc, "proj-a/plan", "ship the parser on Friday", planner)
    assert [r["message_id"] for r in call(svc, "search_messages", coder, query="parser Friday")["results"]] == [mid]
    revs = call(svc, "read_messages", coder, view="revisions", message_id=mid)["revisions"]
    assert revs[0]["principal"] == "planner"
    assert call(svc, "search_messages", intern, query="parser Friday")["results"] == []
    assert call(svc, "read_messages", intern, view="sessions")["sessions"] == []
    with pytest.raises(NotFoundError):
        call(svc, "read_messages", intern, view="context", message_id=mid)
    with pytest.raises(ValidationError):
        written(svc, "proj-a/plan", "sneaky", intern)
