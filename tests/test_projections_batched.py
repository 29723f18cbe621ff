"""The read models do not depend on how the log is cut into batches: events
appended a batch at once (``WriteTx.append``, the replay's batches) leave
every sub-database byte for byte as appending them in batches of one, each in
a transaction of its own, does."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import SESSIONS, metadata, roles

from eventstore import ids
from eventstore.events import Message, MessageDeleted, MessageUpdated, MessageWritten
from eventstore.store import EventStore
from projections.index import IndexConfig
from projections.registry import Projector

# small enough that a few dozen messages merge pending records, cut chunks and hand batches over
SMALL = IndexConfig(merge_at=3, chunk=4, build_batch=2, bulk_hold=5, second_process=False)
WORDS = ("deploy", "failed", "billing", "retry", "会議", "zq")


def message_id(n: int, back: int = 0) -> str:
    """The ``n``th message's id; ``back`` ms earlier than its turn (an id lower than earlier messages')."""
    return ids.to_str(((1_700_000_000_000 + n - back) << 80 | n).to_bytes(16, "big"))


@st.composite
def logs(draw) -> list:
    """A log of messages written, updated and deleted across sessions (updates
    and deletes of live messages; relations to earlier and unknown ids; now
    and then a message whose id sorts before earlier ones', as the log allows)."""
    events: list = []
    live: dict[str, int] = {}            # id -> revision
    for n in range(1, draw(st.integers(1, 40)) + 1):
        op = draw(st.sampled_from(("write", "write", "write", "update", "delete"))) if live else "write"
        text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=6)))
        if op == "write":
            mid = message_id(n, draw(st.sampled_from((0, 0, 0, 0, 5, 100))))
            meta = draw(metadata(list(live)))
            events.append(MessageWritten(Message(mid, draw(st.sampled_from(SESSIONS)), draw(roles), text,
                                                 1_700_000_000_000 + n - draw(st.integers(0, 3)),
                                                 1_700_000_000_000 + n, 1, meta)))
            live[mid] = 1
            continue
        target = draw(st.sampled_from(sorted(live)))
        if op == "delete":
            del live[target]
            events.append(MessageDeleted(target))
        else:
            live[target] += 1
            events.append(MessageUpdated(target, live[target], 1_700_000_000_000 + n,
                                         draw(st.none() | st.just(text)), draw(metadata(list(live)))))
    return events


def cut(events: list, sizes: list[int]) -> list[list]:
    """``events`` in consecutive runs of ``sizes`` (the rest in one more run)."""
    runs, at = [], 0
    for size in sizes:
        if at < len(events):
            runs.append(events[at:at + size])
            at += size
    return runs + ([events[at:]] if at < len(events) else [])


def dump(store: EventStore) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every sub-database's pairs but ``meta``'s (the I/O counters count transactions)."""
    out = {}
    with store.read() as tx:
        for name in ["events", *store.projector.db_specs]:
            with tx.txn.cursor(db=tx.db(name)) as cur:
                out[name] = [(bytes(k), bytes(v)) for k, v in cur.iternext()] if cur.first() else []
        out["watermark"] = [(b"", str(store.watermark(tx)).encode())]
    return out


def one_by_one(path: str, events: list) -> dict:
    with EventStore(path, Projector(SMALL)) as store:
        for event in events:
            store.execute(lambda w, event=event: w.append([event]))
        return dump(store)


def batched(path: str, runs: list[list], bulk: bool) -> tuple[dict, dict]:
    """The read models after appending each run at once, and after replaying that log."""
    with EventStore(path, Projector(SMALL)) as store:
        for run in runs:
            store.execute(lambda w, run=run: w.append(run), bulk=bulk)
        appended = dump(store)
        store.rebuild_projections()
        return appended, dump(store)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.lists(st.integers(1, 12), max_size=6), st.booleans())
def test_events_projected_in_batches_leave_the_bytes_of_events_projected_one_by_one(events, sizes, bulk):
    with tempfile.TemporaryDirectory() as each, tempfile.TemporaryDirectory() as runs:
        expected = one_by_one(each, events)
        appended, replayed = batched(runs, cut(events, sizes), bulk)
    assert appended == expected
    assert replayed == expected


def test_a_batch_appends_its_events_with_consecutive_sequence_numbers_and_their_sizes():
    events = [MessageWritten(Message(message_id(n), "s", "user", f"text {n}", 1_700_000_000_000 + n,
                                     1_700_000_000_000 + n)) for n in range(1, 4)]
    with tempfile.TemporaryDirectory() as path, EventStore(path, Projector(SMALL)) as store:
        store.execute(lambda w: w.append([events[0]]))

        def rest(w):
            w.append(events[1:])
            return list(w.appended)
        appended = store.execute(rest)
        with store.read() as tx:
            stored = [(seq, size) for seq, _, size in store.iter_events(tx)]
            assert store.watermark(tx) == 3
    assert appended == stored[1:] == [(2, stored[1][1]), (3, stored[2][1])]
