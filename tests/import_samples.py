"""Realistic source files for the importer tests, built here (every block type
the formats have, and the mess real files hold: broken and truncated lines,
unknown types, missing fields, huge messages)."""

from __future__ import annotations

import json
import os
import zipfile

SID = "7f1c2a9e-0d4b-4c1e-9a55-2b8f0c6d1e01"
AGENT = "a9e67a1"
CODEX_ID = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


def _lines(path: str, items: list, tail: str = "") -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(item if isinstance(item, str) else json.dumps(item))
            fh.write("\n")
        fh.write(tail)
    return path


def _cc(uuid: str, parent: str | None, kind: str, content, ts: str, **more) -> dict:
    line = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/home/ada/shop",
            "sessionId": SID, "version": "2.0.61", "gitBranch": "main", "type": kind,
            "message": {"role": kind, "content": content}, "uuid": uuid, "timestamp": ts}
    line.update(more)
    return line


def claude_code_lines() -> list:
    return [
        {"type": "summary", "summary": "Fixing the flaky deploy test", "leafUuid": "u6"},
        {"type": "queue-operation", "operation": "dequeue", "timestamp": "2026-01-20T11:57:17.716Z",
         "sessionId": SID},
        _cc("u1", None, "user", "Why does test_deploy fail on CI?", "2026-01-20T11:57:18.000Z"),
        _cc("u2", "u1", "assistant", [
            {"type": "thinking", "thinking": "The deploy test probably races the clock.", "signature": "c2ln"},
            {"type": "text", "text": "Let me run the deploy test."},
            {"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": {"command": "pytest -k deploy"}},
        ], "2026-01-20T11:57:19.000Z", requestId="req_1"),
        _cc("u3", "u2", "user", [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "FAILED test_deploy - TimeoutError",
             "is_error": True}], "2026-01-20T11:57:20.000Z", toolUseResult={"stdout": "FAILED"}),
        _cc("u4", "u3", "assistant", [
            {"type": "tool_use", "id": "toolu_01B", "name": "Read", "input": {"file_path": "deploy.py"}}],
            "2026-01-20T11:57:21.000Z"),
        _cc("u5", "u4", "user", [
            {"type": "tool_result", "tool_use_id": "toolu_01B",
             "content": [{"type": "text", "text": "def deploy(): sleep(30)"},
                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                      "data": "iVBORw0KGgo="}}]}],
            "2026-01-20T11:57:22.000Z"),
        _cc("u6", "u5", "assistant", [
            {"type": "text", "text": "The deploy sleeps 30 s; the CI timeout is 20 s."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            {"type": "redacted_thinking", "data": "xyz"},
            {"type": "hologram", "text": "a block type from the future"}],
            "2026-01-20T11:57:23.000Z"),
        {"type": "system", "content": "Conversation compacted", "subtype": "compact_boundary", "uuid": "u7",
         "sessionId": SID, "timestamp": "2026-01-20T11:57:24.000Z"},
        {"type": "file-history-snapshot", "messageId": "u6", "snapshot": {}},
        _cc("u8", "u6", "user", "thanks", None),                     # no timestamp: the previous one's
        {"type": "user", "sessionId": SID, "message": {"role": "user", "content": "no uuid"}},
        _cc("u9", "u8", "user", 42, "2026-01-20T11:57:26.000Z"),     # content neither string nor list
        "[1, 2, 3]",
        '{"parentUuid": "u9", "isSidechain": false, "type": "assist',   # a broken line
    ]


def claude_code(root: str, *, truncated_tail: bool = True) -> str:
    """A project directory with one session and one subagent transcript."""
    project = os.path.join(root, "-home-ada-shop")
    tail = '{"parentUuid":"u9","type":"user","message":{"role":"user","content":"hal' if truncated_tail else ""
    _lines(os.path.join(project, f"{SID}.jsonl"), claude_code_lines(), tail)
    agent = [
        {**_cc("v1", None, "user", "Find every sleep() in the repo", "2026-01-20T11:58:00.000Z"),
         "isSidechain": True, "agentId": AGENT},
        {**_cc("v2", "v1", "assistant", [{"type": "text", "text": "deploy.py:3 sleep(30)"}],
               "2026-01-20T11:58:05.000Z"), "isSidechain": True, "agentId": AGENT},
        {**_cc("v3", "v2", "assistant", [{"type": "tool_use", "id": "toolu_02E", "name": "Bash",
                                          "input": {"command": "touch done"}}],
               "2026-01-20T11:58:06.000Z"), "isSidechain": True, "agentId": AGENT},
        {**_cc("v4", "v3", "user", [{"type": "tool_result", "tool_use_id": "toolu_02E", "content": ""}],
               "2026-01-20T11:58:07.000Z"), "isSidechain": True, "agentId": AGENT},     # a command that printed nothing
    ]
    _lines(os.path.join(project, SID, "subagents", f"agent-{AGENT}.jsonl"), agent)
    return root


