"""Read model: each session's live messages in creation order."""

from __future__ import annotations

from strategies import write

from projections import history


def ids_after(svc, session, after=None, limit=100):
    with svc.store.read() as tx:
        return list(history.after(tx, session, after, limit))


def ids_before(svc, session, message_id, limit):
    with svc.store.read() as tx:
        return history.before(tx, session, message_id, limit)


def test_a_session_lists_its_messages_in_creation_order(svc):
    a = [write(svc, f"a{i}", session="a") for i in range(3)]
    b = [write(svc, f"b{i}", session="b") for i in range(2)]
    a.append(write(svc, "a3", session="a"))
    assert ids_after(svc, "a") == a
    assert ids_after(svc, "b") == b


def test_paging_after_an_id_continues_strictly_after_it(svc):
    got = [write(svc, f"m{i}") for i in range(7)]
    pages, last = [], None
    while True:
        page = ids_after(svc, "s", last, 3)
        if not page:
            break
        pages.append(page)
        last = page[-1]
    assert pages == [got[0:3], got[3:6], got[6:7]]


def test_paging_after_a_deleted_id_neither_repeats_nor_skips(svc):
    got = [write(svc, f"m{i}") for i in range(5)]
    svc.delete_message(got[2], None)
    assert ids_after(svc, "s", got[2], 10) == got[3:]


def test_sessions_whose_names_share_a_prefix_do_not_leak_into_each_other(svc):
    names = ["a", "a\x01", "ab", "a b", "日本"]
    written = {n: [write(svc, f"{n}{i}", session=n) for i in range(2)] for n in names}
    for name in names:
        assert ids_after(svc, name) == written[name]
        assert ids_before(svc, name, written[name][1], 5) == [written[name][0]]
        with svc.store.read() as tx:
            assert history.first_last(tx, name) == (written[name][0], written[name][1])


def test_before_lists_the_nearest_older_neighbours_oldest_first(svc):
    got = [write(svc, f"m{i}") for i in range(6)]
    assert ids_before(svc, "s", got[4], 2) == got[2:4]
    assert ids_before(svc, "s", got[1], 5) == got[:1]
    assert ids_before(svc, "s", got[0], 5) == []
    assert ids_before(svc, "s", got[4], 0) == []


def test_neighbours_skip_deleted_messages(svc):
    got = [write(svc, f"m{i}") for i in range(5)]
    svc.delete_message(got[1], None)
    svc.delete_message(got[3], None)
    assert ids_before(svc, "s", got[4], 2) == [got[0], got[2]]
    assert ids_after(svc, "s", got[0], 2) == [got[2], got[4]]


def test_neighbours_of_the_last_message_of_the_last_session_are_found(svc):
    write(svc, "other", session="a")
    got = [write(svc, f"m{i}", session="z") for i in range(3)]
    assert ids_before(svc, "z", got[2], 5) == got[:2]
    assert ids_after(svc, "z", got[2], 5) == []


def test_first_and_last_follow_deletes_and_vanish_with_the_session(svc):
    got = [write(svc, f"m{i}") for i in range(3)]
    with svc.store.read() as tx:
        assert history.first_last(tx, "s") == (got[0], got[2])
    svc.delete_message(got[0], None)
    svc.delete_message(got[2], None)
    with svc.store.read() as tx:
        assert history.first_last(tx, "s") == (got[1], got[1])
    svc.delete_message(got[1], None)
    with svc.store.read() as tx:
        assert history.first_last(tx, "s") is None
        assert history.first_last(tx, "never") is None
    assert ids_after(svc, "s") == []


def test_updates_do_not_move_a_message_in_its_history(svc):
    got = [write(svc, f"m{i}") for i in range(3)]
    svc.update_message(got[0], "rewritten", {}, None)
    assert ids_after(svc, "s") == got
