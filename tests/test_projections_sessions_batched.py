"""Session entries changed many times in one write transaction (as in replay)
end exactly as when each event has its own transaction, and read right meanwhile."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import open_service

from eventstore import ids
from eventstore.events import KINDS, Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from projections import sessions
from tools.replay import dump_projections

SESSIONS = ("a", "b", "c")
operations = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(SESSIONS), st.sampled_from(KINDS)),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("rekind"), st.integers(0, 50), st.sampled_from(KINDS)),
), max_size=40)


def events_of(ops: list) -> list:
    """The events of ``ops``; deletes and re-kinds pick among the live messages."""
    live: dict[str, tuple[str, str]] = {}             # id -> (session, kind)
    events = []
    for n, op in enumerate(ops, 1):
        mid = ids.to_str(n.to_bytes(16, "big"))
        if op[0] == "write":
            live[mid] = (op[1], op[2])
            events.append(MessageWritten(Message(mid, op[1], "user", "x", 1000 + n, 1000 + n, 1,
                                                 Metadata(memory_kind=op[2]))))
        elif live:
            target = sorted(live)[op[1] % len(live)]
            if op[0] == "delete":
                del live[target]
                events.append(MessageDeleted(target))
            else:
                live[target] = (live[target][0], op[2])
                events.append(MessageUpdated(target, n, 1000 + n, None, Metadata(memory_kind=op[2])))
    return events


def model_counts(events: list) -> dict[str, int]:
    session_of, counts = {}, {}
    for e in events:
        if isinstance(e, MessageWritten):
            session_of[e.message.message_id] = e.message.session_id
            counts[e.message.session_id] = counts.get(e.message.session_id, 0) + 1
        elif isinstance(e, MessageDeleted):
            counts[session_of[e.message_id]] -= 1
    return {s: c for s, c in counts.items() if c}


def apply(path: str, events: list, batched: bool) -> dict:
    svc = open_service(path)
    try:
        def all_at_once(w):
            for i, event in enumerate(events):
                w.append([event])
                counts = model_counts(events[:i + 1])
                assert {s: (sessions.get(w, s, w.state.sessions) or [0])[0] for s in SESSIONS} == \
                    {s: counts.get(s, 0) for s in SESSIONS}
                assert sessions.count(w) == len(counts)
        if batched:
            svc.store.execute(all_at_once)
        else:
            for event in events:
                svc.store.execute(lambda w, event=event: w.append([event]))
        return dump_projections(svc.store)
    finally:
        svc.close()


@settings(max_examples=60, deadline=None)
@given(operations)
def test_one_transaction_of_many_events_gives_the_same_read_models_as_one_per_event(ops):
    events = events_of(ops)
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as each:
        assert apply(one, events, batched=True) == apply(each, events, batched=False)
