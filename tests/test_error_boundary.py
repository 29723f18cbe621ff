"""The error boundary: only damaged stored bytes, LMDB and the OS may say
CORRUPT_STORE or IO_ERROR; a bug of ours is INTERNAL_ERROR, logged with its
traceback, and leaves health OK and the store unchanged."""

from __future__ import annotations

import json
import struct

import cbor2
import lmdb
import pytest
from mcp import Client

from eventstore import codec, ids
from eventstore.errors import CorruptStoreError, NotFoundError, StoreIOError, decoding
from projections import history
from projections import search as search_index
from server import render
from server.app import build_server
from server.service import MemoryService

pytestmark = pytest.mark.anyio


def make_store(path: str, n: int = 6) -> list[str]:
    svc = MemoryService(path)
    try:
        from eventstore.events import Metadata
        return [svc.write_message("s", "user", f"hello message {i}", Metadata())["message"]["message_id"]
                for i in range(n)]
    finally:
        svc.close()


async def call(client: Client, name: str, args: dict) -> tuple[bool, dict]:
    result = await client.call_tool(name, args)
    return bool(result.is_error), json.loads(result.content[0].text)


async def health(client: Client) -> dict:
    _, out = await call(client, "get_system_health", {})
    return out


def bug(exc: BaseException):
    def broken(*args, **kwargs):
        raise exc
    return broken


# ------------------------------------------------------------ through MCP
@pytest.mark.parametrize("exc", [ValueError("bug"), struct.error("bug"), IndexError("bug")])
async def test_a_bug_in_the_ranker_is_an_internal_error_and_health_stays_ok(store_path, monkeypatch, caplog, exc):
    make_store(store_path)
    monkeypatch.setattr(search_index, "idf", bug(exc))
    async with Client(build_server(store_path)) as client:
        is_error, out = await call(client, "search_messages", {"query": "hello"})
        assert is_error and out["error"]["code"] == "INTERNAL_ERROR", out
        after = await health(client)
    assert after["status"] == "OK" and after["last_error"] == ""
    assert "Traceback" in caplog.text and "idf" in caplog.text


async def test_a_bug_in_rendering_is_an_internal_error_and_health_stays_ok(store_path, monkeypatch):
    make_store(store_path)
    monkeypatch.setattr(render, "message", bug(ValueError("bug")))
    async with Client(build_server(store_path)) as client:
        is_error, out = await call(client, "read_messages", {"session_id": "s"})
        assert is_error and out["error"]["code"] == "INTERNAL_ERROR", out
        after = await health(client)
    assert after["status"] == "OK" and after["last_error"] == ""


async def test_a_bug_on_the_write_path_is_an_internal_error_and_writes_nothing(store_path, monkeypatch, caplog):
    made = make_store(store_path)
    async with Client(build_server(store_path)) as client:
        before = await health(client)
        _, page = await call(client, "read_messages", {"session_id": "s"})
        monkeypatch.setattr(history, "add", bug(ValueError("bug in a projector")))
        is_error, out = await call(client, "write_message", {"session_id": "s", "role": "user", "content": "x"})
        assert is_error and out["error"]["code"] == "INTERNAL_ERROR", out
        monkeypatch.undo()
        after = await health(client)
        _, page_after = await call(client, "read_messages", {"session_id": "s"})
    assert after == before and after["status"] == "OK"
    assert page_after == page and len(page["history"]) == len(made)
    assert "bug in a projector" in caplog.text and "Traceback" in caplog.text


async def test_a_damaged_stored_record_still_answers_corrupt_store_and_degrades_health(store_path):
    make_store(store_path)
    env = lmdb.open(store_path, max_dbs=64)
    try:
        with env.begin(write=True) as txn:
            txn.put(b"s\x00" + b"\x01" * 5, b"", db=env.open_db(b"history", txn=txn))  # an id of 5 bytes
    finally:
        env.close()
    async with Client(build_server(store_path)) as client:
        is_error, out = await call(client, "read_messages", {"session_id": "s"})
        assert is_error and out["error"]["code"] == "CORRUPT_STORE", out
        after = await health(client)
    assert after["status"] == "DEGRADED" and after["last_error"]


# --------------------------------------------------------- the store alone
def test_an_exception_of_the_callers_inside_a_read_passes_through_unchanged(service):
    with pytest.raises(ValueError, match="mine"):
        with service.store.read():
            raise ValueError("mine")
    with pytest.raises(NotFoundError):
        with service.store.read():
            raise NotFoundError("message_id: no live message has this id")


def test_an_lmdb_failure_inside_a_read_is_translated(service):
    with pytest.raises(StoreIOError):
        with service.store.read():
            raise lmdb.DiskError("x")


def test_a_bug_in_a_command_does_not_mark_the_store_damaged(service):
    def command(w):
        raise KeyError("bug")
    with pytest.raises(Exception) as info:
        service.submit(command)
    assert info.value.code == "INTERNAL_ERROR"
    assert service.health()["status"] == "OK" and service.last_error == ""


# ---------------------------------------------------------------- decoders
@pytest.mark.parametrize("exc", [ValueError("x"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "x"),
                                 struct.error("x"), IndexError("x"), KeyError("x"), TypeError("x")])
def test_decoding_reports_bytes_that_do_not_decode_as_corrupt_store(exc):
    with pytest.raises(CorruptStoreError, match="a history key could not be decoded") as info:
        with decoding("a history key"):
            raise exc
    assert info.value.__cause__ is exc


@pytest.mark.parametrize("exc", [RuntimeError("x"), AttributeError("x"), NotFoundError("x")])
def test_decoding_leaves_other_exceptions_alone(exc):
    with pytest.raises(type(exc)):
        with decoding("a history key"):
            raise exc


def test_the_stores_decoders_report_damage_themselves():
    with pytest.raises(CorruptStoreError):
        codec.loads(b"\xa1garbage")
    with pytest.raises(CorruptStoreError):
        codec.seq_of(b"\x00" * 7)
    with pytest.raises(CorruptStoreError):
        codec.metadata_from_list(cbor2.loads(cbor2.dumps(5)))
    with pytest.raises(CorruptStoreError):
        ids.to_str(b"\x01" * 15)
