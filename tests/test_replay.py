"""The replay tool: rebuild every read model from the log, or verify them byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys

import lmdb
import pytest
from strategies import open_service, write

from tools import replay

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(path: str) -> dict:
    svc = open_service(path)
    try:
        a = write(svc, "alpha message", tags=("t1",))
        b = write(svc, "beta message", session="other", relations=(("depends_on", a),))
        svc.update_message(a, "alpha, edited", {"summary": "sum"}, None)
        svc.delete_message(write(svc, "gamma message"), None)
        svc.update_message(b, None, {"memory_kind": "semantic"}, None)
        return replay.dump_projections(svc.store)
    finally:
        svc.close()


def dump(path: str) -> dict:
    svc = open_service(path)
    try:
        return replay.dump_projections(svc.store)
    finally:
        svc.close()


def damage_history(path: str) -> None:
    env = lmdb.open(path, max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(b"history", txn=txn)
            with txn.cursor(db=db) as cur:
                assert cur.first()
                cur.delete()
    finally:
        env.close()


def test_replaying_the_log_reproduces_the_live_read_models_byte_for_byte(store_path, capsys):
    live = build(store_path)
    assert replay.run(store_path) == 0
    assert dump(store_path) == live
    err = capsys.readouterr().err
    assert "rebuilt the read models from 6 events" in err


def test_verify_passes_on_a_healthy_store_and_changes_nothing(store_path, capsys):
    live = build(store_path)
    assert replay.run(store_path, verify=True) == 0
    assert "verify OK" in capsys.readouterr().err
    assert dump(store_path) == live


def test_verify_names_a_damaged_read_model_and_replay_repairs_it(store_path, capsys):
    live = build(store_path)
    damage_history(store_path)
    assert replay.run(store_path, verify=True) == 1
    err = capsys.readouterr().err
    assert "'history' differs" in err and "FAILED" in err
    assert replay.run(store_path) == 0
    assert dump(store_path) == live
    assert replay.run(store_path, verify=True) == 0


def test_replay_of_a_missing_store_fails_without_creating_it(tmp_path, capsys):
    missing = str(tmp_path / "nothing-here")
    assert replay.main([missing]) == 2
    assert not os.path.exists(missing)
    assert "no store" in capsys.readouterr().err


def test_replay_of_a_store_it_cannot_verify_reports_corrupt_store(store_path, capsys):
    build(store_path)
    env = lmdb.open(store_path, max_dbs=32)
    with env.begin(write=True) as txn:
        txn.put(b"format_version", (99).to_bytes(8, "big"), db=env.open_db(b"meta", txn=txn))
    env.close()
    assert replay.main([store_path]) == 2
    assert "CORRUPT_STORE" in capsys.readouterr().err


def test_the_replay_command_runs_as_a_module_and_keeps_stdout_empty(store_path):
    build(store_path)
    done = subprocess.run([sys.executable, "-m", "tools.replay", store_path, "--verify"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "verify OK" in done.stderr


@pytest.mark.parametrize("events", [0, 1])
def test_replay_of_a_store_with_few_events_leaves_the_projections_valid(store_path, events):
    svc = open_service(store_path)
    try:
        for i in range(events):
            write(svc, f"m{i}")
        svc.store.rebuild_projections()
        report = svc.health()
        assert report["snapshot_valid"] is True and report["active_messages"] == events
    finally:
        svc.close()


def test_a_schema_upgrade_drops_sub_databases_the_old_schema_left_behind(tmp_path):
    import lmdb

    from eventstore.events import Metadata
    from server.service import MemoryService

    path = str(tmp_path / "store")
    svc = MemoryService(path)
    svc.write_message("s", "user", "hello", Metadata(tags=("private-tag",)))
    svc.close()
    env = lmdb.open(path, max_dbs=40)
    with env.begin(write=True) as txn:
        old = env.open_db(b"tag_index", txn=txn, dupsort=True, dupfixed=True)
        txn.put(b"private-tag", bytes(6), db=old)
        txn.put(b"schema_version", (1).to_bytes(8, "big"), db=env.open_db(b"meta", txn=txn))
    env.close()

    svc = MemoryService(path)
    assert svc.health()["recovered_tail"] is True
    svc.close()
    env = lmdb.open(path, max_dbs=40)
    with env.begin() as txn:
        names = [k for k, _ in txn.cursor()]
    env.close()
    assert b"tag_index" not in names
    assert b"postings" in names
