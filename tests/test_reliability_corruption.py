"""Damaged stores: refused with CORRUPT_STORE and a clear message, never a
traceback, never silently wrong results; damaged read models are repaired by
``convmem replay``.

Damage is done with LMDB directly (the store closed): an event overwritten
with garbage, ``format_version`` set to 3, the projection watermark moved past
the log, entries deleted from the ``history``/``postings``/``messages``
read models, a page header or a letter of a message changed in ``data.mdb``,
and seeded random bit flips (``python -m tools.hostile flips``, run in forked
children with a timeout, so that a hang or a crash cannot take the test run
down).
"""

from __future__ import annotations

import contextlib
import json
import struct
import subprocess
from pathlib import Path

import cbor2
import lmdb
import pytest
from mcp import Client

from eventstore import codec
from eventstore.events import Metadata
from projections.index import DEFAULT
from server.app import build_server
from server.service import MemoryService
from tools import _proc
from tools.mcp_client import body

TOOLS = ("write_message", "update_message", "read_messages", "search_messages", "delete_message",
         "rebuild_index", "get_system_health")
VALID_ARGS = {"write_message": {"session_id": "s", "role": "user", "content": "x"},
              "update_message": {"message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV", "content": "y"},
              "read_messages": {"session_id": "s0"}, "search_messages": {"query": "hello"},
              "delete_message": {"message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"},
              "rebuild_index": {}, "get_system_health": {}}
PAGE = 4096


# ----------------------------------------------------------------- helpers
def make_store(path: str, n: int = 12, filler: int = 0) -> list[tuple[str, str, str]]:
    """``n`` messages in sessions s0/s1 (message i is event i + 1), then ``filler`` more in s2."""
    svc = MemoryService(path)
    try:
        made = []
        for i in range(n):
            content = f"hello message {i} MARKER{i:03d}END"
            out = svc.write_message(f"s{i % 2}", "user", content, Metadata(tags=(f"tag{i}",)))
            made.append((out["message"]["message_id"], f"s{i % 2}", content))
        for i in range(filler):
            svc.write_message("s2", "assistant", f"filler text number {i} " + "x" * 150, Metadata())
        return made
    finally:
        svc.close()


def raw_env(path: str) -> lmdb.Environment:
    return lmdb.open(path, max_dbs=64, subdir=True)


@contextlib.contextmanager
def raw_txn(path: str, db: bytes, write: bool = False):
    """(transaction, handle) on one sub-database, opened behind the store's back."""
    env = raw_env(path)
    try:
        handle = env.open_db(db)
        with env.begin(write=write) as txn:
            yield txn, handle
    finally:
        env.close()


def put_raw(path: str, db: bytes, key: bytes, value: bytes) -> None:
    with raw_txn(path, db, write=True) as (txn, handle):
        txn.put(key, value, db=handle)


def delete_raw(path: str, db: bytes, key: bytes) -> None:
    with raw_txn(path, db, write=True) as (txn, handle):
        assert txn.delete(key, db=handle)


def get_raw(path: str, db: bytes, key: bytes) -> bytes:
    with raw_txn(path, db) as (txn, handle):
        return txn.get(key, db=handle)


def first_key(path: str, db: bytes, prefix: bytes = b"") -> bytes:
    with raw_txn(path, db) as (txn, handle), txn.cursor(db=handle) as cur:
        assert cur.set_range(prefix) and cur.key().startswith(prefix)
        return cur.key()


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return _proc.run(_proc.python(*args), timeout=timeout)


def probe(store: str, calls: list) -> list[dict]:
    """Answers of the given calls, made by a separate process (a crash or hang cannot spread)."""
    done = run("-m", "tools.hostile", "probe", store, "--calls", json.dumps(calls))
    assert "answers" in done.stdout, f"exit {done.returncode}: {done.stderr[-3000:]}"
    return json.loads(done.stdout)["answers"]


