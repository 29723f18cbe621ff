"""The ``times`` index kept as arrays (projections.index.times): every window
is exactly the keys a walk over the index finds, whatever was written,
written out of order, updated or deleted since the arrays were read."""

from __future__ import annotations

import shutil
import tempfile

from helpers import Clock
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import open_service, write

from projections import stats
from projections.index import times
from projections.index.arrays import tail_docnos
from projections.index.layout import TIMES, key_range, time_key

T0 = 1_720_843_200_000


def walked(tx, lo: int, end: int) -> list[int]:
    """The window's docnos, key by key from the index."""
    with tx.txn.cursor(db=tx.db(TIMES)) as cur:
        keys = key_range(cur, time_key(lo, 0), time_key(end, 0))
    return tail_docnos(b"".join(keys), len(time_key(0, 0))).tolist()


def check_windows(svc, stamps: list[int]) -> None:
    """Windows around every timestamp written (edges, empty and inverted ones
    included), with and without a cap, against the walk."""
    edges = sorted({0, *stamps, *(s + 1 for s in stamps), (1 << 64) - 1})
    with svc.store.read() as tx:
        st_ = stats.read(tx)
        changes = (st_["deleted"],)
        for lo in edges[::2]:
            for end in edges[1::3]:
                want = walked(tx, lo, end)
                assert times.window(tx, lo, end, changes).tolist() == want
                capped = times.window(tx, lo, end, changes, 2)
                assert (capped is None) == (len(want) > 2)
                assert capped is None or capped.tolist() == want


_OPS = st.lists(st.one_of(st.tuples(st.just("write"), st.integers(-3, 3)),
                          st.tuples(st.just("delete"), st.integers(0, 50)),
                          st.tuples(st.just("update"), st.integers(0, 50)),
                          st.just(("check", 0)), st.just(("check", 0))), max_size=25)


@settings(max_examples=30, deadline=None)
@given(ops=_OPS)
def test_windows_from_the_kept_arrays_are_the_walked_keys(ops):
    """Writes one millisecond apart or going back (keys put before the last),
    updates and deletes, with windows checked between them: each answer is
    the walk's, whether the arrays were extended, found stale, or read again."""
    path = tempfile.mkdtemp(prefix="times-")
    clock = Clock(now=T0)
    svc = open_service(path, clock)
    try:
        ids, stamps = [], []
        for op, arg in ops:
            if op == "write":
                clock.now += arg
                ids.append(write(svc, f"note {len(ids)}"))
                stamps.append(clock.now)
            elif op == "delete" and ids:
                svc.delete_message(ids.pop(arg % len(ids)), None)
            elif op == "update" and ids:
                svc.update_message(ids[arg % len(ids)], f"changed {arg}", {}, None)
            elif op == "check":
                check_windows(svc, stamps)
        check_windows(svc, stamps)
    finally:
        svc.close()
        shutil.rmtree(path, ignore_errors=True)


def test_messages_written_after_the_arrays_were_read_extend_them(store_path):
    """The usual case — new messages, each the newest — appends to the arrays
    kept (no second reading of the index), and windows see the new messages."""
    clock = Clock(now=T0)
    svc = open_service(store_path, clock)
    try:
        for i in range(5):
            clock.now = T0 + i
            write(svc, f"note {i}")
        check_windows(svc, [T0 + i for i in range(5)])
        with svc.store.read() as tx:
            kept = tx.caches.slot(times.Times)
        first = kept.kept
        for i in range(5, 8):
            clock.now = T0 + i
            write(svc, f"note {i}")
            check_windows(svc, [T0 + i for i in range(i + 1)])
        assert kept.kept is not None and first is not None and kept.kept.n == 8
        assert kept.kept.buffer is first.buffer                   # extended in place
    finally:
        svc.close()


def test_a_delete_or_a_message_written_in_the_past_is_seen_by_the_next_window(store_path):
    """Keys removed, or put before the last one kept, with as many keys after
    as before: the arrays are not taken for the index's."""
    clock = Clock(now=T0 + 10)
    svc = open_service(store_path, clock)
    try:
        ids = [write(svc, f"note {i}") for i in range(4)]
        check_windows(svc, [T0 + 10])
        svc.delete_message(ids[1], None)
        clock.now = T0 + 20
        write(svc, "after the delete")                    # as many keys as before
        check_windows(svc, [T0 + 10, T0 + 20])
        clock.now = T0 + 5
        write(svc, "in the past")                         # before every key kept
        clock.now = T0 + 30
        write(svc, "and one after")
        check_windows(svc, [T0 + 5, T0 + 10, T0 + 20, T0 + 30])
    finally:
        svc.close()
