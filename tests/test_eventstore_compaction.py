"""Compaction (rebuild_index): a fresh file of live messages replaces the old one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest
from strategies import open_service, write

from eventstore.compaction import compact
from eventstore.errors import BusyError, StoreIOError
from eventstore.store import COMPACT_DIR
from projections.search import Filters
from tools.replay import dump_projections

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "Quixotically Zanzibarian Flumpet"   # distinctive, mixed case, in deleted text only


def populate(service) -> dict[str, str]:
    ids = {"kept": write(service, "kept message about kafka", tags=("keep",)),
           "updated": write(service, "first draft", summary="draft summary"),
           "deleted": write(service, f"the {SECRET} is deleted", tags=("flumpet-tag",),
                            summary=f"summary of the {SECRET}"),
           "other": write(service, "another session", session="t")}
    service.update_message(ids["updated"], "final text", {"summary": "final summary"}, None)
    service.update_message(ids["updated"], None, {"importance": 90}, 2)
    service.delete_message(ids["deleted"], None)
    return ids


@contextlib.contextmanager
def held_open_by_another_process(path: str):
    """A child process that has the store open until the block ends."""
    code = ("import sys\nfrom server.service import MemoryService\n"
            "svc = MemoryService(sys.argv[1])\nprint('open', flush=True)\n"
            "sys.stdin.read()\nsvc.close()\n")
    child = subprocess.Popen([sys.executable, "-c", code, path], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == "open"
        yield child
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()


def try_compact_in_another_process(path: str) -> str:
    code = ("import sys\nfrom server.service import MemoryService\n"
            "svc = MemoryService(sys.argv[1])\n"
            "try:\n    svc.rebuild()\n    print('OK')\n"
            "except Exception as exc:\n    print(getattr(exc, 'code', repr(exc)))\n"
            "finally:\n    svc.close()\n")
    done = subprocess.run([sys.executable, "-c", code, path], cwd=ROOT, text=True,
                          capture_output=True, timeout=60, check=True)
    return done.stdout.strip()


def test_compaction_keeps_every_live_message_exactly_as_it_was(svc):
    ids = populate(svc)
    before = {sid: svc.history(sid, 100, None) for sid in ("s", "t")}
    sessions = svc.sessions(100, None)
    svc.rebuild()
    assert {sid: svc.history(sid, 100, None) for sid in ("s", "t")} == before
    assert svc.sessions(100, None) == sessions
    got = svc.content_range(ids["updated"], 0, 4096, 3)["content_range"]
    assert got["content"] == "final text" and got["revision"] == 3


def test_compaction_reports_what_it_removed(svc, store_path):
    populate(svc)
    records = svc.health()["last_sequence"]
    result = svc.rebuild()
    assert result["status"] == "OK"
    assert result["messages_indexed"] == 3
    assert result["records_removed"] == records - 3
    assert result["bytes_before"] > 0
    assert result["bytes_after"] == os.path.getsize(os.path.join(store_path, "data.mdb"))


def test_compaction_carries_the_counters_and_clears_what_it_reclaimed(svc):
    populate(svc)
    before = svc.health()
    assert before["dead_bytes"] > 0 and before["update_records"] == 2
    svc.rebuild()
    after = svc.health()
    assert after["dead_bytes"] == 0 and after["update_records"] == 0
    assert after["io"] == dict(before["io"], replace_calls=before["io"]["replace_calls"] + 1)
    assert after["last_sequence"] == before["last_sequence"]
    assert after["active_messages"] == before["active_messages"]
    assert after["session_count"] == before["session_count"]
    assert after["snapshot_valid"] is True and after["status"] == "OK"


def test_the_sequence_never_goes_back_and_ids_keep_increasing_after_compaction(svc):
    ids = populate(svc)
    last = svc.health()["last_sequence"]
    svc.rebuild()
    new = write(svc, "after compaction")
    assert svc.health()["last_sequence"] == last + 1
    assert new > max(ids.values())


def test_a_second_compaction_with_nothing_changed_removes_nothing(svc):
    populate(svc)
    svc.rebuild()
    before = svc.health()
    again = svc.rebuild()
    assert again["records_removed"] == 0 and again["messages_indexed"] == 3
    after = svc.health()
    assert after["last_sequence"] == before["last_sequence"]
    assert after["io"]["replace_calls"] == before["io"]["replace_calls"] + 1


def test_compacting_a_store_with_nothing_live_leaves_an_empty_usable_store(svc):
    svc.delete_message(write(svc, "only one"), None)
    result = svc.rebuild()
    assert result["messages_indexed"] == 0 and result["records_removed"] == 2
    report = svc.health()
    assert report["active_messages"] == 0 and report["last_sequence"] == 2
    assert svc.sessions(10, None)["sessions"] == []
    write(svc, "a new start")
    assert svc.health()["last_sequence"] == 3


def test_a_history_cursor_issued_before_compaction_still_pages_after_it(svc):
    written = [write(svc, f"message {i}") for i in range(5)]
    page = svc.history("s", 2, None)
    svc.rebuild()
    rest = svc.history("s", 10, page["nextCursor"])
    assert [m["message_id"] for m in rest["history"]] == written[2:]


def test_the_read_models_of_a_compacted_store_equal_a_replay_of_its_log(svc):
    populate(svc)
    svc.rebuild()
    live = dump_projections(svc.store)
    svc.store.rebuild_projections()
    assert dump_projections(svc.store) == live


def test_search_after_compaction_finds_live_messages_and_not_deleted_ones(svc):
    ids = populate(svc)
    svc.rebuild()
    found = svc.search("kafka", Filters(), 0, 10)["results"]
    assert [r["message_id"] for r in found] == [ids["kept"]]
    assert svc.search("Zanzibarian", Filters(), 0, 10)["results"] == []


def _store_bytes(path: str) -> bytes:
    chunks = []
    for folder, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(folder, name), "rb") as fh:
                chunks.append(fh.read())
    return b"\n".join(chunks)


def test_deleted_and_superseded_text_is_in_no_file_of_the_store_after_compaction(store_path):
    svc = open_service(store_path)
    try:
        populate(svc)
        assert SECRET.encode() in _store_bytes(store_path)     # logical delete keeps the bytes
        svc.rebuild()
    finally:
        svc.close()
    data = _store_bytes(store_path)
    for text in (SECRET, "Zanzibarian", "flumpet-tag", "first draft", "draft summary"):
        for variant in {text, text.lower(), text.upper(), text.casefold()}:
            assert variant.encode("utf-8") not in data, variant
    assert b"final text" in data and b"kept message about kafka" in data


def test_compaction_is_busy_while_another_process_has_the_store_open(svc, store_path):
    populate(svc)
    with held_open_by_another_process(store_path):
        before = svc.health()
        with pytest.raises(BusyError) as info:
            svc.rebuild()
        assert info.value.code == "BUSY"
        assert svc.health() == before
        assert write(svc, "the store stays usable")
    assert svc.rebuild()["status"] == "OK"


def test_a_busy_compaction_keeps_this_process_share_of_the_lock(svc, store_path):
    populate(svc)
    with held_open_by_another_process(store_path):
        with pytest.raises(BusyError):
            svc.rebuild()
    # The holder is gone; this process still has the store open, so another
    # process must not be able to take it for compaction.
    assert try_compact_in_another_process(store_path) == "BUSY"
    assert svc.history("s", 10, None)["history"]


def test_a_compaction_that_cannot_replace_the_file_leaves_the_old_store_whole(svc, store_path, monkeypatch):
    populate(svc)
    before, history = svc.health(), svc.history("s", 100, None)

    def refuse(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(StoreIOError):
        svc.rebuild()
    monkeypatch.undo()
    assert not os.path.exists(os.path.join(store_path, COMPACT_DIR))
    assert svc.history("s", 100, None) == history
    after = svc.health()
    assert after["io"] == before["io"] and after["last_sequence"] == before["last_sequence"]
    assert after["last_error"] and after["status"] == "DEGRADED"
    assert svc.rebuild()["messages_indexed"] == 3


def test_a_compaction_that_fails_while_writing_leaves_the_old_store_and_no_temporary_files(svc, store_path):
    populate(svc)
    history = svc.history("s", 100, None)

    def broken(tx):
        def events():
            yield from ()
            raise OSError(5, "Input/output error")
        return 3, events()
    with pytest.raises(StoreIOError):
        compact(svc.store, broken)
    assert not os.path.exists(os.path.join(store_path, COMPACT_DIR))
    assert svc.history("s", 100, None) == history
