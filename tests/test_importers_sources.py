"""Each source's mapping, on the sample files of import_samples.py: sessions,
roles, timestamps, tags, tool_call_id, relations, summaries, and every skip
reported as file:line."""

from __future__ import annotations

import json

import import_samples as samples
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.store import EventStore
from projections.registry import Projector
from server.importers import Options, reading, run_import
from server.importers.turns import import_id
from server.maintenance import dump_projections
from server.service import MemoryService


def messages_of(store_path: str) -> dict[str, list[dict]]:
    svc = MemoryService(store_path)
    try:
        return {s["session_id"]: svc.history(s["session_id"], 500, None)["history"]
                for s in svc.sessions(100, None)["sessions"]}
    finally:
        svc.close()


def tags(msg: dict) -> list[str]:
    return msg["metadata"]["tags"]


def by_key(history: list[dict]) -> dict[str, dict]:
    """The messages by their source turn's import key (found through the name-based import id)."""
    class Keyed(dict):
        def __getitem__(self, key: str) -> dict:
            return super().__getitem__(import_id(history[0]["session_id"], key))
    return Keyed({m["metadata"]["source_message_ids"][0]: m for m in history})


# ------------------------------------------------------------- claude-code
def test_claude_code_maps_each_block_and_links_tool_results_to_their_calls(tmp_path, store_path):
    root = samples.claude_code(str(tmp_path / "projects"))
    summary = run_import(store_path, "claude-code", [root])
    sessions = messages_of(store_path)
    main = sessions[f"claude-code:{samples.SID}"]
    got = by_key(main)
    assert [m["role"] for m in main] == ["user", "assistant", "assistant", "user", "assistant", "user",
                                         "assistant", "system", "user", "system"]
    assert got["u1"]["content"] == "Why does test_deploy fail on CI?"
    assert got["u1"]["timestamp"] == 1_768_910_238_000
    assert got["u2"]["content"] == "Let me run the deploy test."          # thinking skipped by default
    call = got["tool_use:toolu_01A"]
    assert call["content"] == '[tool_use Bash]\n{"command": "pytest -k deploy"}'
    assert call["metadata"]["tool_call_id"] == "toolu_01A"
    assert "tool:Bash" in tags(call) and "claude-code" in tags(call)
    result = got["tool_result:toolu_01A"]
    assert result["content"] == "[error] FAILED test_deploy - TimeoutError"
    assert result["metadata"]["relations"] == [{"type": "depends_on", "message_id": call["message_id"]}]
    assert {"tool_result", "tool:Bash", "error"} <= set(tags(result))
    assert got["tool_result:toolu_01B"]["content"].startswith("def deploy(): sleep(30)\n[image: image/png")
    assert "[image: image/png" in got["u6"]["content"]
    assert got["u7"]["role"] == "system" and got["u7"]["content"] == "Conversation compacted"
    assert got["u8"]["timestamp"] == got["u7"]["timestamp"]       # no timestamp: the previous line's
    digest = got["summary:u6"]
    assert digest["metadata"]["memory_kind"] == "summary"
    assert digest["metadata"]["summary"] == digest["content"] == "Fixing the flaky deploy test"
    assert digest["timestamp"] == got["u6"]["timestamp"]
    agent = sessions[f"claude-code:{samples.SID}/agent-{samples.AGENT}"]
    assert [m["content"] for m in agent] == ["Find every sleep() in the repo", "deploy.py:3 sleep(30)",
                                             '[tool_use Bash]\n{"command": "touch done"}', "(empty)"]
    assert f"parent-session:claude-code:{samples.SID}" in tags(agent[0])
    assert tags(agent[3])[-3:] == ["tool_result", "tool:Bash", "empty"] and "empty" not in tags(agent[2])
    assert summary["written"] == len(main) + len(agent) == summary["turns"]


