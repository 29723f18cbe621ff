"""The LMDB event store: opening, verification, recovery, growth, transactions."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import os
import subprocess
import sys
import threading
import weakref

import lmdb
import pytest
from strategies import open_service, v1_event_bytes, write

from eventstore import codec
from eventstore.errors import CorruptStoreError, InternalError, StoreIOError
from eventstore.events import Message, MessageDeleted, MessageWritten
from eventstore.store import COMPACT_DIR, FORMAT_VERSION, EventStore
from projections import history, search, stats
from projections.index import IndexConfig, pending
from projections.registry import Projector
from projections.search import Filters
from tools.replay import dump_projections

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raw_env(path: str) -> lmdb.Environment:
    """The store's LMDB environment opened directly, to tamper with it."""
    return lmdb.open(path, max_dbs=32, subdir=True)


def tamper_meta(path: str, key: bytes, value: bytes | None) -> None:
    env = raw_env(path)
    try:
        with env.begin(write=True) as txn:
            meta = env.open_db(b"meta", txn=txn)
            if value is None:
                txn.delete(key, db=meta)
            else:
                txn.put(key, value, db=meta)
    finally:
        env.close()


def append_raw_events(path: str, events: list) -> None:
    """Append events to the log without running any projector (a projection lag)."""
    env = raw_env(path)
    try:
        with env.begin(write=True) as txn:
            log = env.open_db(b"events", txn=txn)
            with txn.cursor(db=log) as cur:
                seq = codec.seq_of(cur.key()) if cur.last() else 0
            for event in events:
                seq += 1
                txn.put(codec.seq_key(seq), codec.encode_event(event), db=log)
    finally:
        env.close()