async def answers_of_every_tool(store: str) -> dict[str, tuple[bool, dict]]:
    async with Client(build_server(store)) as client:
        return {name: body(await client.call_tool(name, VALID_ARGS[name])) for name in TOOLS}


def assert_refused_everywhere(answers: dict, words: str) -> None:
    for name, (is_error, out) in answers.items():
        assert is_error, name
        assert out["error"]["code"] == "CORRUPT_STORE", (name, out)
        assert words in out["error"]["message"], (name, out)


def assert_cli_refuses(store: str, *command: str) -> None:
    done = run("-m", "server.cli", *command, "--store", store)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "CORRUPT_STORE" in done.stderr
    assert "Traceback" not in done.stderr


def replace_text(value, old: str, new):
    if value == old:
        return new
    if isinstance(value, list):
        return [replace_text(v, old, new) for v in value]
    return value


# ------------------------------------------------------------ refused opens
@pytest.mark.anyio
async def test_a_store_of_format_version_3_is_refused_by_every_tool_with_corrupt_store(store_path):
    make_store(store_path)
    put_raw(store_path, b"meta", b"format_version", (3).to_bytes(8, "big"))
    assert_refused_everywhere(await answers_of_every_tool(store_path), "format version")
    assert_cli_refuses(store_path, "health")


@pytest.mark.anyio
async def test_a_projection_watermark_ahead_of_the_log_is_refused_with_corrupt_store(store_path):
    make_store(store_path)
    put_raw(store_path, b"meta", b"watermark", (99).to_bytes(8, "big"))
    assert_refused_everywhere(await answers_of_every_tool(store_path), "watermark")
    assert_cli_refuses(store_path, "health")


def test_convmem_replay_repairs_a_store_whose_watermark_is_ahead_of_the_log(store_path):
    made = make_store(store_path)
    put_raw(store_path, b"meta", b"watermark", (99).to_bytes(8, "big"))
    done = run("-m", "server.cli", "replay", "--store", store_path)
    assert done.returncode == 0, done.stderr
    assert run("-m", "tools.replay", store_path, "--verify").returncode == 0
    health = json.loads(run("-m", "server.cli", "health", "--store", store_path).stdout)
    assert health["active_messages"] == len(made) and health["snapshot_valid"] is True


@pytest.mark.anyio
async def test_an_undecodable_newest_event_is_refused_when_the_store_opens(store_path):
    made = make_store(store_path)
    put_raw(store_path, b"events", codec.seq_key(len(made)), b"\xff\x00 not cbor")
    assert_refused_everywhere(await answers_of_every_tool(store_path), "event")
    assert_cli_refuses(store_path, "health")
    assert_cli_refuses(store_path, "replay")


# ----------------------------------------------------------- refused reads
@pytest.mark.anyio
async def test_an_undecodable_event_inside_the_log_answers_corrupt_store_wherever_it_is_read(store_path):
    made = make_store(store_path)
    damaged_id, damaged_session, _ = made[3]
    put_raw(store_path, b"events", codec.seq_key(4), b"\xa1garbage")
    async with Client(build_server(store_path)) as client:
        for name, args in (("read_messages", {"view": "content", "message_id": damaged_id}),
                           ("read_messages", {"session_id": damaged_session}),
                           ("read_messages", {"view": "context", "message_id": made[5][0], "before": 2}),
                           ("search_messages", {"query": "MARKER003END"})):
            is_error, out = body(await client.call_tool(name, args))
            assert is_error and out["error"]["code"] == "CORRUPT_STORE", (args, out)
            assert "event" in out["error"]["message"]
        is_error, out = body(await client.call_tool("read_messages", {"session_id": "s0"}))
        assert not is_error
        assert [m["content"] for m in out["history"]] == [c for _i, s, c in made if s == "s0"]
    for command in (("-m", "tools.replay", store_path), ("-m", "tools.replay", store_path, "--verify")):
        done = run(*command)
        assert done.returncode == 2 and "CORRUPT_STORE" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_health_turns_degraded_once_a_read_meets_a_corrupt_event(store_path):
    made = make_store(store_path)
    put_raw(store_path, b"events", codec.seq_key(4), b"\xa1garbage")
    async with Client(build_server(store_path)) as client:
        is_error, _out = body(await client.call_tool("read_messages", {"view": "content", "message_id": made[3][0]}))
        assert is_error
        _e, health = body(await client.call_tool("get_system_health", {}))
    assert health["status"] == "DEGRADED"
    assert "event" in health["last_error"]