def test_claude_code_reports_each_bad_line_by_file_and_line(tmp_path, store_path, capsys):
    root = samples.claude_code(str(tmp_path / "projects"))
    summary = run_import(store_path, "claude-code", [root])
    name = f"{samples.SID}.jsonl"
    reasons = {s.split(name + ":", 1)[1] for s in summary["skips"]}
    assert reasons == {"8: unknown content block type 'hologram'", "12: a message line without a uuid",
                       "13: message.content is neither a string nor a list of blocks",
                       "14: not a JSON object", "15: not valid JSON", "16: not valid JSON (truncated last line)"}
    assert summary["ignored"] == 2                   # the queue operation and the file snapshot
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("convmem import: warning: skipped") == 6


def test_thinking_is_kept_only_when_asked(tmp_path, store_path):
    root = samples.claude_code(str(tmp_path / "projects"))
    run_import(store_path, "claude-code", [root], Options(thinking=True))
    got = by_key(messages_of(store_path)[f"claude-code:{samples.SID}"])
    assert got["u2"]["content"] == ("[thinking]\nThe deploy test probably races the clock.\n\n"
                                    "Let me run the deploy test.")
    assert "thinking" in tags(got["u2"])


# ------------------------------------------------------------------ codex
def test_codex_maps_messages_tool_calls_outputs_and_compaction(tmp_path, store_path):
    root = samples.codex(str(tmp_path / "sessions"))
    summary = run_import(store_path, "codex", [root])
    history = messages_of(store_path)[f"codex:{samples.CODEX_ID}"]
    assert [(m["role"], m["content"].split("\n")[0]) for m in history] == [
        ("system", "<permissions>sandboxed</permissions>"),
        ("user", "Add a retry to the payment client"),
        ("assistant", "[tool_use shell]"),
        ("user", '{"output": "client.py:12:def charge(", "metadata": {"exit_code": 0}}'),
        ("assistant", "[tool_use apply_patch]"),
        ("user", "Success"),
        ("assistant", "Added @retry(3) to charge()."),
        ("system", "User asked for payment retries; done.")]
    call, output = history[2], history[3]
    assert call["metadata"]["tool_call_id"] == output["metadata"]["tool_call_id"] == "call_1"
    assert output["metadata"]["relations"] == [{"type": "depends_on", "message_id": call["message_id"]}]
    assert "model:gpt-5-codex" in tags(history[1]) and "tool:shell" in tags(output)
    assert history[1]["content"].endswith("[image]")
    assert history[-1]["metadata"]["memory_kind"] == "summary"
    assert history[0]["timestamp"] == 1_759_395_602_000
    assert [s.rsplit(":", 2)[1:] for s in summary["skips"]] == [
        ["14", " a tool call without a call_id"], ["15", " a message without a known role"],
        ["16", " unknown line type"], ["17", " not valid JSON"]]
    assert summary["ignored"] == 4        # session_meta, two event_msg, and the reasoning (no --thinking)


def test_codex_items_with_their_own_ids_are_keyed_by_them_so_a_resumed_copy_adds_only_what_is_new(tmp_path,
                                                                                                     store_path):
    meta, first, second = samples.codex_lines()[0], "msg_01", "msg_02"
    said = lambda mid, text: {"timestamp": "2025-10-02T09:01:00.000Z", "type": "response_item", "payload": {
        "type": "message", "role": "user", "id": mid, "content": [{"type": "input_text", "text": text}]}}
    plain = {"timestamp": "2025-10-02T09:01:00.000Z", "type": "response_item", "payload": {
        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "no id here"}]}}
    samples._lines(str(tmp_path / "a" / f"rollout-2025-10-02T09-00-00-{samples.CODEX_ID}.jsonl"),
                   [meta, said(first, "first question"), plain])
    run_import(store_path, "codex", [str(tmp_path / "a")])
    resumed = [meta, {"timestamp": "2025-10-02T09:02:00.000Z", "type": "turn_context", "payload": {"model": "m"}},
               said(first, "first question"), said(second, "second question")]
    samples._lines(str(tmp_path / "b" / f"rollout-2025-10-02T10-00-00-{samples.CODEX_ID}.jsonl"), resumed)
    again = run_import(store_path, "codex", [str(tmp_path / "b")])
    assert (again["written"], again["already_present"]) == (1, 1)
    keyed = by_key(messages_of(store_path)[f"codex:{samples.CODEX_ID}"])
    assert keyed["item:msg_01"]["content"] == "first question"
    assert keyed["item:msg_02"]["content"] == "second question"
    assert keyed["line:3"]["content"] == "no id here"


