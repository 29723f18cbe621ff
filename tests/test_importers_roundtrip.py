"""Every writer writes only what the contract allows, so every store can go
round: each importer on every sample transcript of import_samples.py (and
empty tool outputs), then export → import into an empty store → export gives
the same bytes; the same for any store written through the tools."""

from __future__ import annotations

import io
import json
import re
import shutil
import tempfile

import import_samples as samples
import pytest
from helpers import export_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import SESSIONS, TAGS, open_service

from eventstore.errors import ValidationError
from eventstore.events import KINDS, RELATION_TYPES, ROLES, TIERS, Metadata, written
from eventstore.store import EventStore
from projections.registry import Projector
from server import archive, validation
from server.cli import main
from server.importers import Options, run_import
from server.importers.turns import Report, Turn
from server.importers.writer import Writer
from server.tools import TOOLS

SPECS = {t.name: t for t in TOOLS}


def round_trip(path: str, root: str) -> str:
    """The export of the store at ``path``, after checking that importing it
    into an empty store and exporting that gives the same bytes."""
    first = export_text(path)
    out = f"{root}/export.jsonl"
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(first)
    assert main(["import", "jsonl", out, "--store", f"{root}/again"]) == 0
    assert export_text(f"{root}/again") == first
    return first


def empty_outputs(root: str) -> dict[str, str]:
    """Transcripts whose tools printed nothing (a Claude Code Bash result ``""``,
    a Codex output ``""``)."""
    cc = samples._lines(f"{root}/cc/-home-ada/{samples.SID}.jsonl", [
        samples._cc("e1", None, "assistant", [{"type": "tool_use", "id": "toolu_E", "name": "Bash",
                                               "input": {"command": "mkdir -p out"}}], "2026-01-20T11:57:18.000Z"),
        samples._cc("e2", "e1", "user", [{"type": "tool_result", "tool_use_id": "toolu_E", "content": ""}],
                    "2026-01-20T11:57:19.000Z"),
        samples._cc("e3", "e2", "user", [{"type": "tool_result", "tool_use_id": "toolu_F", "content": []}],
                    "2026-01-20T11:57:20.000Z")])
    item = {"timestamp": "2025-10-02T09:00:05.000Z", "type": "response_item"}
    codex = samples._lines(f"{root}/codex/rollout-2025-10-02T09-00-00-{samples.CODEX_ID}.jsonl", [
        {**item, "payload": {"type": "function_call", "name": "shell", "call_id": "c1", "arguments": "{}"}},
        {**item, "payload": {"type": "function_call_output", "call_id": "c1", "output": ""}}])
    return {"claude-code": cc, "codex": codex}


SOURCES = [
    ("claude-code", lambda root: samples.claude_code(f"{root}/projects")),
    ("codex", lambda root: samples.codex(f"{root}/sessions")),
    ("chatgpt", lambda root: samples.chatgpt(f"{root}/chatgpt")),
    ("chatgpt", lambda root: samples.chatgpt(f"{root}/chatgpt", as_zip=True)),
    ("claude-ai", lambda root: samples.claude_ai(f"{root}/claude-ai")),
    ("claude-ai", lambda root: samples.claude_ai(f"{root}/claude-ai", as_zip=True)),
    ("memory-jsonl", lambda root: samples.memory_jsonl(f"{root}/memory")),
    ("claude-code", lambda root: empty_outputs(root)["claude-code"]),
    ("codex", lambda root: empty_outputs(root)["codex"]),
]


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize(("source", "make"), SOURCES)
def test_every_sample_transcript_imported_by_its_source_goes_round_byte_for_byte(tmp_path, source, make,
                                                                                 thinking):
    root = str(tmp_path)
    path = make(root)
    summary = run_import(f"{root}/store", source, [path], Options(thinking=thinking, branches=thinking))
    assert summary["written"] > 0
    first = round_trip(f"{root}/store", root)
    assert first.count("\n") == summary["written"] + 1


