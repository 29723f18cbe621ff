"""Group commit: commands gathered into one transaction give exactly what one
writer running them one by one gives — the same outcomes, the same log, the
same read models — and a failing command fails alone."""

from __future__ import annotations

import random
import threading

import pytest
from helpers import Clock
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import open_service

from eventstore.errors import ConflictError, NotFoundError
from eventstore.events import Message, MessageDeleted, MessageWritten
from eventstore.events import Metadata as Meta
from eventstore.store import EventStore, WriteTx
from projections import history, messages
from projections.registry import Projector


def _write(session: str, content: str):
    def command(w: WriteTx):
        now = w.now_ms()
        msg = Message(w.new_ids([now])[0], session, "user", content, now, now, 1, Meta())
        w.append([MessageWritten(msg)])
        return msg.message_id
    return command


def _delete_newest(session: str):
    """Delete the session's newest message; NOT_FOUND (before appending) when it has none."""
    def command(w: WriteTx):
        ends = history.first_last(w, session)
        if ends is None:
            raise NotFoundError("session_id: no live message")
        w.append([MessageDeleted(ends[1])])
        return ends[1]
    return command


def _fails_after_appending(session: str, content: str):
    def command(w: WriteTx):
        _write(session, content)(w)
        raise ConflictError("expected_revision: refused after appending")
    return command


# Commands refuse before appending (as the service's do): such a group is one
# transaction, compared byte for byte.  One failing after appending makes the group
# run again command by command, which reads the clock and ids again: checked below
# by content rather than bytes.
OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from("ab"), st.text("xyz ", max_size=12)),
    st.tuples(st.just("delete"), st.sampled_from("ab"), st.just("")),
)


def _command(op):
    kind, session, content = op
    return {"write": _write, "delete": lambda s, _c: _delete_newest(s),
            "fail_after": _fails_after_appending}[kind](session, content)


def _open(path) -> EventStore:
    return EventStore(str(path), Projector(), clock=Clock(step=1), rng=random.Random(7))


def _outcome(ok: bool, value) -> tuple:
    return (True, value) if ok else (False, type(value).__name__, value.message)


def _dump(store: EventStore) -> dict:
    """Every record of every sub-database, the I/O counters (one flush per group) and
    the random cursor secret aside."""
    with store.read() as tx:
        out = {}
        for name, db in tx.dbs.items():
            with tx.txn.cursor(db=db) as cur:
                out[name] = [(bytes(k), bytes(v)) for k, v in cur
                             if not (name == "meta" and bytes(k) in (b"io", b"secret"))]
        return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OPS, min_size=1, max_size=24), cuts=st.lists(st.integers(1, 6), min_size=24, max_size=24))
def test_any_grouping_of_commands_gives_what_one_writer_gives(tmp_path_factory, ops, cuts):
    base = tmp_path_factory.mktemp("group")
    grouped, alone = _open(base / "grouped"), _open(base / "alone")
    try:
        expected = []
        for op in ops:
            try:
                expected.append(_outcome(True, alone.execute(_command(op))))
            except (NotFoundError, ConflictError) as exc:
                expected.append(_outcome(False, exc))
        got, i, cut = [], 0, iter(cuts)
        while i < len(ops):
            group = ops[i:i + next(cut)]
            got += [_outcome(ok, v) for ok, v in grouped.execute_many([_command(op) for op in group])]
            i += len(group)
        assert got == expected
        assert _dump(grouped) == _dump(alone)
    finally:
        grouped.close()
        alone.close()


def test_a_refused_command_in_a_group_fails_alone_and_the_others_commit_in_one_flush(tmp_path):
    store = _open(tmp_path / "s")
    try:
        outcomes = store.execute_many([_write("a", "one"), _delete_newest("empty"), _write("a", "two"),
                                       _fails_after_appending("a", "doomed"), _write("a", "three")])
        assert [ok for ok, _ in outcomes] == [True, False, True, False, True]
        assert isinstance(outcomes[1][1], NotFoundError) and isinstance(outcomes[3][1], ConflictError)
        with store.read() as tx:
            contents = [messages.load(tx, messages.get(tx, m)).content for m in history.after(tx, "a", None, 10)]
            io = store.io_counters(tx.txn)
        assert contents == ["one", "two", "three"]
        assert io["write_calls"] == 3
    finally:
        store.close()


def test_concurrent_writers_are_gathered_into_one_commit_each_answered_with_its_own_result(tmp_path):
    service = open_service(str(tmp_path / "s"))
    gate, entered = threading.Event(), threading.Event()

    def blocker(w: WriteTx):
        entered.set()
        gate.wait()
        return "first"
    results: dict[int, object] = {}

    def writer(i: int) -> None:
        try:
            results[i] = service.write_message(f"s{i % 3}", "user", f"message {i}", Meta())["message"]
        except Exception as exc:           # kept, so the assertion below shows it
            results[i] = exc
    try:
        first = threading.Thread(target=lambda: results.setdefault(-1, service.committer.submit(blocker)))
        first.start()
        entered.wait()
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(15)]
        for t in threads:
            t.start()
        while service.committer._pending < 16:     # all submitted: queued behind the blocked commit
            threading.Event().wait(0.001)
        gate.set()
        for t in [first, *threads]:
            t.join()
        assert results[-1] == "first"
        assert service.committer.groups == 2 and service.committer.commands == 16
        assert service.committer.lone == 1        # the blocker, alone when it came, ran in its own thread
        for i in range(15):
            assert results[i]["content"] == f"message {i}"
        health = service.health()
        assert health["active_messages"] == 15
        assert (health["io"]["write_calls"], health["io"]["flush_calls"]) == (15, 1)
    finally:
        service.close()


@pytest.mark.parametrize("clients", [16])
def test_many_threads_updating_with_expected_revision_see_each_conflict_exactly_once(tmp_path, clients):
    service = open_service(str(tmp_path / "s"))
    try:
        target = service.write_message("s", "user", "v0", Meta())["message"]["message_id"]
        outcomes: list[str] = []
        lock = threading.Lock()

        def client(i: int) -> None:
            for round_ in range(20):
                current = service.content_range(target, 0, 100, None)["content_range"]["revision"]
                try:
                    service.update_message(target, f"c{i}-{round_}", {}, current)
                    result = "ok"
                except ConflictError:
                    result = "conflict"
                with lock:
                    outcomes.append(result)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        final = service.content_range(target, 0, 100, None)["content_range"]["revision"]
        assert len(outcomes) == clients * 20
        assert final == 1 + outcomes.count("ok")
        assert service.health()["update_records"] == outcomes.count("ok")
    finally:
        service.close()


def test_a_lone_writer_commits_in_its_own_thread_and_gets_its_own_error(tmp_path):
    service = open_service(str(tmp_path / "s"))
    try:
        seen: list[threading.Thread] = []

        def command(w: WriteTx):
            seen.append(threading.current_thread())
            return _write("a", "one")(w)
        message_id = service.committer.submit(command)
        with pytest.raises(NotFoundError):
            service.committer.submit(_delete_newest("empty"))
        assert seen == [threading.current_thread()]
        assert (service.committer.lone, service.committer.groups) == (1, 1)
        health = service.health()
        assert health["active_messages"] == 1
        assert (health["io"]["write_calls"], health["io"]["flush_calls"]) == (1, 1)
        with service.store.read() as tx:
            assert messages.get(tx, message_id) is not None
    finally:
        service.close()
