"""``EventStore.execute(command, bulk=True)``: many events in one transaction,
the index work held to the commit, and the read models byte for byte those of
one event per transaction — writes, updates and deletes mixed."""

from __future__ import annotations

import random

from helpers import Clock

from eventstore.events import Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from eventstore.store import EventStore
from projections.index import IndexConfig
from projections.registry import Projector
from server.maintenance import dump_projections

SMALL = IndexConfig(merge_at=8, chunk=4, build_batch=16)


def steps(count: int):
    """Commands: write ``count`` messages, then update every third and delete every fifth."""
    ids: list[str] = []

    def write(n):
        def command(w):
            now = w.now_ms()
            mid = w.new_ids([now])[0]
            ids.append(mid)
            meta = Metadata(tags=(f"t{n % 4}",), relations=(("related_to", ids[0]),) if n else ())
            w.append([MessageWritten(Message(mid, f"s{n % 3}", "user", f"deploy note {n} retry budget", now, now,
                                             1, meta))])
        return command

    def update(n):
        return lambda w: w.append([MessageUpdated(ids[n], 2, w.now_ms(), f"deploy note {n} revised", Metadata())])

    def delete(n):
        return lambda w: w.append([MessageDeleted(ids[n])])
    return ([write(n) for n in range(count)] + [update(n) for n in range(0, count, 3)]
            + [delete(n) for n in range(1, count, 5)])


def test_a_bulk_transaction_leaves_the_bytes_of_one_transaction_per_event(tmp_path):
    dumps = []
    for name, bulk in (("one-by-one", False), ("bulk", True)):
        with EventStore(str(tmp_path / name), Projector(SMALL), clock=Clock(step=1), rng=random.Random(9)) as store:
            commands = steps(60)
            if bulk:
                store.execute(lambda w, commands=commands: [c(w) for c in commands], bulk=True)
            else:
                for c in commands:
                    store.execute(c)
            dumps.append(dump_projections(store))
            store.rebuild_projections()
            assert dump_projections(store) == dumps[-1]
    assert dumps[0] == dumps[1]


def test_ids_drawn_together_are_the_ids_drawn_one_by_one_and_later_ids_come_after_them(tmp_path):
    times = [5, 5, 3, 10**12, 10**12 - 1, 7]
    drawn = []
    for name, together in (("together", True), ("one-by-one", False)):
        with EventStore(str(tmp_path / name), Projector(), rng=random.Random(9)) as store:
            first = store.execute(lambda w, many=together: w.new_ids(times) if many
                                  else [w.new_ids([t])[0] for t in times])
            drawn.append(first + [store.execute(lambda w: w.new_ids([1])[0])])
    assert drawn[0] == drawn[1]
    assert drawn[0] == sorted(set(drawn[0]))


def test_what_a_replay_froze_between_its_batches_is_freed_with_it(tmp_path):
    """A replay freezes what it keeps alive after each batch (``bulk.settle``);
    all of it dies by reference counting when the transaction ends, so
    replaying again and again leaves the frozen objects as the first left them."""
    import gc

    with EventStore(str(tmp_path / "s"), Projector(SMALL)) as store:
        for command in steps(1200):          # more than one replay batch
            store.execute(command)
        store.rebuild_projections()          # what the first one loads for good (modules, memos)
        counts = []
        for _ in range(3):
            store.rebuild_projections()
            counts.append(gc.get_freeze_count())
    assert max(counts) - min(counts) < 200, counts
