"""``convmem backup``: a consistent, private, verified copy taken while another
process keeps writing; it holds every write acknowledged before it began."""

from __future__ import annotations

import json
import os
import threading

from test_mcp_stdio import RawServer, write_args

from server.service import MemoryService
from tools import _proc


def test_a_backup_taken_during_a_write_loop_verifies_and_holds_every_write_acknowledged_before_it(store_path,
                                                                                                   tmp_path):
    server = RawServer(store_path, tmp_path / "stderr.log")
    acked: list[str] = []
    stop = threading.Event()

    def write_loop() -> None:
        i = 0
        while not stop.is_set():
            is_error, body = server.call("write_message", write_args(f"loop message {i}"))
            assert not is_error, body
            acked.append(body["message"]["message_id"])
            i += 1

    try:
        server.initialize()
        for i in range(20):
            acked.append(server.call("write_message", write_args(f"before {i}"))[1]["message"]["message_id"])
        writer = threading.Thread(target=write_loop)
        writer.start()
        try:
            before = list(acked)                       # acknowledged before the backup begins
            dest = tmp_path / "backup"
            done = _proc.run(_proc.python("-m", "server.cli", "backup", str(dest), "--store", store_path))
        finally:
            stop.set()
            writer.join()
    finally:
        server.finish()
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stderr
    assert os.stat(dest).st_mode & 0o077 == 0
    assert all(os.stat(dest / name).st_mode & 0o077 == 0 for name in os.listdir(dest))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".convmem-backup-")]
    copy = MemoryService(str(dest))
    try:
        with copy.snapshot() as (_, live):
            held = {m.message_id for m in live}
    finally:
        copy.close()
    assert set(before) <= held <= set(acked)
    verify = _proc.run(_proc.python("-m", "server.cli", "replay", "--verify", "--store", str(dest)))
    assert verify.returncode == 0, verify.stderr


def test_a_backup_refuses_an_existing_destination_and_restores_by_copying_back(store_path, tmp_path):
    service = MemoryService(store_path)
    service.close()
    (tmp_path / "taken").mkdir()
    done = _proc.run(_proc.python("-m", "server.cli", "backup", str(tmp_path / "taken"), "--store", store_path))
    assert done.returncode == 2 and "exists" in done.stderr
    done = _proc.run(_proc.python("-m", "server.cli", "backup", str(tmp_path / "b"), "--store", store_path))
    assert done.returncode == 0, done.stderr
    health = _proc.run(_proc.python("-m", "server.cli", "health", "--store", str(tmp_path / "b")))
    assert json.loads(health.stdout)["status"] == "OK"


def test_a_compacted_backup_holds_the_same_records_in_a_smaller_file_and_verifies(store_path, tmp_path):
    from eventstore.events import Metadata
    from eventstore.store import EventStore
    from projections.registry import Projector
    from server.maintenance import dump_projections
    service = MemoryService(store_path)
    try:
        ids = [service.write_message(f"s{i % 7}", "user", f"note {i} about the retry budget " * 20,
                                     Metadata(tags=(f"t{i % 3}",)))["message"]["message_id"] for i in range(600)]
        for mid in ids[::2]:                          # freed pages in the store's file
            service.delete_message(mid, None)
    finally:
        service.close()
    copies = {}
    for name, flags in (("plain", []), ("compact", ["--compact"])):
        done = _proc.run(_proc.python("-m", "server.cli", "backup", str(tmp_path / name), *flags,
                                      "--store", store_path))
        assert done.returncode == 0, done.stderr
        with EventStore(str(tmp_path / name), Projector()) as copy, copy.read() as tx:
            events = [(seq, size) for seq, _, size in copy.iter_events(tx)]
            meta = dict(tx.txn.cursor(db=tx.db("meta")))
            copies[name] = (dump_projections(copy), events, meta)
    assert "compacted" in done.stderr
    assert copies["compact"] == copies["plain"]
    sizes = {name: os.path.getsize(tmp_path / name / "data.mdb") for name in copies}
    assert sizes["compact"] < sizes["plain"]