def file_digest(path: str) -> str:
    with open(os.path.join(path, "data.mdb"), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


# ------------------------------------------------------------------ opening
def test_a_new_store_starts_empty_at_the_current_format_version(svc):
    report = svc.health()
    assert report["format_version"] == FORMAT_VERSION == 2
    assert report["last_sequence"] == 0 and report["active_messages"] == 0
    assert report["io"] == {"write_bytes": 0, "write_calls": 0, "flush_calls": 0,
                            "truncate_calls": 0, "replace_calls": 0}
    assert report["snapshot_valid"] is True and report["recovered_tail"] is False


def test_the_store_directory_and_its_files_are_private(svc, store_path):
    write(svc, "hello")
    assert os.stat(store_path).st_mode & 0o777 == 0o700
    for name in os.listdir(store_path):
        assert os.stat(os.path.join(store_path, name)).st_mode & 0o077 == 0, name


def test_reopening_a_clean_store_writes_nothing(store_path):
    svc = open_service(store_path)
    write(svc, "first")
    svc.delete_message(write(svc, "second"), None)
    before = svc.health()
    svc.close()
    digest = file_digest(store_path)
    svc = open_service(store_path)
    try:
        after = svc.health()
    finally:
        svc.close()
    assert after == before
    assert file_digest(store_path) == digest


def test_opening_the_same_store_twice_in_one_process_is_refused_and_the_first_stays_usable(svc, store_path):
    with pytest.raises(StoreIOError):
        open_service(store_path)
    assert write(svc, "still works")


def test_a_store_with_a_wrong_format_version_is_refused_as_corrupt(store_path):
    open_service(store_path).close()
    tamper_meta(store_path, b"format_version", (FORMAT_VERSION + 1).to_bytes(8, "big"))
    with pytest.raises(CorruptStoreError, match="format version"):
        open_service(store_path)


def test_a_store_with_events_but_no_format_version_is_refused_as_corrupt(store_path):
    svc = open_service(store_path)
    write(svc, "hello")
    svc.close()
    tamper_meta(store_path, b"format_version", None)
    with pytest.raises(CorruptStoreError):
        open_service(store_path)


def test_a_store_whose_newest_event_does_not_decode_is_refused_as_corrupt(store_path):
    svc = open_service(store_path)
    write(svc, "hello")
    svc.close()
    env = raw_env(store_path)
    with env.begin(write=True) as txn:
        txn.put(codec.seq_key(1), b"\xff\x00garbage", db=env.open_db(b"events", txn=txn))
    env.close()
    with pytest.raises(CorruptStoreError):
        open_service(store_path)


def test_a_projection_watermark_ahead_of_the_log_is_refused_as_corrupt(store_path):
    svc = open_service(store_path)
    write(svc, "hello")
    svc.close()
    tamper_meta(store_path, b"watermark", (5).to_bytes(8, "big"))
    with pytest.raises(CorruptStoreError, match="replay"):
        open_service(store_path)


def test_a_refused_store_is_released_so_it_can_be_repaired_and_reopened(store_path):
    svc = open_service(store_path)
    write(svc, "hello")
    svc.close()
    tamper_meta(store_path, b"watermark", (5).to_bytes(8, "big"))
    with pytest.raises(CorruptStoreError):
        open_service(store_path)
    tamper_meta(store_path, b"watermark", (0).to_bytes(8, "big"))
    svc = open_service(store_path)
    try:
        assert [m["content"] for m in svc.history("s", 10, None)["history"]] == ["hello"]
    finally:
        svc.close()


def test_projections_behind_the_log_are_caught_up_on_open_and_reported(store_path):
    svc = open_service(store_path)
    keep, gone = write(svc, "kept message"), write(svc, "deleted later")
    svc.close()
    late = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
    append_raw_events(store_path, [
        MessageWritten(Message(late, "s", "user", "written by a process that died", 9, 9)),
        MessageDeleted(gone)])
    svc = open_service(store_path)
    try:
        report = svc.health()
        assert report["recovered_tail"] is True and report["snapshot_valid"] is True
        assert report["last_sequence"] == 4 and report["active_messages"] == 2
        assert [m["message_id"] for m in svc.history("s", 10, None)["history"]] == [keep, late]
        live = dump_projections(svc.store)
        svc.store.rebuild_projections()
        assert dump_projections(svc.store) == live
    finally:
        svc.close()


def test_read_models_of_an_older_schema_are_rebuilt_on_open(store_path):
    svc = open_service(store_path)
    write(svc, "hello")
    expected = dump_projections(svc.store)
    svc.close()
    tamper_meta(store_path, b"schema_version", (0).to_bytes(8, "big"))
    svc = open_service(store_path)
    try:
        assert svc.store.recovered_tail is True
        assert dump_projections(svc.store) == expected
    finally:
        svc.close()


@pytest.mark.parametrize("stored", [b"tokens=1 stemmer=2.2.0 unicode=13.0.0 merge_at=256 chunk=128", None],
                         ids=["built by another tokenizer, stemmer and Unicode", "built before fingerprints"])
def test_read_models_built_by_other_code_are_rebuilt_on_open(store_path, caplog, stored):
    svc = open_service(store_path)
    for text in ("hello world", "getUserProfile() failed", "東京の天気"):
        write(svc, text)
    expected = dump_projections(svc.store)
    fingerprint = svc.store.projector.fingerprint
    svc.close()
    tamper_meta(store_path, b"fingerprint", stored)
    with caplog.at_level(logging.INFO, logger="convmem"):
        svc = open_service(store_path)
    try:
        assert svc.store.recovered_tail is True
        assert dump_projections(svc.store) == expected
        with svc.store.read() as tx:
            assert tx.txn.get(b"fingerprint", db=tx.db("meta")) == fingerprint.encode()
    finally:
        svc.close()
    assert "rebuilding them from the log" in caplog.text
    assert "rebuilding the read models: 3/3 events" in caplog.text


def test_a_store_opened_with_other_index_layout_knobs_is_rebuilt_with_them(store_path):
    small = IndexConfig(merge_at=2, chunk=4)
    svc = open_service(store_path)
    ids = [write(svc, f"zebra number {i}") for i in range(5)]
    svc.close()
    svc = open_service(store_path, index_config=small)
    try:
        assert svc.store.recovered_tail is True
        with svc.store.read() as tx:
            assert len(pending(tx)) == 1                 # 5 documents merged 2 at a time
        rebuilt = dump_projections(svc.store)
        svc.store.rebuild_projections()
        assert dump_projections(svc.store) == rebuilt
        assert {r["message_id"] for r in svc.search("zebra", Filters(), 0, 10)["results"]} == set(ids)
    finally:
        svc.close()


def test_a_store_opened_with_the_same_code_is_not_rebuilt(store_path):
    svc = open_service(store_path)
    write(svc, "hello")
    svc.close()
    svc = open_service(store_path)
    try:
        assert svc.store.recovered_tail is False
    finally:
        svc.close()


def test_a_leftover_compaction_directory_is_removed_on_open_and_reported(store_path):
    open_service(store_path).close()
    leftover = os.path.join(store_path, COMPACT_DIR)
    os.makedirs(leftover)
    with open(os.path.join(leftover, "data.mdb"), "wb") as fh:
        fh.write(b"half-written compacted file")
    svc = open_service(store_path)
    try:
        assert not os.path.exists(leftover)
        assert svc.health()["recovered_tail"] is True
    finally:
        svc.close()


# ------------------------------------------------------------- transactions
def test_a_command_that_fails_after_appending_leaves_nothing_behind(svc):
    write(svc, "before")
    before = svc.health()
    dump = dump_projections(svc.store)

    def command(w):
        w.append([MessageWritten(Message(w.new_ids([w.now_ms()])[0], "s", "user", "half", 1, 1))])
        raise ValueError("boom")
    with pytest.raises(InternalError):
        svc.store.execute(command)
    assert svc.health() == before
    assert dump_projections(svc.store) == dump


def test_a_command_that_appends_nothing_counts_no_io(svc):
    before = svc.health()["io"]
    assert svc.store.execute(lambda w: "nothing") == "nothing"
    assert svc.health()["io"] == before


def test_each_command_that_appends_counts_one_write_and_one_flush(svc):
    write(svc, "one")
    write(svc, "two")
    io = svc.health()["io"]
    assert io["write_calls"] == io["flush_calls"] == 2
    with svc.store.read() as tx:
        sizes = [size for _, _, size in svc.store.iter_events(tx)]
    assert io["write_bytes"] == sum(sizes)


def test_a_closed_store_refuses_reads_with_an_io_error(store_path):
    store = EventStore(store_path, Projector())
    store.close()
    with pytest.raises(StoreIOError):
        with store.read():
            pass


# ------------------------------------------------------------------ growth
TINY_MAP = 1 << 17      # room for the sub-databases and a first message, not for sixty


def test_the_map_grows_when_a_write_does_not_fit(store_path):
    svc = open_service(store_path, map_size=TINY_MAP)
    try:
        written = [write(svc, "first")]
        start = svc.store.map_size
        written += [write(svc, f"message {i} " + "x" * 2000) for i in range(59)]
        assert svc.store.map_size > start
        got = svc.history("s", 100, None)["history"]
        assert [m["message_id"] for m in got] == written
        assert svc.health()["active_messages"] == 60
    finally:
        svc.close()


def test_a_bulk_write_gets_room_before_it_starts_and_runs_once(store_path):
    """A bulk transaction (an import's batch) is not run out of map half way and
    run again from its start: the map is grown first, to twice what is used."""
    svc = open_service(store_path, map_size=TINY_MAP)
    runs = []

    def batch(w):
        runs.append(1)
        for i in range(60):
            now = w.now_ms()
            w.append([MessageWritten(Message(w.new_ids([now])[0], "s", "user", f"bulk {i} " + "b" * 2000, now, now))])
    try:
        write(svc, "first")
        svc.store.execute(batch, bulk=True)
        assert runs == [1]
        assert svc.health()["active_messages"] == 61
    finally:
        svc.close()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_bulk_work_keeps_the_collector_on_with_what_was_alive_frozen(store_path):
    """Bulk transactions (an import's batch, a replay) leave the cyclic
    collector on — a serving replica keeps collecting while it catches up —
    with every object alive before them moved out of its passes; a plain
    write freezes nothing."""
    svc = open_service(store_path)
    seen = []

    def command(w):
        seen.append((gc.isenabled(), any(o is marker for o in gc.get_objects()), garbage() is None))
        now = w.now_ms()
        w.append([MessageWritten(Message(w.new_ids([now])[0], "s", "user", "bulk", now, now))])
    try:
        marker = {"alive": ["before"]}
        garbage = weakref.ref(Cycle())           # garbage, not frozen: collected before the freeze
        svc.store.execute(command)
        svc.store.execute(command, bulk=True)
        assert seen[1:] == [(True, False, True)] and seen[0][:2] == (True, True) and gc.isenabled()
        original = svc.store.projector.apply
        svc.store.projector.apply = lambda w, batch: (seen.append(gc.isenabled()), original(w, batch))[1]
        svc.store.rebuild_projections()
        assert seen[2:] == [True] and gc.isenabled()
    finally:
        svc.close()


def test_a_read_transaction_open_in_another_thread_survives_the_map_growing(store_path):
    svc = open_service(store_path, map_size=TINY_MAP)
    first = write(svc, "first")
    start = svc.store.map_size
    inside, release, errors = threading.Event(), threading.Event(), []

    def reader():
        try:
            with svc.store.read() as tx:
                inside.set()
                release.wait()
                assert list(history.after(tx, "s", None, 10)) == [first]
        except BaseException as exc:   # reported to the main thread
            errors.append(exc)

    def writer():
        for i in range(60):
            write(svc, f"message {i} " + "y" * 2000)
    t_read = threading.Thread(target=reader)
    t_read.start()
    inside.wait()
    t_write = threading.Thread(target=writer)
    t_write.start()
    # The writer must grow the map, and can only do so once the reader is done.
    while not svc.store._env.guard.waiting and t_write.is_alive():
        t_write.join(0.005)
    release.set()
    t_read.join()
    t_write.join()
    grown = svc.store.map_size
    svc.close()
    assert errors == []
    assert grown > start


def test_a_map_grown_by_another_process_is_adopted(store_path):
    svc = open_service(store_path, map_size=TINY_MAP)
    try:
        first = write(svc, "from the parent")
        code = (
            "import sys, random\n"
            "from server.service import MemoryService\n"
            "from eventstore.events import Metadata\n"
            f"svc = MemoryService(sys.argv[1], map_size={TINY_MAP})\n"
            "for i in range(60):\n"
            "    svc.write_message('s', 'user', f'child {i} ' + 'z' * 2000, Metadata())\n"
            "svc.close()\n")
        subprocess.run([sys.executable, "-c", code, store_path], cwd=ROOT, check=True, timeout=60)
        got = svc.history("s", 100, None)["history"]
        assert got[0]["message_id"] == first and len(got) == 61
        assert write(svc, "after the child") > got[-1]["message_id"]
    finally:
        svc.close()


def test_statistics_written_once_per_transaction_equal_the_incremental_sum(svc):
    for i in range(5):
        write(svc, f"message number {i}", session=f"s{i % 2}")
    svc.delete_message(write(svc, "to delete"), None)
    with svc.store.read() as tx:
        st = stats.read(tx)
    assert st["active"] == 5 and st["deleted"] == 1
    assert st["body_bytes"] == sum(len(f"message number {i}") for i in range(5))


def test_a_data_file_that_is_not_an_lmdb_file_is_refused_as_corrupt(store_path):
    os.makedirs(store_path)
    with open(os.path.join(store_path, "data.mdb"), "wb") as fh:
        fh.write(b"this is not an LMDB file" * 1000)
    with pytest.raises(CorruptStoreError):
        open_service(store_path)


@contextlib.contextmanager
def full_filesystem(path):
    """A 1 MiB tmpfs at ``path``, filled to the last block (skips where mounting is not allowed)."""
    os.makedirs(path)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", path],
                          capture_output=True, timeout=30)
    if done.returncode != 0:
        pytest.skip("needs mount -t tmpfs (root or CAP_SYS_ADMIN)")
    try:
        with open(os.path.join(path, "filler"), "wb", buffering=0) as fh:
            with contextlib.suppress(OSError):
                while fh.write(b"\1" * 4096):
                    pass
        yield path
    finally:
        subprocess.run(["umount", "-l", path], capture_output=True, timeout=30)