def test_every_sample_of_every_source_in_one_store_goes_round(tmp_path):
    root = str(tmp_path)
    for source, make in SOURCES:
        run_import(f"{root}/store", source, [make(root)], Options(thinking=True, branches=True))
    round_trip(f"{root}/store", root)


def test_an_empty_tool_output_is_stored_as_a_placeholder_tagged_empty(tmp_path):
    paths = empty_outputs(str(tmp_path))
    run_import(f"{tmp_path}/store", "claude-code", [paths["claude-code"]])
    run_import(f"{tmp_path}/store", "codex", [paths["codex"]])
    lines = [json.loads(line) for line in export_text(f"{tmp_path}/store").splitlines()[1:]]
    empty = [m for m in lines if validation.EMPTY_TAG in m["metadata"]["tags"]]
    assert [m["content"] for m in empty] == ["(empty)"] * 3
    assert all(m["role"] == "user" and "tool_result" in m["metadata"]["tags"] for m in empty)
    assert all(m["content"] != "" for m in lines)


def test_an_empty_content_written_by_an_older_import_is_exported_as_importers_write_it_now(tmp_path):
    """A store an older convmem filled with ``content: ""``: the export is one
    an import takes, and it goes round."""
    service = open_service(f"{tmp_path}/store")
    try:
        service.write_message("s", "user", "before", Metadata())
    finally:
        service.close()
    with EventStore(f"{tmp_path}/store", Projector()) as store:      # what the old importer appended
        def command(w):
            mid = w.new_ids([w.now_ms()])[0]
            w.append([written(mid, "s", "user", "", 5, 5, 1, Metadata(tags=("claude-code", "tool_result")))])
        store.execute(command)
    first = round_trip(f"{tmp_path}/store", str(tmp_path))
    last = json.loads(first.splitlines()[-1])
    assert (last["content"], last["metadata"]["tags"]) == ("(empty)", ["claude-code", "tool_result", "empty"])


def test_a_writer_refuses_a_message_the_contract_does_not_allow(tmp_path):
    service = open_service(f"{tmp_path}/store")
    try:
        with pytest.raises(ValidationError, match="content: must be 1–1048576 UTF-8 bytes"):
            service.write_message("s", "user", "", Metadata())
        with pytest.raises(ValidationError, match="metadata.tags: must not repeat a tag"):
            service.write_message("s", "user", "x", Metadata(tags=("a", "a")))
        good = archive.message_from_object(json.loads(archive.line(_message("x"))))
        with pytest.raises(ValidationError, match="timestamp: must be"):
            service.restore_messages([_message("x", timestamp=-1)])
        assert service.restore_messages([good]) == 1
    finally:
        service.close()


def _message(content: str, timestamp: int = 7):
    return written("01M8S3A2BVKRJCXA58W33Y923A", "s", "user", content, timestamp, timestamp, 1, Metadata()).message


def test_an_importer_turns_a_time_before_the_epoch_into_the_previous_one(tmp_path):
    path = samples._lines(f"{tmp_path}/cc/{samples.SID}.jsonl", [
        samples._cc("a", None, "user", "first", "2026-01-20T11:57:18.000Z"),
        samples._cc("b", "a", "user", "long ago", "1901-01-01T00:00:00Z")])
    run_import(f"{tmp_path}/store", "claude-code", [path])
    lines = [json.loads(line) for line in round_trip(f"{tmp_path}/store", str(tmp_path)).splitlines()[1:]]
    assert [m["timestamp"] for m in lines] == [1_768_910_238_000] * 2


