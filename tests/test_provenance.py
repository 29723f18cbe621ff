"""Provenance: every event records its principal; ``view=revisions`` and ``convmem log`` show
who did what; replay, compaction, export/import and replication keep it; an older export
(no principals) still imports."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from strategies import open_service

from eventstore import codec
from eventstore.errors import NotFoundError
from eventstore.events import Message, MessageDeleted, MessageUpdated, MessageWritten, Metadata
from eventstore.store import EventStore
from projections import messages
from projections import revisions as revision_model
from projections.registry import Projector
from server import archive, transfer
from server.cli import main
from server.principals import LOCAL, Principal
from server.replication import layout
from server.replication.apply import Position, apply_records
from server.replication.layout import Record
from server.service import MemoryService
from server.tools import BY_NAME

A = Principal("agent-a")


def call(svc, name: str, principal: Principal = LOCAL, **arguments) -> dict:
    return BY_NAME[name].call(svc, arguments, principal)


def revisions(svc, mid: str) -> list[dict]:
    return call(svc, "read_messages", view="revisions", message_id=mid)["revisions"]


@pytest.fixture
def edited(svc):
    """A message written locally, then changed twice by agent-a; another deleted by agent-a."""
    mid = call(svc, "write_message", session_id="s", role="user", content="first")["message"]["message_id"]
    call(svc, "update_message", A, message_id=mid, content="second")
    call(svc, "update_message", A, message_id=mid, metadata_json=json.dumps({"tags": ["x"], "importance": 9}))
    gone = call(svc, "write_message", A, session_id="t", role="user", content="gone")["message"]["message_id"]
    call(svc, "delete_message", A, message_id=gone)
    return svc, mid, gone


def test_revisions_oldest_first_with_principal_and_what_changed(edited):
    svc, mid, gone = edited
    revs = revisions(svc, mid)
    assert [(r["revision"], r["principal"], r["changed"]) for r in revs] == [
        (1, "local", ["created"]), (2, "agent-a", ["content"]), (3, "agent-a", ["tags", "importance"])]
    assert revs[0]["at"] <= revs[1]["at"] <= revs[2]["at"]
    with pytest.raises(NotFoundError):
        revisions(svc, gone)


def test_every_event_records_its_principal(edited):
    svc, _, _ = edited
    with svc.store.read() as tx:
        assert [e.principal for _, e, _ in svc.store.iter_events(tx)] == ["local", "agent-a", "agent-a", "agent-a",
                                                                        "agent-a"]


def test_replay_and_compaction_keep_the_principal(edited):
    svc, mid, _ = edited
    before = revisions(svc, mid)
    svc.store.rebuild_projections()
    assert revisions(svc, mid) == before
    call(svc, "rebuild_index")
    after = revisions(svc, mid)
    assert [(r["revision"], r["principal"], r["changed"]) for r in after] == [(3, "agent-a", ["rewritten"])]


def test_export_import_carries_the_principal_and_an_older_export_still_imports(edited, tmp_path):
    svc, mid, _ = edited
    out = io.StringIO()
    transfer.export(svc, out)
    text = out.getvalue()
    assert json.loads(text.splitlines()[1])["principal"] == "agent-a"
    with contextlib.closing(MemoryService(str(tmp_path / "copy"))) as copy:
        transfer.write(copy, archive.read(io.StringIO(text)))
        assert revisions(copy, mid)[-1]["principal"] == "agent-a"
        again = io.StringIO()
        transfer.export(copy, again)
        assert again.getvalue() == text
    old = "".join(line if i == 0 else json.dumps({k: v for k, v in json.loads(line).items() if k != "principal"},
                                                 ensure_ascii=False, separators=(",", ":")) + "\n"
                  for i, line in enumerate(io.StringIO(text)))
    with contextlib.closing(MemoryService(str(tmp_path / "old"))) as copy:
        assert transfer.write(copy, archive.read(io.StringIO(old))) == 1
        assert revisions(copy, mid)[-1]["principal"] is None
        again = io.StringIO()
        transfer.export(copy, again)
        assert again.getvalue() == old


def test_convmem_log_filters_by_principal_session_and_time(edited, capsys, store_path):
    svc, mid, gone = edited
    svc.close()
    assert main(["--store", store_path, "log", "--json", "--principal", "agent-a"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e["message_id"], e["changed"]) for e in lines] == [
        ("updated", mid, ["content"]), ("updated", mid, ["tags", "importance"]), ("written", gone, []),
        ("deleted", gone, [])]
    assert lines[-1]["session_id"] == "t" and lines[-1]["at"] >= lines[-2]["at"]
    assert main(["--store", store_path, "log", "--json", "--session", "s"]) == 0
    assert {json.loads(x)["message_id"] for x in capsys.readouterr().out.splitlines()} == {mid}
    assert main(["--store", store_path, "log", "--json", "--since", str(lines[2]["at"] + 10**9)]) == 0
    assert capsys.readouterr().out == ""
    assert main(["--store", store_path, "log"]) == 0
    table = capsys.readouterr().out
    assert "PRINCIPAL" in table and "agent-a" in table


def test_replicated_records_carry_the_principal(tmp_path):
    msg = Message("01J" + "0" * 22 + "1", "s", "user", "text", 1_720_000_000_000, 1_720_000_000_000)
    events = [MessageWritten(msg, "agent-a"),
              MessageUpdated(msg.message_id, 2, 1_720_000_000_001, "new", Metadata(), "agent-b")]
    records = []
    for seq, event in enumerate(events, 1):
        raw = codec.encode_event(event)
        records.append(Record(seq=seq, subject="convmem.T.g1.m.x", data=raw, kind=None,
                              msg_id=layout.event_id(seq, raw), timestamp=0.0, pending=0))
    with EventStore(str(tmp_path / "replica"), Projector()) as store:
        apply_records(store, Position(1, 0), False, records)
        with store.read() as tx:
            assert [e.principal for _, e, _ in store.iter_events(tx)] == ["agent-a", "agent-b"]
            state = messages.required(messages.get(tx, msg.message_id))
            assert [r["principal"] for r in revision_model.of(tx, state)] == ["agent-a", "agent-b"]


def test_a_deletion_records_who_and_when_and_an_old_one_still_decodes():
    mid = "01J" + "0" * 22 + "1"
    for event in (MessageDeleted(mid), MessageDeleted(mid, "a"), MessageDeleted(mid, "a", 7),
                  MessageDeleted(mid, None, 7)):
        assert codec.decode_event(codec.encode_event(event)) == event
    assert codec.encode_event(MessageDeleted(mid)) == codec.encode_event(MessageDeleted(mid, None, None))


def test_an_event_without_a_principal_decodes_as_before():
    msg = Message("01J" + "0" * 22 + "1", "s", "user", "text", 1_720_000_000_000, 1_720_000_000_000)
    plain = codec.encode_event(MessageWritten(msg))
    assert codec.decode_event(plain).principal is None
    by = codec.encode_event(MessageWritten(msg, "agent-a"))
    assert by != plain and codec.decode_event(by) == MessageWritten(msg, "agent-a")


def test_a_write_through_the_service_defaults_to_local(tmp_path):
    svc = open_service(str(tmp_path / "s"))
    try:
        mid = svc.write_message("s", "user", "x", Metadata())["message"]["message_id"]
        assert revisions(svc, mid)[0]["principal"] == "local"
    finally:
        svc.close()


def test_a_written_message_stores_no_revision_record_its_event_is_its_first(svc):
    """The first revision is read from the message's written event; only updates write records."""
    mid = svc.write_message("s", "user", "first", Metadata(), principal=Principal("agent-a"))["message"]["message_id"]
    with svc.store.read() as tx:
        assert tx.txn.stat(tx.db(revision_model.DB))["entries"] == 0
    svc.update_message(mid, "second", {}, None)
    with svc.store.read() as tx:
        assert tx.txn.stat(tx.db(revision_model.DB))["entries"] == 1
    assert [(r["revision"], r["principal"], r["changed"]) for r in revisions(svc, mid)] == [
        (1, "agent-a", ["created"]), (2, "local", ["content"])]


def test_an_importer_acts_as_import_source(tmp_path, store_path):
    import import_samples as samples

    from server.importers import run_import
    root = samples.claude_code(str(tmp_path / "projects"))
    assert run_import(store_path, "claude-code", [root])["written"] > 0
    with EventStore(store_path, Projector()) as store, store.read() as tx:
        assert {e.principal for _, e, _ in store.iter_events(tx)} == {"import:claude-code"}


@pytest.mark.anyio
async def test_a_call_without_an_access_token_acts_as_local(mcp):
    mid = (await mcp.write("over MCP"))["message_id"]
    body = await mcp.ok("read_messages", view="revisions", message_id=mid)
    assert [r["principal"] for r in body["revisions"]] == ["local"]
