"""``convmem serve --http``: the token, the hostile requests, and large results
through the SDK's default HTTP client, against a real server process on a
loopback port (the contract tests also run over HTTP: test_mcp_tools.py)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat

import httpx2
import pytest

from tools._proc import python, run
from tools.mcp_client import connect_http, http_server, ok

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
WRITE = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "write_message", "arguments": {"session_id": "s", "role": "user", "content": "x"}}}
AUTH_FAILURE = {"error": "invalid_token", "error_description": "Authentication required"}


def post(server, body, *, token: str | None = "", headers: dict | None = None, url: str | None = None,
         content: bytes | None = None) -> httpx2.Response:
    """One raw POST: the server's own token unless ``token`` is given (None: no header)."""
    h = {"Accept": ACCEPT, "Content-Type": "application/json"}
    if token is not None:
        h["Authorization"] = f"Bearer {token or server.token}"
    h.update(headers or {})
    data = content if content is not None else json.dumps(body).encode()
    return httpx2.post(url or server.url, content=data, headers=h, timeout=60)


def last_sequence(server) -> int:
    answer = post(server, {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                           "params": {"name": "get_system_health", "arguments": {}}})
    assert answer.status_code == 200
    return json.loads(answer.json()["result"]["content"][0]["text"])["last_sequence"]


@pytest.fixture
def server(store_path):
    with http_server(store_path) as s:
        yield s
    log = "".join(s.lines)
    assert s.token not in log                 # never logged, whatever happened
    assert "Traceback" not in log


# ------------------------------------------------------------------ the token
@pytest.mark.parametrize("token", [None, "wrong-token-0123456789", "Bearer", ""], ids=["none", "wrong", "word", "own"])
def test_a_request_without_the_right_token_gets_401_and_learns_nothing_else(server, token):
    if token == "":
        assert post(server, LIST).status_code == 200        # the right one, for contrast
        return
    for body in (LIST, WRITE, {"not": "json-rpc"}):
        answer = post(server, body, token=token)
        assert answer.status_code == 401
        assert answer.json() == AUTH_FAILURE
    assert last_sequence(server) == 0


def test_the_token_in_the_query_string_or_another_scheme_is_not_accepted(server):
    for query in ("access_token", "token", "auth"):
        answer = post(server, WRITE, token=None, url=f"{server.url}?{query}={server.token}")
        assert (answer.status_code, answer.json()) == (401, AUTH_FAILURE)
    answer = post(server, WRITE, token=None, headers={"Authorization": f"Basic {server.token}"})
    assert answer.status_code == 401
    assert last_sequence(server) == 0


def test_convmem_token_creates_a_private_token_beside_the_store_once(store_path):
    first = run(python("-m", "server.cli", "token", "--store", store_path))
    second = run(python("-m", "server.cli", "token", "--store", store_path))
    assert first.returncode == 0 and first.stdout == second.stdout
    token = first.stdout.strip()
    assert len(token) >= 32
    path = store_path + ".http-token"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        assert f.read().strip() == token


def test_a_generated_token_never_begins_with_a_dash_and_holds_only_letters_and_digits(tmp_path):
    from server.auth import ensure_token
    tokens = {ensure_token(str(tmp_path / f"token-{i}")) for i in range(500)}
    assert len(tokens) == 500
    for token in tokens:
        assert token.isascii() and token.isalnum() and len(token) >= 32, token


def test_a_token_file_readable_by_others_is_refused(tmp_path, store_path):
    path = tmp_path / "token"
    path.write_text("a-long-enough-token-0123456789\n")
    os.chmod(path, 0o644)
    done = run(python("-m", "server.cli", "token", "--store", store_path, "--token-file", str(path)))
    assert done.returncode == 2
    assert "chmod 600" in done.stderr and "0123456789" not in done.stderr


def test_a_non_loopback_bind_is_refused_without_allow_remote(store_path):
    done = run(python("-m", "server.cli", "serve", "--store", store_path, "--http", "0.0.0.0:0"))
    assert done.returncode == 2
    assert "--allow-remote" in done.stderr


def test_a_remote_bind_without_tls_is_served_with_a_warning(store_path):
    with http_server(store_path, extra=("--http", "0.0.0.0:0", "--allow-remote")) as s:
        assert any("without TLS" in line for line in s.lines)


# ------------------------------------------------------------ hostile requests
def test_a_foreign_origin_is_refused_even_with_the_token(server):
    for origin in ("http://evil.example", "http://localhost.evil.example:80", "null"):
        assert post(server, WRITE, headers={"Origin": origin}).status_code == 403
    assert post(server, LIST, headers={"Origin": "http://localhost:1234"}).status_code == 200
    assert last_sequence(server) == 0


def test_a_foreign_host_header_is_refused(server):
    assert post(server, WRITE, headers={"Host": "evil.example:80"}).status_code == 421
    assert last_sequence(server) == 0


def test_a_body_that_is_not_json_gets_a_json_rpc_error_not_a_traceback(server):
    for raw in (b"{bad", b"", b"\xff\xfe", b"[]", b'{"jsonrpc": "2.0"}', b"1e999999"):
        answer = post(server, None, content=raw)
        assert answer.status_code == 400, raw
        assert answer.json()["error"]["code"] in (-32700, -32600, -32602), raw
    assert last_sequence(server) == 0


def test_a_body_that_is_json_but_not_a_message_gets_32600_and_a_message_that_repeats_nothing(server):
    for raw in (b"[]", b'["secret-marker"]', b"1", b'"secret-marker"', b'{"jsonrpc": "2.0", "x": "secret-marker"}',
                b'[{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"secret-marker":1}}]'):
        answer = post(server, None, content=raw)
        assert answer.status_code == 400, raw
        body = answer.json()
        assert body["id"] is None and body["error"]["code"] == -32600, raw
        assert "secret-marker" not in answer.text and "pydantic" not in answer.text and "http" not in answer.text
        assert len(body["error"]["message"]) < 120
    assert last_sequence(server) == 0