@pytest.mark.anyio
async def test_a_listed_message_whose_record_is_missing_answers_corrupt_store(store_path):
    made = make_store(store_path)
    delete_raw(store_path, b"messages", bytes.fromhex(_ulid_hex(made[2][0])))
    async with Client(build_server(store_path)) as client:
        for name, args in (("read_messages", {"session_id": made[2][1]}),
                           ("search_messages", {"query": "MARKER002END"})):
            is_error, out = body(await client.call_tool(name, args))
            assert is_error and out["error"]["code"] == "CORRUPT_STORE", (name, out)


def _damage_updated_record(path: str, mid: str) -> None:
    """An updated message's record is its whole state: make a tag bytes."""
    svc = MemoryService(path)
    try:
        svc.update_message(mid, None, {"tags": ("tag3", "more")}, None)
    finally:
        svc.close()
    key = bytes.fromhex(_ulid_hex(mid))
    decoded = cbor2.loads(get_raw(path, b"messages", key))
    damaged = replace_text(decoded, "tag3", b"tag3")
    assert damaged != decoded
    put_raw(path, b"messages", key, cbor2.dumps(damaged, canonical=True))


def _point_plain_record(docno: int):
    """A never-updated message's record is its document number: point it elsewhere."""
    def damage(path: str, mid: str) -> None:
        key = bytes.fromhex(_ulid_hex(mid))
        assert cbor2.loads(get_raw(path, b"messages", key)) == 4        # message 3 is event 4
        put_raw(path, b"messages", key, cbor2.dumps(docno))
    return damage


@pytest.mark.anyio
@pytest.mark.parametrize("damage", [_damage_updated_record, _point_plain_record(5), _point_plain_record(999),
                                    _point_plain_record(-1)],
                         ids=["updated record, wrongly typed tag", "plain record, another message's event",
                              "plain record, past the log", "plain record, negative"])
async def test_a_message_record_with_a_wrong_field_answers_corrupt_store(store_path, damage):
    made = make_store(store_path)
    mid, session, _content = made[3]
    damage(store_path, mid)
    async with Client(build_server(store_path)) as client:
        for args in ({"view": "context", "message_id": mid}, {"session_id": session}):
            is_error, out = body(await client.call_tool("read_messages", args))
            assert is_error and out["error"]["code"] == "CORRUPT_STORE", (args, out)


@pytest.mark.anyio
async def test_a_damaged_stats_record_answers_corrupt_store_even_from_health(store_path):
    make_store(store_path)
    put_raw(store_path, b"stats", b"s", b"\xa1garbage")
    async with Client(build_server(store_path)) as client:
        for name, args in (("get_system_health", {}), ("search_messages", {"query": "hello"})):
            is_error, out = body(await client.call_tool(name, args))
            assert is_error and out["error"]["code"] == "CORRUPT_STORE", (name, out)