# ------------------------------------------------- stores written through the tools
_text = st.text(max_size=12) | st.sampled_from(["", "\x00", "\x1b[2J", "a" * 300, "日本"])
_meta = st.fixed_dictionaries({}, optional={
    "tags": st.lists(st.sampled_from(TAGS) | _text, max_size=4),
    "memory_tier": st.sampled_from(TIERS) | _text,
    "memory_kind": st.sampled_from(KINDS),
    "importance": st.integers(-5, 105),
    "tool_call_id": _text,
    "summary": _text,
    "relations": st.lists(st.fixed_dictionaries({"type": st.sampled_from(RELATION_TYPES),
                                                 "message_id": st.just("01M8S3A2BNY1QPFZ81KJJ6A67X")}),
                          max_size=2),
}).map(json.dumps)
_calls = st.lists(st.one_of(
    st.fixed_dictionaries({"session_id": st.sampled_from(SESSIONS) | _text, "role": st.sampled_from(ROLES) | _text,
                           "content": _text}, optional={"metadata_json": _meta}).map(lambda a: ("write_message", a)),
    st.tuples(st.integers(0, 30), st.fixed_dictionaries({}, optional={"content": _text, "metadata_json": _meta})
              ).map(lambda t: ("update_message", t))), min_size=1, max_size=20)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=_calls)
def test_any_store_written_through_the_tools_goes_round_byte_for_byte(calls):
    root = tempfile.mkdtemp(prefix="convmem-roundtrip-")
    try:
        service = open_service(f"{root}/store")
        ids: list[str] = []
        try:
            for name, args in calls:
                if name == "update_message":
                    if not ids:
                        continue
                    target, args = args
                    args = {**args, "message_id": ids[target % len(ids)]}
                spec = SPECS[name]
                try:
                    result = spec.handler(service, spec.parse(args))
                except ValidationError:
                    continue
                if name == "write_message":
                    ids.append(result["message"]["message_id"])
            with service.snapshot() as (_, live):
                for msg in live:
                    assert validation.message(msg) is msg
        finally:
            service.close()
        round_trip(f"{root}/store", root)
    finally:
        shutil.rmtree(root)


def test_the_bulk_writer_checks_every_message_it_builds(tmp_path):
    """An importer fault (a turn made invalid after it was built) stops the
    batch: nothing of it is written."""
    turn = Turn("s", "k", "user", "text", 1)
    turn.content = ""
    with EventStore(f"{tmp_path}/store", Projector()) as store:
        with pytest.raises(ValidationError, match="content: must be"):
            Writer(store, Report("test")).write([Turn("s", "j", "user", "fine", 1), turn])
    assert export_text(f"{tmp_path}/store").count("\n") == 1


def test_export_refuses_a_stored_message_it_cannot_make_valid_naming_it_and_writes_nothing(tmp_path, capsys):
    with EventStore(f"{tmp_path}/store", Projector()) as store:      # what no writer of today can append
        def command(w):
            w.append([written("01M8S3A2BVKRJCXA58W33Y923A", "s", "user", "x", 5, 5, 1, Metadata(tags=("a", "a")))])
        store.execute(command)
    out = tmp_path / "x.jsonl"
    assert main(["export", "--store", f"{tmp_path}/store", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "message 01M8S3A2BVKRJCXA58W33Y923A cannot be exported: metadata.tags: must not repeat a tag" in err
    assert not out.exists() and not (tmp_path / "x.jsonl.partial").exists()


@pytest.mark.parametrize(("field", "value", "words"), [
    ("session_id", [], "session_id: must be a string"), ("session_id", "", "session_id: must be 1–256"),
    ("content", "", "content: must be 1–1048576"), ("timestamp", -1, "timestamp: must be"),
    ("metadata", {"tags": [["x"]]}, "metadata.tags[]: must be a string"),
    ("metadata", {"summary": ""}, None), ("metadata", {"relations": [1]}, "metadata.relations[]: must be an object")])
def test_an_export_line_is_checked_by_the_one_definition(field, value, words):
    line = json.loads(archive.line(_message("x")))
    line[field] = value
    text = archive.header(1) + json.dumps(line) + "\n"
    if words is None:       # summary "" is the tools' "clear": absent
        assert next(archive.read(io.StringIO(text)))[0].metadata.summary is None
        return
    with pytest.raises(ValidationError, match=re.escape(f"line 2: {words}")):
        list(archive.read(io.StringIO(text)))
