"""Several processes on one store at once, and processes killed mid-read.

The short version of ``python -m tools.concurrency``: three real ``convmem
serve`` processes write, update, delete and search one store concurrently;
afterwards nothing is lost or duplicated, ids increase in commit order,
every history and counter is exact.  Then reader slots: processes killed with
SIGKILL while holding read transactions must not leave the LMDB reader table
(256 slots) exhausted.
"""

from __future__ import annotations

import contextlib
import subprocess

from eventstore.events import Metadata
from server.service import MemoryService
from tools import _proc, concurrency

READER_HOG = """
import contextlib, sys
from eventstore.store import EventStore
from projections.registry import Projector
store = EventStore(sys.argv[1], Projector())
held, stack = 0, contextlib.ExitStack()
try:
    for _ in range(int(sys.argv[2])):
        stack.enter_context(store.read())
        held += 1
except Exception:
    pass
print(held, flush=True)
sys.stdin.read()
"""


def test_three_server_processes_on_one_store_lose_nothing_duplicate_nothing_and_count_exactly():
    report = concurrency.run(processes=3, ops=40, seed=11)
    assert report.failures == []
    assert report.replay_verify_failures == []
    assert report.read_models_match_replay
    assert report.writes > 0 and report.updates > 0 and report.deletes > 0 and report.searches > 0
    assert report.events_checked == report.last_sequence == report.writes + report.updates + report.deletes


@contextlib.contextmanager
def hogs(store: str, count: int, slots: int):
    """``count`` processes, each holding up to ``slots`` read transactions, killed with SIGKILL on exit."""
    procs = [_proc.start(_proc.python("-c", READER_HOG, store, str(slots)), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True) for _ in range(count)]
    try:
        yield [int(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            _proc.stop(p, timeout=60)


def read_nested(service: MemoryService, depth: int) -> None:
    """``depth`` read transactions open at once, as concurrent requests hold them."""
    with contextlib.ExitStack() as stack:
        for _ in range(depth):
            stack.enter_context(service.store.read())


def fill(path: str, n: int = 5) -> None:
    service = MemoryService(path)
    try:
        for i in range(n):
            service.write_message("s", "user", f"message {i}", Metadata())
    finally:
        service.close()


def test_readers_killed_mid_read_leave_no_slot_that_stops_the_next_process(store_path):
    fill(store_path)
    held = 0
    for _round in range(2):
        with hogs(store_path, 4, 64) as counts:
            held += sum(counts)
    assert held >= 400                      # more than the table's 256 slots, in two rounds
    service = MemoryService(store_path)
    try:
        read_nested(service, 16)
        assert len(service.history("s", 100, None)["history"]) == 5
        service.write_message("s", "user", "after the kills", Metadata())
    finally:
        service.close()


def test_a_running_server_keeps_reading_after_killed_processes_filled_the_reader_table(store_path):
    fill(store_path)
    service = MemoryService(store_path)
    try:
        with hogs(store_path, 4, 64) as counts:
            assert sum(counts) >= 240
        read_nested(service, 8)
        assert len(service.history("s", 100, None)["history"]) == 5
    finally:
        service.close()