def test_a_page_of_the_wrong_type_answers_corrupt_store_when_read(store_path):
    made = make_store(store_path, n=30, filler=200)     # the newest event is far from the damaged page
    data_file = Path(store_path) / "data.mdb"
    data = bytearray(data_file.read_bytes())
    marker = made[7][2].encode()
    pages = {offset // PAGE for offset in _find_all(data, marker)}
    assert pages
    for page in pages:
        struct.pack_into("<H", data, page * PAGE + 10, 0x04)      # mp_flags: leaf -> overflow
    data_file.write_bytes(bytes(data))
    answers = probe(store_path, [["read_messages", {"view": "content", "message_id": made[7][0]}],
                                 ["read_messages", {"session_id": made[7][1]}]])
    for answer in answers:
        assert answer.get("error") == "CORRUPT_STORE", answer


def test_a_changed_letter_inside_a_stored_message_is_reported_not_served(store_path):
    made = make_store(store_path, n=30, filler=200)
    data_file = Path(store_path) / "data.mdb"
    data = bytearray(data_file.read_bytes())
    marker = made[7][2].encode()
    offsets = _find_all(data, marker)
    assert offsets
    for offset in offsets:
        data[offset + marker.index(b"MARKER")] ^= 0x20        # 'M' -> 'm'
    data_file.write_bytes(bytes(data))
    [answer] = probe(store_path, [["read_messages", {"view": "content", "message_id": made[7][0]}]])
    assert answer.get("error") == "CORRUPT_STORE", answer


# ------------------------------------------------------- read-model repair
@pytest.mark.anyio
async def test_damaged_read_models_are_found_by_verify_and_repaired_by_convmem_replay(store_path):
    made = make_store(store_path)

    async def snapshot() -> dict:
        async with Client(build_server(store_path)) as client:
            out = {}
            for args in ({"session_id": "s0"}, {"session_id": "s1"}, {"view": "sessions"}):
                out[json.dumps(args)] = body(await client.call_tool("read_messages", args))
            for query in ("MARKER004END", "hello", "tag6"):
                out[query] = body(await client.call_tool("search_messages", {"query": query}))
            return out

    healthy = await snapshot()
    delete_raw(store_path, b"history", first_key(store_path, b"history", b"s0\x00"))
    delete_raw(store_path, b"pending", first_key(store_path, b"pending"))   # a small store's
    delete_raw(store_path, b"pending", first_key(store_path, b"pending"))   # index is all pending
    assert await snapshot() != healthy                 # the damage shows ...
    verify = run("-m", "tools.replay", store_path, "--verify")
    assert verify.returncode == 1                      # ... and verify finds it
    assert "'history'" in verify.stderr and "'pending'" in verify.stderr
    repair = run("-m", "server.cli", "replay", "--store", store_path)
    assert repair.returncode == 0, repair.stderr
    assert run("-m", "tools.replay", store_path, "--verify").returncode == 0
    assert await snapshot() == healthy
    assert len(healthy[json.dumps({"session_id": "s0"})][1]["history"]) == len([m for m in made if m[1] == "s0"])


def test_replay_verify_checks_a_store_where_one_word_is_in_four_hundred_messages(store_path):
    svc = MemoryService(store_path)
    try:
        for i in range(400):
            svc.write_message("s", "user", f"the note number {i}", Metadata())
    finally:
        svc.close()
    done = run("-m", "tools.replay", store_path, "--verify")
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"


# ------------------------------------------------------ random bit flips
@pytest.fixture(scope="module")
def flips_report(tmp_path_factory) -> dict:
    done = run("-m", "tools.hostile", "flips", "--trials", "12", "--seed", "3", timeout=900)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout)


def test_random_bit_flips_in_data_mdb_never_hang_or_crash_the_reader(flips_report):
    outcomes = flips_report["outcomes"]
    assert sum(outcomes.values()) == 12
    assert "hang" not in outcomes, flips_report["bad"]
    assert "crash" not in outcomes, flips_report["bad"]


def _find_all(data: bytes | bytearray, needle: bytes) -> list[int]:
    found, at = [], data.find(needle)
    while at != -1:
        found.append(at)
        at = data.find(needle, at + 1)
    return found


def _ulid_hex(message_id: str) -> str:
    from ulid import ULID
    return bytes(ULID.from_str(message_id)).hex()


