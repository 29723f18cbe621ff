"""SIGKILL a real writer process at random moments: every acknowledged write survives whole."""

from __future__ import annotations

import random
import signal
import subprocess

from strategies import open_service

from projections.search import Filters
from tools import _proc
from tools.replay import differences

# Writes, updates and deletes through the service; a line is printed (and
# flushed) only after the call returned, i.e. after the commit was synced.
WRITER = r"""
import sys
from eventstore.events import Metadata
from server.service import MemoryService

svc = MemoryService(sys.argv[1])
start = int(sys.argv[2])
mine = []
for i in range(start, start + 100000):
    got = svc.write_message(f"s{i % 3}", "user", f"crash test message number {i} word{i}x", Metadata())
    mid = got["message"]["message_id"]
    mine.append(mid)
    print("W", mid, i, flush=True)
    if i % 5 == 4 and len(mine) >= 3:
        target = mine[-3]
        svc.update_message(target, f"rewritten message word{i}u", {}, None)
        print("U", target, i, flush=True)
    if i % 7 == 6:
        target = mine.pop(0)
        svc.delete_message(target, None)
        print("D", target, i, flush=True)
"""


def run_and_kill(path: str, start: int, acks: int) -> list[list[str]]:
    """Start a writer, read ``acks`` acknowledgements, SIGKILL it; every full line read."""
    child = _proc.start(_proc.python("-c", WRITER, path, str(start)), stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        while len(lines) < acks:
            line = child.stdout.readline()
            assert line, child.stderr.read()
            lines.append(line.split())
        _proc.kill_pid(child.pid)
        rest = child.stdout.read()           # acknowledged before the signal landed
        lines += [ln.split() for ln in rest.splitlines(keepends=True) if ln.endswith("\n")]
    finally:
        _proc.stop(child, timeout=30)
    assert child.returncode == -signal.SIGKILL
    return lines


def check_acknowledged(path: str, acked: dict[str, tuple[str, int]], deleted: set[str]) -> None:
    svc = open_service(path)
    try:
        report = svc.health()
        history = {s: svc.history(s, 1000, None)["history"] for s in ("s0", "s1", "s2")}
        present = {m["message_id"]: m for msgs in history.values() for m in msgs}
        for mid, (word, i) in acked.items():
            assert mid in present, f"acknowledged write {i} lost"
            assert word in present[mid]["content"]
            found = svc.search(word, Filters(), 0, 5)["results"]
            assert mid in [r["message_id"] for r in found]
        assert not deleted & set(present)
        assert report["active_messages"] == len(present)
        assert report["session_count"] == sum(1 for msgs in history.values() if msgs)
        assert report["snapshot_valid"] is True
        assert report["io"]["write_calls"] == report["last_sequence"]
        assert sum(s["message_count"] for s in svc.sessions(100, None)["sessions"]) == len(present)
    finally:
        svc.close()
    assert differences(path) == []


def test_every_acknowledged_write_survives_sigkill_and_nothing_is_half_applied(store_path):
    rng = random.Random(20240713)
    acked: dict[str, tuple[str, int]] = {}
    deleted: set[str] = set()
    start = 0
    for _ in range(3):
        for kind, mid, i in run_and_kill(store_path, start, rng.randrange(5, 60)):
            i = int(i)
            if kind == "W":
                acked[mid] = (f"word{i}x", i)
            elif kind == "U":
                acked[mid] = (f"word{i}u", i)
            else:
                acked.pop(mid, None)
                deleted.add(mid)
            start = i + 1
        check_acknowledged(store_path, acked, deleted)