def test_codex_reasoning_summaries_are_kept_with_thinking(tmp_path, store_path):
    root = samples.codex(str(tmp_path / "sessions"))
    run_import(store_path, "codex", [root], Options(thinking=True))
    history = messages_of(store_path)[f"codex:{samples.CODEX_ID}"]
    assert "[thinking]\nLook at client.py first" in [m["content"] for m in history]


# ---------------------------------------------------------------- chatgpt
@pytest.mark.parametrize("as_zip", [False, True])
def test_chatgpt_follows_the_visible_thread_and_skips_regenerated_branches(tmp_path, store_path, as_zip):
    path = samples.chatgpt(str(tmp_path / "export"), as_zip=as_zip)
    summary = run_import(store_path, "chatgpt", [path])
    history = messages_of(store_path)["chatgpt:c0ffee00-1111-2222-3333-444455556666"]
    assert [m["content"] for m in history] == ["What is a B-tree?", "A balanced search tree with wide nodes.",
                                               "Draw one\n\n[image: 640x480]", "Image generated", "print('tree')"]
    assert [m["role"] for m in history] == ["user", "assistant", "user", "user", "assistant"]
    assert history[0]["metadata"]["summary"] == "B-trees"
    assert history[0]["timestamp"] == 1_700_000_000_500
    assert history[2]["timestamp"] == history[1]["timestamp"]          # create_time missing
    assert {"tool_result", "tool:dalle.text2im"} <= set(tags(history[3]))
    assert "model:gpt-4o" in tags(history[1])
    assert len(summary["skips"]) == 2 and "conversation 2: a conversation without an id" in summary["skips"][0]


def test_chatgpt_branches_imports_side_branches_tagged(tmp_path, store_path):
    path = samples.chatgpt(str(tmp_path / "export"))
    run_import(store_path, "chatgpt", [path], Options(branches=True))
    history = messages_of(store_path)["chatgpt:c0ffee00-1111-2222-3333-444455556666"]
    branch = [m for m in history if "branch" in tags(m)]
    assert [m["content"] for m in branch] == ["(regenerated) A tree."]