@pytest.mark.anyio
async def test_read_model_records_of_the_wrong_shape_answer_corrupt_store(store_path):
    """Regression (flip trials 0 and 458): a history key of the wrong length and a
    docs value that is not UTF-8 used to escape as INTERNAL_ERROR."""
    made = make_store(store_path)
    mid, session, _content = made[0]
    put_raw(store_path, b"history", session.encode() + b"\x00" + b"\x01" * 5, b"")
    docs_key = (1).to_bytes(6, "big")                  # message 0 is event 1
    value = get_raw(store_path, b"docs", docs_key)
    put_raw(store_path, b"docs", docs_key, value[:-1] + b"\xff")
    async with Client(build_server(store_path)) as client:
        is_error, out = body(await client.call_tool("read_messages", {"session_id": session}))
        assert is_error and out["error"]["code"] == "CORRUPT_STORE", out
        is_error, out = body(await client.call_tool("search_messages", {"query": "MARKER000END"}))
        assert is_error and out["error"]["code"] == "CORRUPT_STORE", out
        _, health = body(await client.call_tool("get_system_health", {}))
        assert health["status"] == "DEGRADED" and health["last_error"]


def _garble_session_record(path: str) -> None:
    put_raw(path, b"sessions", b"s1", cbor2.dumps([6, [6, 0, 0, 0, 0], 1, 2]))    # five kind counts


def _drop_session_record(path: str) -> None:
    delete_raw(path, b"sessions", b"s1")


def _empty_session_history(path: str) -> None:
    with raw_txn(path, b"history", write=True) as (txn, handle):
        keys = [k for k, _ in txn.cursor(db=handle) if k.startswith(b"s1\x00")]
        assert keys
        for k in keys:
            txn.delete(k, db=handle)


@pytest.mark.anyio
@pytest.mark.parametrize("damage", [_garble_session_record, _drop_session_record, _empty_session_history],
                         ids=["record of the wrong shape", "record missing", "history emptied"])
async def test_a_damaged_session_answers_corrupt_store_in_the_sessions_view(store_path, damage):
    make_store(store_path)
    damage(store_path)
    async with Client(build_server(store_path)) as client:
        is_error, out = body(await client.call_tool("read_messages", {"view": "sessions"}))
    assert is_error and out["error"]["code"] == "CORRUPT_STORE", out


@pytest.mark.anyio
async def test_a_changed_byte_in_a_search_document_row_answers_corrupt_store(store_path):
    """A docs row carries a CRC-32 of its key and value: an importance byte changed
    is refused, not used to filter or to name a result."""
    make_store(store_path)
    key = (1).to_bytes(6, "big")                      # message 0 is event 1
    value = bytearray(get_raw(store_path, b"docs", key))
    value[18] ^= 0x01                                 # the importance byte
    put_raw(store_path, b"docs", key, bytes(value))
    async with Client(build_server(store_path)) as client:
        for args in ({"query": "MARKER000END"}, {"query": "hello", "min_importance": 1}):
            is_error, out = body(await client.call_tool("search_messages", args))
            assert is_error and out["error"]["code"] == "CORRUPT_STORE", (args, out)
            assert "checksum" in out["error"]["message"]


@pytest.mark.anyio
async def test_a_changed_byte_in_a_posting_chunk_answers_corrupt_store(store_path):
    make_store(store_path, n=DEFAULT.merge_at + 44)   # enough writes for merged chunks
    with raw_txn(store_path, b"postings", write=True) as (txn, handle):
        key = next(k for k, _ in txn.cursor(db=handle) if k.startswith(b"\x00hello\x00"))
        value = bytearray(txn.get(key, db=handle))
        value[1] ^= 0x02                              # a docno gap
        txn.put(key, bytes(value), db=handle)
    async with Client(build_server(store_path)) as client:
        is_error, out = body(await client.call_tool("search_messages", {"query": "hello"}))
    assert is_error and out["error"]["code"] == "CORRUPT_STORE", out