def codex_lines() -> list:
    ts = lambda s: f"2025-10-02T09:00:{s:02d}.000Z"
    item = lambda s, payload: {"timestamp": ts(s), "type": "response_item", "payload": payload}
    return [
        {"timestamp": ts(0), "type": "session_meta", "payload": {
            "id": CODEX_ID, "timestamp": ts(0), "cwd": "/home/ada/shop", "originator": "codex_cli_rs",
            "cli_version": "0.44.0", "instructions": None}},
        {"timestamp": ts(1), "type": "turn_context", "payload": {"cwd": "/home/ada/shop", "model": "gpt-5-codex",
                                                                  "approval_policy": "on-request"}},
        item(2, {"type": "message", "role": "developer", "content": [
            {"type": "input_text", "text": "<permissions>sandboxed</permissions>"}]}),
        item(3, {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Add a retry to the payment client"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}),
        {"timestamp": ts(3), "type": "event_msg", "payload": {"type": "user_message",
                                                              "message": "Add a retry to the payment client"}},
        item(4, {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Look at client.py first"}],
                 "content": None, "encrypted_content": "gAAA"}),
        item(5, {"type": "function_call", "name": "shell", "call_id": "call_1",
                 "arguments": json.dumps({"command": ["rg", "def charge"]})}),
        item(6, {"type": "function_call_output", "call_id": "call_1",
                 "output": json.dumps({"output": "client.py:12:def charge(", "metadata": {"exit_code": 0}})}),
        item(7, {"type": "custom_tool_call", "name": "apply_patch", "call_id": "call_2",
                 "input": "*** Begin Patch\n*** Update File: client.py\n+@retry(3)\n*** End Patch"}),
        item(8, {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Success"}),
        item(9, {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Added @retry(3) to charge()."}]}),
        {"timestamp": ts(10), "type": "event_msg", "payload": {"type": "token_count", "info": None}},
        {"timestamp": ts(11), "type": "compacted", "payload": {"message": "User asked for payment retries; done."}},
        item(12, {"type": "function_call", "name": "shell", "arguments": "{}"}),           # no call_id
        item(13, {"type": "message", "role": "robot", "content": []}),                  # unknown role
        {"timestamp": ts(14), "type": "ghost_line", "payload": {}},                      # unknown line type
        "not json at all",
    ]


def codex(root: str) -> str:
    path = os.path.join(root, "2025", "10", "02", f"rollout-2025-10-02T09-00-00-{CODEX_ID}.jsonl")
    _lines(path, codex_lines())
    return root


def chatgpt_conversations() -> list:
    def node(nid, parent, children, role, parts, t=None, **more):
        msg = {"id": nid, "author": {"role": role, "name": more.pop("name", None), "metadata": {}},
               "create_time": t, "content": {"content_type": more.pop("content_type", "text"), "parts": parts},
               "status": "finished_successfully", "weight": 1.0, "metadata": more.pop("metadata", {})}
        return {"id": nid, "message": msg, "parent": parent, "children": children}
    mapping = {
        "root": {"id": "root", "message": None, "parent": None, "children": ["sys"]},
        "sys": node("sys", "root", ["q1"], "system", [""], None,
                    metadata={"is_visually_hidden_from_conversation": True}),
        "q1": node("q1", "sys", ["a1", "a1b"], "user", ["What is a B-tree?"], 1_700_000_000.5),
        "a1": node("a1", "q1", ["q2"], "assistant", ["A balanced search tree with wide nodes."], 1_700_000_010.0,
                   metadata={"model_slug": "gpt-4o"}),
        "a1b": node("a1b", "q1", [], "assistant", ["(regenerated) A tree."], 1_700_000_005.0),
        "q2": node("q2", "a1", ["t1"], "user", ["Draw one", {"content_type": "image_asset_pointer",
                                                              "asset_pointer": "file-service://x", "width": 640,
                                                              "height": 480}], None),
        "t1": node("t1", "q2", ["a2"], "tool", ["Image generated"], 1_700_000_030.0, name="dalle.text2im"),
        "a2": {"id": "a2", "parent": "t1", "children": [], "message": {
            "id": "a2", "author": {"role": "assistant"}, "create_time": 1_700_000_040.0,
            "content": {"content_type": "code", "language": "python", "text": "print('tree')"}}},
    }
    good = {"title": "B-trees", "create_time": 1_699_999_999.0, "update_time": 1_700_000_040.0,
            "mapping": mapping, "current_node": "a2", "conversation_id": "c0ffee00-1111-2222-3333-444455556666",
            "id": "c0ffee00-1111-2222-3333-444455556666"}
    return [good, {"title": "no mapping", "id": "broken"}, "not an object"]


def chatgpt(root: str, *, as_zip: bool = False) -> str:
    data = json.dumps(chatgpt_conversations())
    os.makedirs(root, exist_ok=True)
    if as_zip:
        path = os.path.join(root, "chatgpt-export.zip")
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("conversations.json", data)
            zf.writestr("chat.html", "<html></html>")
        return path
    path = os.path.join(root, "conversations.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(data)
    return path


def claude_ai_conversations() -> list:
    return [{
        "uuid": "5e1d0c3a-aaaa-bbbb-cccc-000000000001", "name": "Trip planning",
        "created_at": "2025-05-01T10:00:00.000000Z", "updated_at": "2025-05-01T10:05:00.000000Z",
        "account": {"uuid": "acct"},
        "chat_messages": [
            {"uuid": "m1", "sender": "human", "text": "Plan three days in Lisbon",
             "content": [{"type": "text", "text": "Plan three days in Lisbon"}],
             "created_at": "2025-05-01T10:00:00.000000Z",
             "attachments": [{"file_name": "notes.txt", "file_size": 12, "file_type": "txt",
                              "extracted_content": "I like museums"}], "files": [{"file_name": "map.png"}]},
            {"uuid": "m2", "sender": "assistant", "text": "",
             "content": [{"type": "thinking", "thinking": "Museums, then Belem."},
                         {"type": "tool_use", "name": "web_search", "input": {"query": "Lisbon museums"}},
                         {"type": "tool_result", "name": "web_search",
                          "content": [{"type": "text", "text": "Gulbenkian Museum"}]},
                         {"type": "text", "text": "Day 1: Gulbenkian. Day 2: Belem."},
                         {"type": "token_budget"}],
             "created_at": "2025-05-01T10:01:00.000000Z", "attachments": [], "files": []},
            {"uuid": "m3", "sender": "human", "text": "Thanks!", "content": [], "attachments": [], "files": []},
            {"uuid": "m4", "sender": "narrator", "text": "?"},
            {"sender": "human", "text": "no uuid"},
        ]},
        {"name": "no uuid"}]


def claude_ai(root: str, *, as_zip: bool = False) -> str:
    data = json.dumps(claude_ai_conversations())
    os.makedirs(root, exist_ok=True)
    if as_zip:
        path = os.path.join(root, "data-2025-05-02.zip")
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("data-2025-05-02/conversations.json", data)
            zf.writestr("data-2025-05-02/users.json", "[]")
        return path
    path = os.path.join(root, "conversations.json")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(data)
    return path


def memory_lines() -> list:
    return [
        {"type": "entity", "name": "Ada", "entityType": "person",
         "observations": ["Prefers dark mode", "Works on the shop backend"]},
        {"type": "entity", "name": "shop-backend", "entityType": "project", "observations": ["Python 3.12"]},
        {"type": "entity", "name": "payments-lib", "entityType": "library", "observations": []},
        {"type": "relation", "from": "Ada", "to": "shop-backend", "relationType": "works_on"},
        {"type": "relation", "from": "shop-backend", "to": "payments-lib", "relationType": "depends_on"},
        {"type": "relation", "from": "Ada", "to": "Grace", "relationType": "knows"},     # unknown entity
        {"type": "entity", "entityType": "person"},                                     # no name
        {"type": "mystery"},
        '{"type": "entity", "name": "trunc',
    ]


def memory_jsonl(root: str) -> str:
    return _lines(os.path.join(root, "memory.jsonl"), memory_lines())