# -------------------------------------------------------------- claude-ai
@pytest.mark.parametrize("as_zip", [False, True])
def test_claude_ai_maps_blocks_attachments_and_names(tmp_path, store_path, as_zip):
    path = samples.claude_ai(str(tmp_path / "export"), as_zip=as_zip)
    summary = run_import(store_path, "claude-ai", [path])
    history = messages_of(store_path)["claude-ai:5e1d0c3a-aaaa-bbbb-cccc-000000000001"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[0]["content"] == ("Plan three days in Lisbon\n\n[attachment notes.txt]\nI like museums\n\n"
                                     "[file map.png]")
    assert history[0]["metadata"]["summary"] == "Trip planning"
    assert history[1]["content"] == ('[tool_use web_search]\n{"query": "Lisbon museums"}\n\n'
                                     "[tool_result web_search]\nGulbenkian Museum\n\n"
                                     "Day 1: Gulbenkian. Day 2: Belem.\n\n[token_budget block]")
    assert history[1]["timestamp"] == 1_746_093_660_000
    assert history[2]["timestamp"] == history[1]["timestamp"]          # created_at missing
    assert len(summary["skips"]) == 3


# ----------------------------------------------------------- memory-jsonl
def test_memory_graph_entities_become_semantic_memories_with_typed_relations(tmp_path, store_path):
    path = samples.memory_jsonl(str(tmp_path))
    summary = run_import(store_path, "memory-jsonl", [path])
    got = by_key(messages_of(store_path)["memory-jsonl:memory"])
    ada, shop, lib = got["entity:Ada"], got["entity:shop-backend"], got["entity:payments-lib"]
    assert ada["content"] == ("Ada (person)\n- Prefers dark mode\n- Works on the shop backend\n"
                              "→ works_on: shop-backend\n→ knows: Grace")
    assert ada["metadata"]["memory_kind"] == "semantic" and ada["metadata"]["memory_tier"] == "long"
    assert {"entity-type:person", "relation-type:works_on"} <= set(tags(ada))
    assert ada["metadata"]["relations"] == [{"type": "related_to", "message_id": shop["message_id"]},
                                            {"type": "related_to", "message_id": got["entity:Grace"]["message_id"]}]
    assert shop["metadata"]["relations"] == [{"type": "depends_on", "message_id": lib["message_id"]}]
    assert [s.split("memory.jsonl:")[1] for s in summary["skips"]] == [
        "7: an entity without a name", "8: neither an entity nor a relation", "9: not valid JSON"]


def test_a_relation_to_an_entity_the_graph_lacks_keeps_it_as_an_entity_created_by_the_import(
        tmp_path, store_path, capsys):
    from server.cli import main
    path = samples._lines(str(tmp_path / "memory.jsonl"), [
        {"type": "entity", "name": "Ada", "entityType": "person", "observations": []},
        {"type": "relation", "from": "Ada", "to": "Grace", "relationType": "knows"},
        {"type": "relation", "from": "Linus", "to": "Ada", "relationType": "mentors"}])
    assert main(["import", "memory-jsonl", path, "--store", store_path]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err and err.count("convmem import: note: ") == 2
    got = by_key(messages_of(store_path)["memory-jsonl:memory"])
    grace, linus = got["entity:Grace"], got["entity:Linus"]
    assert grace["content"] == "Grace\n(named by a relation; the graph holds no entity of this name)"
    assert tags(grace) == ["memory-jsonl", "created-by-import"] and "created-by-import" not in tags(got["entity:Ada"])
    assert linus["content"].endswith("\n→ mentors: Ada")
    assert linus["metadata"]["relations"] == [{"type": "related_to", "message_id": got["entity:Ada"]["message_id"]}]
    assert got["entity:Ada"]["metadata"]["relations"] == [{"type": "related_to", "message_id": grace["message_id"]}]
    broken = samples._lines(str(tmp_path / "broken.jsonl"), ['{"type": "relation", "fr'])
    assert main(["import", "memory-jsonl", broken, "--store", store_path]) == 1     # unreadable: still 1


def test_a_memory_graph_imported_again_updates_the_entities_that_changed_and_only_those(tmp_path, store_path):
    path = samples.memory_jsonl(str(tmp_path))
    run_import(store_path, "memory-jsonl", [path])
    before = by_key(messages_of(store_path)["memory-jsonl:memory"])
    svc = MemoryService(store_path)        # a user's own change to an imported entity
    try:
        svc.update_message(before["entity:Ada"]["message_id"], None, {"importance": 90}, None)
    finally:
        svc.close()
    samples._lines(path, samples.memory_lines()[:6] + [
        {"type": "entity", "name": "Ada", "observations": ["Moved to the payments team"]},
        {"type": "entity", "name": "Grace", "entityType": "person", "observations": []},
        {"type": "relation", "from": "payments-lib", "to": "Grace", "relationType": "maintained_by"}])
    summary = run_import(store_path, "memory-jsonl", [path])
    assert (summary["written"], summary["updated"], summary["already_present"]) == (0, 3, 1)
    after = by_key(messages_of(store_path)["memory-jsonl:memory"])
    ada, lib, grace = after["entity:Ada"], after["entity:payments-lib"], after["entity:Grace"]
    assert ada["message_id"] == before["entity:Ada"]["message_id"] and ada["revision"] == 3
    assert ada["content"] == ("Ada (person)\n- Prefers dark mode\n- Works on the shop backend\n"
                              "- Moved to the payments team\n→ works_on: shop-backend\n→ knows: Grace")
    assert ada["metadata"]["importance"] == 90
    assert ada["metadata"]["relations"] == [{"type": "related_to", "message_id": after["entity:shop-backend"][
        "message_id"]}, {"type": "related_to", "message_id": grace["message_id"]}]
    assert lib["metadata"]["relations"] == [{"type": "related_to", "message_id": grace["message_id"]}]
    assert after["entity:shop-backend"] == before["entity:shop-backend"]
    again = run_import(store_path, "memory-jsonl", [path])
    assert (again["written"], again["updated"], again["already_present"]) == (0, 0, 4)
    with EventStore(store_path, Projector()) as store:     # the updates are events: a replay agrees
        live = dump_projections(store)
        store.rebuild_projections()
        assert dump_projections(store) == live


def test_relation_types_map_by_their_words():
    from server.importers.memory_jsonl import relation_type
    assert [relation_type(t) for t in ("depends_on", "requires", "usesLibrary", "is_based_on", "replaces",
                                       "works_at", "knows")] == [
        "depends_on", "depends_on", "depends_on", "derived_from", "supersedes", "related_to", "related_to"]


def test_an_imported_message_names_its_source_turn_by_a_name_based_id(tmp_path, store_path):
    root = samples.claude_code(str(tmp_path / "projects"))
    run_import(store_path, "claude-code", [root])
    first = messages_of(store_path)[f"claude-code:{samples.SID}"][0]
    expected = import_id(f"claude-code:{samples.SID}", "u1")
    assert first["metadata"]["source_message_ids"] == [expected]
    assert expected.startswith("0000000000") and len(expected) == 26
    assert first["metadata"]["tags"] == ["claude-code", "project:/home/ada/shop"]    # the session's project: its cwd


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                     max_leaves=20)


def _parsed(parse, raw: bytes):
    try:
        return "ok", parse(raw)
    except Exception as exc:        # the kind of failure must match too
        return "error", type(exc)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.booleans(), st.binary(max_size=30))