# ------------------------------------------- read-model records, decoder by decoder
async def _answers(store: str, calls: list[tuple[str, dict]]) -> list[tuple[bool, dict]]:
    async with Client(build_server(store)) as client:
        return [body(await client.call_tool(name, args)) for name, args in calls]


def assert_corrupt_store(answers: list[tuple[bool, dict]]) -> None:
    for is_error, out in answers:
        assert is_error and out["error"]["code"] == "CORRUPT_STORE", out


@pytest.mark.anyio
@pytest.mark.parametrize("key", [b"\x00" * 5, b"\x00" * 8 + b"\xff\xfe"],
                         ids=["shorter than its timestamp", "session id not UTF-8"])
async def test_a_damaged_session_order_key_answers_corrupt_store(store_path, key):
    make_store(store_path)
    put_raw(store_path, b"session_order", key, b"")            # sorts before every real key
    assert_corrupt_store(await _answers(store_path, [("read_messages", {"view": "sessions"})]))


def _related_store(path: str) -> str:
    """A store whose message 0 has an edge to message 1; returns message 0's id."""
    made = make_store(path, n=2)
    svc = MemoryService(path)
    try:
        svc.update_message(made[0][0], None, {"relations": (("depends_on", made[1][0]),)}, None)
    finally:
        svc.close()
    return made[0][0]


@pytest.mark.anyio
@pytest.mark.parametrize("value", [bytes([2, 0]) + b"\x01" * 16, bytes([0, 9]) + b"\x01" * 16],
                         ids=["direction out of range", "relation type out of range"])
async def test_a_relation_edge_of_unknown_direction_or_type_answers_corrupt_store(store_path, value):
    mid = _related_store(store_path)
    key = bytes.fromhex(_ulid_hex(mid))
    with raw_txn(store_path, b"relations", write=True) as (txn, handle):
        assert txn.delete(key, db=handle)                      # every edge of message 0
        txn.put(key, value, db=handle)
    assert_corrupt_store(await _answers(store_path, [("read_messages", {"view": "context", "message_id": mid})]))


@pytest.mark.anyio
async def test_a_relation_edge_of_the_wrong_length_answers_corrupt_store(store_path):
    """LMDB takes a value of another size into a dupfixed list and reads it back so."""
    made = make_store(store_path, n=2)
    mid = made[0][0]
    put_raw(store_path, b"relations", bytes.fromhex(_ulid_hex(mid)), b"\x00\x00" + b"\x01" * 15)
    assert_corrupt_store(await _answers(store_path, [("read_messages", {"view": "context", "message_id": mid})]))


@pytest.mark.anyio
@pytest.mark.parametrize("value", [[1, 2, 3], {"active": "twelve"}, {"active": 1.5}, "stats"],
                         ids=["a list", "a text count", "a float count", "a text"])
async def test_a_statistics_record_that_is_not_a_map_of_numbers_answers_corrupt_store(store_path, value):
    make_store(store_path)
    put_raw(store_path, b"stats", b"s", cbor2.dumps(value, canonical=True))
    assert_corrupt_store(await _answers(store_path, [("get_system_health", {}),
                                                     ("search_messages", {"query": "hello"})]))


def _pending_damage(path: str, change) -> None:
    """Change the first pending search record (a small store's index is all pending)."""
    key = first_key(path, b"pending")
    record = cbor2.loads(get_raw(path, b"pending", key))
    change(record)
    put_raw(path, b"pending", key, cbor2.dumps(record, canonical=True))


def _set_field(index: int, value):
    def change(record: list) -> None:
        record[0][index] = value                                # the content field's entry
    return change


def _set_facets(value):
    def change(record: list) -> None:
        record[-1] = value
    return change