def test_creating_a_store_on_a_full_filesystem_is_an_io_error_not_a_crash(tmp_path):
    with full_filesystem(str(tmp_path / "full")) as mount:
        code = ("import sys\nfrom eventstore.errors import ConvMemError\n"
                "from server.service import MemoryService\n"
                "try:\n    MemoryService(sys.argv[1]).close()\n    print('opened')\n"
                "except ConvMemError as exc:\n    print(exc.code)\n")
        done = subprocess.run([sys.executable, "-c", code, os.path.join(mount, "store")], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.strip() == "IO_ERROR"


# ------------------------------------------------------- older event schema
def test_a_log_written_in_event_schema_1_is_read_the_same_and_compacted_to_schema_2(store_path):
    svc = open_service(store_path)
    try:
        a = write(svc, "alpha keeps its words", session="x", tags=("t",))
        b = write(svc, "beta goes away", session="x")
        write(svc, "gamma in another session", session="y", importance=9)
        svc.update_message(a, "alpha edited words", {"importance": 80}, None)
        svc.delete_message(b, None)
        before = (svc.history("x", 10, None), svc.history("y", 10, None),
                  svc.search("words", search.Filters(), 0, 10))
    finally:
        svc.close()
    env = raw_env(store_path)
    try:
        with env.begin(write=True) as txn:
            log = env.open_db(b"events", txn=txn)
            for key, raw in list(txn.cursor(db=log)):
                txn.put(key, v1_event_bytes(codec.decode_event(raw)), db=log)
            txn.put(b"schema_version", (3).to_bytes(8, "big"), db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()
    svc = open_service(store_path)          # the older read-model schema: rebuilt from the v1 log
    try:
        assert (svc.history("x", 10, None), svc.history("y", 10, None),
                svc.search("words", search.Filters(), 0, 10)) == before
        svc.rebuild()
        with svc.store.read() as tx, tx.txn.cursor(db=tx.db("events")) as cur:
            versions = {codec.loads(raw[4:])[1] for _, raw in cur}
        assert versions == {codec.VERSION}
        assert svc.history("x", 10, None)["history"] == before[0]["history"]
    finally:
        svc.close()