def test_a_jsonl_line_is_read_as_json_loads_reads_it(value, ascii_only, noise):
    """Lines are decoded without json.loads' encoding sniffing when they start
    with '{': the same objects and the same failures, lone surrogates, a
    byte-order mark, invalid UTF-8 and what it takes for UTF-16 included."""
    lines = [json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"),
             json.dumps({"k": value}, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"),
             b"{" + noise, noise, b'{"a": "\xed\xa0\x80"}', b"\xef\xbb\xbf{}", b"{\xff}", b'{"a":',
             "{}".encode("utf-16-le")]
    for raw in lines:
        assert _parsed(reading._object, raw) == _parsed(json.loads, raw)


def test_import_notes_and_summaries_show_paths_escaped_never_obeyed(tmp_path, capsys):
    from server.cli import main
    folder = tmp_path / "dir\x1b[2J\u202e"
    folder.mkdir()
    store = str(folder / "store")
    path = samples._lines(str(folder / "memory.jsonl"), [
        {"type": "entity", "name": "Ada", "entityType": "person", "observations": []},
        {"type": "relation", "from": "Ada", "to": "Eve", "relationType": "knows"}])
    assert main(["import", "memory-jsonl", path, "--store", store]) == 0
    err = capsys.readouterr().err
    assert err.count("dir\\x1b[2J\\u202e") == 2        # the note's file and the summary's store
    assert "\x1b" not in err and "\u202e" not in err
    assert main(["import", "memory-jsonl", path, "--store", store, "--json"]) == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out and "\x1b" not in out and "\\u202e" in out
    assert json.loads(out)["notes"][0].startswith(str(folder))