@pytest.mark.anyio
@pytest.mark.parametrize("change", [_set_field(0, "7"), _set_field(1, 7), _set_field(2, "\x01" * 6),
                                    _set_field(3, [1]), _set_field(3, b"x"), _set_facets([1]), _set_facets(b"s"),
                                    lambda record: record.pop(0)],
                         ids=["length text", "terms not text", "tfs text", "whole-text key a number",
                              "whole-text keys not a list", "facet key a number", "facets not a list",
                              "a field missing"])
async def test_a_pending_search_record_with_a_field_of_the_wrong_type_answers_corrupt_store(store_path, change):
    make_store(store_path)
    _pending_damage(store_path, change)
    filtered = {"query": "hello", "filters_json": json.dumps({"tags": ["tag1"]})}
    assert_corrupt_store(await _answers(store_path, [("search_messages", {"query": "hello"}),
                                                     ("search_messages", filtered)]))


def _updated_state(path: str, mid: str) -> tuple[bytes, list]:
    """Update the message's content (its record becomes a whole state): (key, state)."""
    svc = MemoryService(path)
    try:
        svc.update_message(mid, "new content", {}, None)
    finally:
        svc.close()
    key = bytes.fromhex(_ulid_hex(mid))
    state = cbor2.loads(get_raw(path, b"messages", key))
    assert isinstance(state, list)
    return key, state


@pytest.mark.anyio
async def test_a_message_whose_content_points_at_a_delete_event_answers_corrupt_store(store_path):
    made = make_store(store_path)                              # events 1..12
    key, state = _updated_state(store_path, made[3][0])        # event 13
    svc = MemoryService(store_path)
    try:
        svc.delete_message(made[5][0], None)                   # event 14
    finally:
        svc.close()
    state[1] = 14                                              # the content's event
    put_raw(store_path, b"messages", key, cbor2.dumps(state, canonical=True))
    assert_corrupt_store(await _answers(store_path, [
        ("read_messages", {"view": "content", "message_id": made[3][0]}),
        ("search_messages", {"query": "new content"})]))


@pytest.mark.anyio
async def test_a_message_whose_content_points_at_another_messages_event_answers_corrupt_store(store_path):
    made = make_store(store_path)
    key, state = _updated_state(store_path, made[3][0])
    state[1] = 1                                               # message 0's MessageWritten
    put_raw(store_path, b"messages", key, cbor2.dumps(state, canonical=True))
    assert_corrupt_store(await _answers(store_path, [
        ("read_messages", {"view": "content", "message_id": made[3][0]})]))


@pytest.mark.anyio
@pytest.mark.parametrize("damage", [lambda state: state[:10], lambda state: "state", lambda state: 4.0,
                                    lambda state: state[:5] + ["4"] + state[6:]],
                         ids=["ten fields", "a text", "a float", "a revision as text"])
async def test_a_message_state_of_the_wrong_shape_answers_corrupt_store(store_path, damage):
    made = make_store(store_path)
    key, state = _updated_state(store_path, made[3][0])
    put_raw(store_path, b"messages", key, cbor2.dumps(damage(state), canonical=True))
    assert_corrupt_store(await _answers(store_path, [
        ("read_messages", {"view": "content", "message_id": made[3][0]}),
        ("read_messages", {"session_id": made[3][1]})]))


@pytest.mark.anyio
@pytest.mark.parametrize("tail", [b"\x01" * 5, b"\x01" * 17], ids=["id of 5 bytes", "id of 17 bytes"])
async def test_a_history_key_of_the_wrong_length_answers_corrupt_store_to_reads_and_writes(store_path, tail):
    make_store(store_path)
    put_raw(store_path, b"history", b"s0\x00" + tail, b"")      # sorts before every real id of s0
    assert_corrupt_store(await _answers(store_path, [
        ("read_messages", {"session_id": "s0"}),
        ("write_message", {"session_id": "s0", "role": "user", "content": "one more"})]))