def test_a_wrong_content_type_or_accept_header_is_refused(server):
    assert post(server, WRITE, headers={"Content-Type": "text/plain"}).status_code in (400, 415)
    assert post(server, WRITE, headers={"Accept": "text/html"}).status_code == 406
    assert last_sequence(server) == 0


def test_an_oversized_body_is_refused_by_its_length_before_it_is_sent(server):
    host, port = server.url.split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall((f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {server.token}\r\n"
                      f"Content-Type: application/json\r\nAccept: {ACCEPT}\r\n"
                      f"Content-Length: {1 << 30}\r\n\r\n").encode() + b"{")
        head = sock.recv(4096)                 # answered although 1 GiB never comes
    assert head.startswith(b"HTTP/1.1 413")


def test_an_oversized_chunked_body_is_refused(server):
    def chunks():
        for _ in range(20):
            yield b" " * (1 << 20)
    answer = httpx2.post(server.url, content=chunks(), timeout=60,
                         headers={"Accept": ACCEPT, "Content-Type": "application/json",
                                  "Authorization": f"Bearer {server.token}"})
    assert answer.status_code == 413
    assert last_sequence(server) == 0


def test_a_stalled_client_is_disconnected_and_the_server_stays_healthy(store_path):
    with http_server(store_path, extra=("--read-timeout", "0.5")) as s:
        host, port = s.url.split("//")[1].split("/")[0].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=60) as idle, \
                socket.create_connection((host, int(port)), timeout=60) as half, \
                socket.create_connection((host, int(port)), timeout=60) as body:
            half.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
            body.sendall((f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {s.token}\r\n"
                          f"Content-Type: application/json\r\nAccept: {ACCEPT}\r\nContent-Length: 100\r\n\r\n"
                          '{"jsonrpc":').encode())
            for sock in (idle, half, body):
                assert sock.recv(1) == b""      # closed by the server, not by our timeout
        assert post(s, LIST).status_code == 200
        assert last_sequence(s) == 0
    assert "Traceback" not in "".join(s.lines)


def test_past_128_connections_without_the_token_the_oldest_is_closed_and_those_with_it_stay(store_path):
    with http_server(store_path, extra=("--read-timeout", "600")) as s:
        host, port = s.url.split("//")[1].split("/")[0].rsplit(":", 1)
        with httpx2.Client(timeout=60) as kept:
            headers = {"Accept": ACCEPT, "Authorization": f"Bearer {s.token}"}
            assert kept.post(s.url, json=LIST, headers=headers).status_code == 200      # proven
            wrong = socket.create_connection((host, int(port)), timeout=60)
            wrong.sendall((f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer wrong-token-123456"
                           f"\r\nAccept: {ACCEPT}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
                           ).encode())
            assert wrong.recv(12) == b"HTTP/1.1 401"                   # answered, still not proven
            idle = [socket.create_connection((host, int(port)), timeout=60) for _ in range(127)]
            try:
                newest = socket.create_connection((host, int(port)), timeout=60)   # the 129th without the token
                idle.append(newest)
                with contextlib.suppress(ConnectionResetError):
                    while wrong.recv(1 << 16):      # the rest of the 401, then the end: closed by the server
                        pass
                assert kept.post(s.url, json=LIST, headers=headers).status_code == 200
                newest.sendall(f"GET /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
                assert newest.recv(12).startswith(b"HTTP/1.1 ")         # the newest ones are kept
            finally:
                for sock in idle:
                    sock.close()
                wrong.close()
    assert "Traceback" not in "".join(s.lines)


def test_requests_with_made_up_session_ids_are_answered_and_change_nothing(server):
    with httpx2.Client(timeout=60) as client:
        for i in range(1000):
            answer = client.post(server.url, content=json.dumps(LIST).encode(),
                                 headers={"Accept": ACCEPT, "Content-Type": "application/json",
                                          "Authorization": f"Bearer {server.token}",
                                          "Mcp-Session-Id": f"made-up-{i}"})
            assert answer.status_code in (200, 400, 404)
    assert last_sequence(server) == 0
    assert post(server, LIST).status_code == 200


# --------------------------------------------------------------- big results
async def test_a_1_mib_message_and_an_8_mib_page_reach_the_default_client(server):
    async with connect_http(server.url, server.token) as client:
        escaped = "\x01" * (1 << 20)            # 6 MiB on the wire as \u0001 escapes
        written = (await ok(client, "write_message", {"session_id": "esc", "role": "user", "content": escaped}))
        assert written["message"]["content"] == escaped
        page = (await ok(client, "read_messages", {"session_id": "esc"}))["history"]
        assert [m["content"] for m in page] == [escaped]
        for i in range(8):
            await ok(client, "write_message", {"session_id": "big", "role": "user", "content": str(i) * (1 << 20)})
        page = (await ok(client, "read_messages", {"session_id": "big", "limit": 8}))["history"]
        assert [len(m["content"]) for m in page] == [1 << 20] * len(page)
        assert len(page) >= 7                   # the response budget (~8 MiB) may cut the last one


def test_every_option_of_convmem_serve_and_the_token_command_is_in_the_http_doc():
    import argparse

    from server.cli import parser
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "http.md")) as f:
        doc = f.read()
    options = {o for a in sub.choices["serve"]._actions for o in a.option_strings if o.startswith("--")} - {
        "--help", "--store", "--log-level"}                   # the global options: docs/cli.md
    assert {o for o in options if f"`{o}" not in doc} == set()
    assert "convmem token" in doc and "CONVMEM_TOKEN" in doc
