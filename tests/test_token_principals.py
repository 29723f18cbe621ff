"""Named tokens: the file (salted hashes, 0600), the bearer check, and a real
``convmem serve --http`` that serves two agents and refuses a revoked token at
its next request, without a restart."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import urllib.error
import urllib.request

import pytest

from eventstore.errors import NotFoundError, ValidationError
from server import tokens
from server.bearer import BearerVerifier, current
from server.principals import DEFAULT, LOCAL
from tools.mcp_client import http_server


def test_the_file_keeps_only_salted_hashes_mode_0600(tmp_path):
    path = str(tmp_path / "s.tokens")
    token = tokens.add(path, "agent-a", sessions=("proj-a/*",))
    assert token.startswith("cmt_") and not token.startswith("-")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert tokens.split(token)[1] not in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    entry = tokens.read(path)[0]
    assert entry.public() == {"name": "agent-a", "read_only": False, "sessions": ["proj-a/*"],
                              "created_at": entry.created_at}
    with pytest.raises(ValidationError, match="exists"):
        tokens.add(path, "agent-a")
    with pytest.raises(ValidationError, match="reserved"):
        tokens.add(path, "default")
    with pytest.raises(NotFoundError):
        tokens.revoke(path, "nobody")


def test_the_verifier_names_the_principal_and_sees_a_revocation_at_once(tmp_path):
    path = str(tmp_path / "s.tokens")
    a = tokens.add(path, "agent-a", read_only=True)
    b = tokens.add(path, "agent-b", sessions=("x/*",))
    verifier = BearerVerifier("shared-token-0123456789", tokens.TokenFile(path))
    assert verifier.principal("shared-token-0123456789") is DEFAULT
    assert verifier.principal(a).name == "agent-a" and verifier.principal(a).read_only
    assert verifier.principal(b).sessions == ("x/*",)
    assert verifier.principal(a[:-1] + ("A" if a[-1] != "A" else "B")) is None
    assert verifier.principal("cmt_000000000000_nothing") is None
    tokens.revoke(path, "agent-a")
    assert verifier.principal(a) is None and verifier.principal(b) is not None
    access = asyncio.run(verifier.verify_token(b))
    assert access is not None and b not in json.dumps(access.model_dump())


def test_a_damaged_file_refuses_named_tokens_but_keeps_the_single_one(tmp_path):
    path = str(tmp_path / "s.tokens")
    a = tokens.add(path, "agent-a")
    os.chmod(path, 0o644)
    verifier = BearerVerifier("shared-token-0123456789", tokens.TokenFile(path))
    assert verifier.principal(a) is None
    assert verifier.principal("shared-token-0123456789") is DEFAULT


def test_no_access_token_is_local():
    assert current() is LOCAL


def _call(url: str, token: str, name: str, arguments: dict) -> tuple[int, dict | None]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            result = json.loads(response.read())["result"]
            return response.status, json.loads(result["content"][0]["text"])
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_two_agents_over_http_and_a_revoked_token_refused_at_its_next_request(tmp_path):
    store = str(tmp_path / "store")
    path = tokens.default_path(store)
    a = tokens.add(path, "agent-a", sessions=("proj-a/*",))
    b = tokens.add(path, "agent-b", sessions=("proj-a/*", "proj-b/*"))
    with http_server(store) as server:
        status, wrote = _call(server.url, a, "write_message",
                              {"session_id": "proj-a/1", "role": "user", "content": "shared fact"})
        assert status == 200 and wrote["status"] == "OK"
        status, refused = _call(server.url, a, "write_message",
                                {"session_id": "proj-b/1", "role": "user", "content": "not mine"})
        assert refused["status"] == "ERROR" and "proj-a/*" in refused["error"]["message"]
        _call(server.url, b, "write_message", {"session_id": "proj-b/1", "role": "user", "content": "b only"})
        _, seen_a = _call(server.url, a, "read_messages", {"view": "sessions"})
        _, seen_b = _call(server.url, b, "read_messages", {"view": "sessions"})
        _, seen_all = _call(server.url, server.token, "read_messages", {"view": "sessions"})
        assert [s["session_id"] for s in seen_a["sessions"]] == ["proj-a/1"]
        assert {s["session_id"] for s in seen_b["sessions"]} == {"proj-a/1", "proj-b/1"}
        assert {s["session_id"] for s in seen_all["sessions"]} == {"proj-a/1", "proj-b/1"}
        mid = wrote["message"]["message_id"]
        _, revs = _call(server.url, b, "read_messages", {"view": "revisions", "message_id": mid})
        assert revs["revisions"][0]["principal"] == "agent-a"
        _, by_default = _call(server.url, server.token, "write_message",
                              {"session_id": "other", "role": "user", "content": "from the single token"})
        other = by_default["message"]["message_id"]
        _, revs = _call(server.url, server.token, "read_messages", {"view": "revisions", "message_id": other})
        assert revs["revisions"][0]["principal"] == "default"
        assert _call(server.url, a, "read_messages", {"view": "revisions", "message_id": other})[1]["status"] == "ERROR"
        tokens.revoke(path, "agent-a")
        assert _call(server.url, a, "read_messages", {"view": "sessions"})[0] == 401
        assert _call(server.url, b, "read_messages", {"view": "sessions"})[0] == 200
        assert _call(server.url, "cmt_x_wrong", "read_messages", {"view": "sessions"})[0] == 401


def test_the_token_commands(tmp_path, capsys):
    from server.cli import main
    store = str(tmp_path / "store")
    assert main(["--store", store, "token", "add", "agent-a", "--read-only", "--sessions", "p/*", "q"]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("cmt_")
    assert main(["--store", store, "token", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(e["name"], e["read_only"], e["sessions"]) for e in listed] == [("agent-a", True, ["p/*", "q"])]
    assert main(["--store", store, "token", "add", "agent-a"]) == 2
    assert main(["--store", store, "token", "revoke", "agent-a"]) == 0
    assert main(["--store", store, "token", "revoke", "agent-a"]) == 2
    capsys.readouterr()
    assert main(["--store", store, "token", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_server_checks_bearer_tokens_with_one_verifier(tmp_path, monkeypatch):
    from eventstore.errors import ConvMemError
    from server import http_transport
    made: list[BearerVerifier] = []

    def verifier(*args):
        made.append(BearerVerifier(*args))
        return made[-1]
    monkeypatch.setattr(http_transport, "BearerVerifier", verifier)
    unopenable = tmp_path / "a-file"            # the server starts, fails to open it and stops
    unopenable.write_bytes(b"")
    settings = http_transport.HttpSettings(port=0, token="shared-token-0123456789")
    with pytest.raises(ConvMemError):
        asyncio.run(http_transport.serve_http(str(unopenable), settings))
    assert len(made) == 1


def test_token_list_json_escapes_del_c1_and_bidi_as_the_other_json_outputs_do(tmp_path, capsys):
    from server.cli import main
    store = str(tmp_path / "store")
    pattern = "p\x7f\x85\u202e\u2066/*"
    assert main(["--store", store, "token", "add", "agent-a", "--sessions", pattern]) == 0
    capsys.readouterr()
    assert main(["--store", store, "token", "list", "--json"]) == 0
    out = capsys.readouterr().out
    assert "p\\u007f\\u0085\\u202e\\u2066/*" in out
    assert not any(c in out for c in "\x7f\x85\u202e\u2066")
    assert json.loads(out)[0]["sessions"] == [pattern]


def test_a_damaged_file_is_read_once_and_again_when_it_changes(tmp_path, monkeypatch):
    path = str(tmp_path / "s.tokens")
    a = tokens.add(path, "agent-a")
    os.chmod(path, 0o644)
    reads = []
    real = tokens.read
    monkeypatch.setattr(tokens, "read", lambda p: (reads.append(p), real(p))[1])
    file = tokens.TokenFile(path)
    assert [file.principal(a) for _ in range(5)] == [None] * 5 and len(reads) == 1
    os.chmod(path, 0o600)
    assert file.principal(a) is not None and len(reads) == 2
