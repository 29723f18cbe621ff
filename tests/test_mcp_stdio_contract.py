"""The stdio contract: one abstract case (:class:`StdioContract`) run against each
way ``convmem serve`` answers over stdio — the fast path for ``tools/call``
(server.app.FastCalls) and every call through the SDK's dispatch
(``CONVMEM_STDIO_FASTCALL=0``).

Every answer is the SDK's own stdio server's, byte for byte: one battery of
requests — results, error results, JSON-RPC errors, odd params, ids of both
kinds, ``_meta``, pings, notifications, a second ``initialize`` — runs through
the same server over the SDK's ``stdio_server`` (:mod:`tools.sdk_stdio`, the
reference) and through each path, and the raw lines must be equal, server-made
ids and clock readings masked.  The lines the SDK leaves unanswered (a lone
surrogate, params that are not an object, a line not JSON, a batch: lines its
parser refuses) each path answers with a JSON-RPC error.  And what
the server read before stdin ended is answered and stored; a stop by signal
answers nothing twice and loses no acknowledged write.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest

from server.app import _plain_call, answer_line, template_holds
from server.commands.serve import FASTCALL_ENV
from server.service import MemoryService
from tools import _proc
from tools.mcp_client import serve_command

TIMEOUT = 60
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
TEXT = 'quote " backslash \\ newline \n tab \t bell \x07 del \x7f é 日本語 😀 \u2028'


class Raw:
    """A stdio server (``command``, with ``env`` added) driven line by line."""

    def __init__(self, command: list[str], stderr: Path, *, env: dict[str, str], stdout: int = subprocess.PIPE) -> None:
        self.err = open(stderr, "wb")
        self.proc = _proc.start(command, stdin=subprocess.PIPE, stdout=stdout, stderr=self.err, env=env)

    def send(self, *lines: str) -> None:
        self.proc.stdin.write("".join(line + "\n" for line in lines).encode("utf-8"))
        self.proc.stdin.flush()

    def line(self) -> bytes:
        line = self.proc.stdout.readline()
        assert line, "the server closed stdout"
        return line

    def finish(self) -> bytes:
        """Close stdin; everything else the server wrote, once it exited with status 0."""
        self.proc.stdin.close()
        try:
            rest = self.proc.stdout.read() if self.proc.stdout else b""
            assert self.proc.wait(timeout=TIMEOUT) == 0
        finally:
            self.close()
        return rest

    def close(self) -> None:
        _proc.kill(self.proc, timeout=TIMEOUT)
        for stream in (self.proc.stdin, self.proc.stdout, self.err):
            if stream is not None:
                stream.close()


def request(rid, method: str, params=None, **more) -> str:
    message = {"jsonrpc": "2.0", "id": rid, "method": method, **more}
    if params is not None:
        message["params"] = params
    return json.dumps(message, ensure_ascii=False)


def call(rid, name, arguments=None, **params) -> str:
    body = {"name": name, **params}
    if arguments is not None:
        body["arguments"] = arguments
    return request(rid, "tools/call", body)


def body_of(line: bytes) -> dict:
    return json.loads(json.loads(line)["result"]["content"][0]["text"])


NOT_JSON_RPC = "Invalid request: not valid JSON-RPC, or a string holds a lone surrogate"
UNREADABLE = [                  # how each path answers the battery's lines the SDK's stdio server leaves unanswered
    (213, -32600, NOT_JSON_RPC),
    (None, -32700, "Parse error: the line is not JSON"),
    (None, -32600, "Invalid request: not a JSON-RPC object"),
    (312, -32600, NOT_JSON_RPC),
]


def battery(server: Raw, *, answers_unreadable: bool = True) -> list[bytes | None]:
    """Every answer to a fixed sequence of requests, in order (one request at a time);
    without ``answers_unreadable`` the lines the SDK cannot parse are not sent (None in their place)."""
    out: list[bytes | None] = []

    def ask(line: str) -> bytes:
        server.send(line)
        out.append(server.line())
        return out[-1]

    def ask_unreadable(line: str) -> None:
        if answers_unreadable:
            ask(line)
        else:
            out.append(None)

    write = {"session_id": "s", "role": "user", "content": TEXT}
    ask(call(1, "write_message", write))                                   # before initialize: the SDK's error
    ask(request(2, "initialize", INITIALIZE))
    server.send(INITIALIZED)
    ask(request(3, "tools/list"))
    first = body_of(ask(call(4, "write_message", write)))["message"]
    ask(call("id-5", "write_message", {**write, "content": "second"}))
    ask(call("6", "write_message", {**write, "content": "string id of digits"}))
    ask(call(0, "write_message", {**write, "content": "id zero"}))
    ask(call(-7, "write_message", {**write, "content": "negative id"}))
    ask(call(2**53 + 1, "write_message", {**write, "content": "large id"}))
    ask(call('quote " id', "write_message", {**write, "content": "quoted id"}))
    for n, meta in enumerate(({"progressToken": "p"}, {"progressToken": 9}, {}, {"progressToken": 1.5},
                              {"progressToken": True}, {"progressToken": "p", "other": 1}, {"other": 1}, None)):
        ask(call(100 + n, "write_message", {**write, "content": f"meta {n}"}, _meta=meta))
    ask(call(200, "write_message", {**write, "role": "robot"}))           # VALIDATION_ERROR results
    ask(call(201, "write_message", {"session_id": "s", "role": "user"}))
    ask(call(202, "write_message", {**write, "content": 5}))
    ask(call(203, "write_message", {**write, "extra": True}))
    ask(call(204, "write_message"))                                        # no arguments
    for n, arguments in enumerate((None, [1, 2], "text", 7)):            # arguments of another JSON type
        ask(request(f"205-{n}", "tools/call", {"name": "write_message", "arguments": arguments}))
    ask(call(208, "no_such_tool", {}))
    ask(call(209, 5, {}))
    ask(call(210, "", {}))
    ask(request(211, "tools/call", {"arguments": write}))
    ask(request(212, "tools/call"))
    ask_unreadable(request(213, "tools/call", [1]))
    ask(call(214, "write_message", write, extra_param=1))
    modern = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}     # the 2026 envelope: refused on this era
    ask(call(215, "read_messages", {"view": "sessions"}, _meta=modern))
    mid = first["message_id"]
    ask(call(300, "update_message", {"message_id": mid, "content": "changed", "expected_revision": 9}))   # CONFLICT
    ask(call(301, "update_message", {"message_id": mid, "content": "changed", "expected_revision": 1}))
    ask(call(302, "update_message", {"message_id": mid, "content": "changed"}))                            # no change
    ask(call(303, "delete_message", {"message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}))                       # NOT_FOUND
    ask(call(304, "read_messages", {"view": "content", "message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}))
    ask(call(305, "read_messages", {"session_id": "s", "limit": 3}))
    ask(call(306, "read_messages", {"view": "context", "message_id": mid}))
    ask(call(307, "search_messages", {"query": "second", "limit": 5}))
    ask(call(308, "delete_message", {"message_id": mid, "session_id": "s"}))
    ask(call(309, "read_messages", {"view": "sessions"}))
    ask(request(310, "ping"))
    ask(request(311, "no/such/method", {}))
    server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/no_such_thing"}),    # answered by nobody
                json.dumps({"jsonrpc": "2.0", "method": 5}))
    ask_unreadable("not json")
    ask_unreadable(json.dumps([json.loads(request(320, "ping")), json.loads(request(321, "ping"))]))  # a batch
    lone = call(312, "write_message", {**write, "content": "bad \ud800 surrogate"})
    ask_unreadable(lone.replace("\ud800", "\\ud800"))
    ask(request(313, "initialize", INITIALIZE))                            # again: the SDK answers it
    ask(call(314, "write_message", {**write, "content": "after a second initialize"}))
    server.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 314}}))
    ask(call(315, "write_message", {**write, "content": "after a late cancel"}))
    out.append(server.finish())
    return out


_MASKS = [(re.compile(rb"[0-7][0-9A-HJKMNP-TV-Z]{25}"), b"<ULID>"),
          (re.compile(rb'(\\"(?:timestamp|[a-z_]+_at)\\":)-?\d+'), rb"\1<ms>"),
          (re.compile(rb'(\\"nextCursor\\":\\")[^\\]+'), rb"\1<cursor>")]


def masked(line: bytes) -> bytes:
    for pattern, replacement in _MASKS:
        line = pattern.sub(replacement, line)
    return line


def test_the_fast_path_takes_only_plain_calls():
    assert _plain_call({"name": "x"}) == ("x", None)
    assert _plain_call({"name": "x", "arguments": {"a": 1}, "_meta": {"progressToken": 3}}) == ("x", {"a": 1})
    assert _plain_call({"name": "x", "_meta": {}}) == ("x", None)
    for params in (None, {}, {"name": 5}, {"name": "x", "arguments": None}, {"name": "x", "arguments": []},
                   {"name": "x", "_meta": None}, {"name": "x", "_meta": {"progressToken": True}},
                   {"name": "x", "_meta": {"progressToken": 1.0}}, {"name": "x", "_meta": {"a": 1}},
                   {"name": "x", "task": {}}):
        assert _plain_call(params) is None, params


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_the_answer_template_is_the_sdks_line_at_every_handshake_version(version):
    assert template_holds(version)
    assert answer_line(3, "x", False) == b'{"jsonrpc":"2.0","id":3,"result":{"content":[{"text":"x","type":"text"}],' \
                                          b'"isError":false}}\n'


def test_an_unknown_protocol_version_takes_the_sdks_way():
    assert not template_holds("1999-01-01")


def _writes(n: int, first_id: int = 10) -> list[str]:
    return [call(first_id + i, "write_message", {"session_id": "s", "role": "user", "content": f"w{i}"})
            for i in range(n)]


def _stored(store_path: str) -> list[str]:
    service = MemoryService(store_path)
    try:
        return sorted(m["content"] for m in service.history("s", 1000, None)["history"])
    finally:
        service.close()


def test_a_call_cancelled_while_in_flight_is_stored_and_never_answered(store_path, tmp_path):
    """As the SDK does: the write is not torn (it runs to its end), the client that gave
    up on it gets no answer; the cancellation matches "10" to 10 as the SDK does."""
    server = Raw(serve_command(store_path, log_level=None), tmp_path / "stderr.log", env={FASTCALL_ENV: "1"})
    server.send(request(1, "initialize", INITIALIZE), INITIALIZED)
    assert json.loads(server.line())["id"] == 1
    cancel = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": "10", "reason": "gave up"}})
    server.send(*_writes(1), cancel, *_writes(1, first_id=11))
    answer = json.loads(server.line())
    assert answer["id"] == 11
    rest = server.finish()
    assert rest == b""
    assert _stored(store_path) == ["w0", "w0"]


def test_a_client_that_pipelines_initialize_and_calls_gets_every_answer(store_path, tmp_path):
    """Calls sent before the initialize answer go the SDK's way (the SDK answers
    initialize first); later ones may take the fast path: all are answered."""
    server = Raw(serve_command(store_path, log_level=None), tmp_path / "stderr.log", env={FASTCALL_ENV: "1"})
    reader_lines: list[bytes] = []
    pump = threading.Thread(target=lambda: reader_lines.extend(server.proc.stdout), daemon=True)
    pump.start()
    server.send(request(1, "initialize", INITIALIZE), INITIALIZED,
                *_writes(20))
    server.proc.stdin.close()
    try:
        assert server.proc.wait(timeout=TIMEOUT) == 0
        pump.join(timeout=TIMEOUT)
    finally:
        server.close()
    answers = [json.loads(line) for line in reader_lines]
    assert answers[0]["id"] == 1
    assert sorted(a["id"] for a in answers[1:]) == list(range(10, 30))
    assert all("result" in a and not a["result"]["isError"] for a in answers[1:])


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[bytes | None]:
    """The battery's answers from the SDK's own stdio server (:mod:`tools.sdk_stdio`)."""
    where = tmp_path_factory.mktemp("sdk-stdio")
    server = Raw([sys.executable, "-m", "tools.sdk_stdio", "--store", str(where / "store")], where / "stderr.log",
                 env={})
    try:
        return battery(server, answers_unreadable=False)
    finally:
        _proc.kill(server.proc, timeout=TIMEOUT)


class StdioContract:
    """What each stdio path of ``convmem serve`` does; a subclass names the path (``env``)."""

    env: ClassVar[dict[str, str]]
    answers_calls_that_committed_at_a_stop: ClassVar[bool]

    def serve(self, store: str, stderr: Path, *, stdout: int = subprocess.PIPE) -> Raw:
        return Raw(serve_command(store, log_level=None), stderr, env=self.env, stdout=stdout)

    def test_every_answer_of_the_battery_is_the_sdk_stdio_servers_line(self, tmp_path, reference):
        server = self.serve(str(tmp_path / "store"), tmp_path / "stderr.log")
        try:
            answers = battery(server)
        finally:
            _proc.kill(server.proc, timeout=TIMEOUT)
        assert len(answers) == len(reference) > 50
        unreadable = iter(UNREADABLE)
        for mine, theirs in zip(answers, reference, strict=True):
            assert mine is not None
            if theirs is None:                                  # the SDK's transport never answers it
                rid, code, message = next(unreadable)
                assert json.loads(mine) == {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
            else:
                assert masked(mine) == masked(theirs)
        assert answers[-1] == b""                                     # nothing after the last answer
        ids = [json.loads(line).get("id") for line in answers[:-1] if line]
        assert 4 in ids and "id-5" in ids and 2**53 + 1 in ids and 'quote " id' in ids
        assert "Traceback" not in (tmp_path / "stderr.log").read_text()

    def test_calls_read_before_stdin_ends_are_all_answered_and_stored(self, store_path, tmp_path):
        """Sixty writes and stdin's end in one go: each is answered with its result, none is
        dropped or answered "Connection closed" (the SDK cancels what is in flight at its
        input's end)."""
        server = self.serve(store_path, tmp_path / "stderr.log")
        init = request(1, "initialize", INITIALIZE)
        server.send(init)
        assert json.loads(server.line())["id"] == 1
        server.send(INITIALIZED, *_writes(60),
                    request(99, "tools/list"))
        rest = server.finish()
        answers = {json.loads(line)["id"]: json.loads(line) for line in rest.splitlines()}
        assert sorted(answers) == [*range(10, 70), 99]
        for rid in range(10, 70):
            assert "result" in answers[rid], answers[rid]
            assert body_of(json.dumps(answers[rid]).encode())["message"]["content"] == f"w{rid - 10}"
        assert _stored(store_path) == sorted(f"w{i}" for i in range(60))

    def test_with_stdout_closed_every_call_read_before_stdin_ends_is_still_stored(self, store_path, tmp_path):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            server = self.serve(store_path, tmp_path / "stderr.log", stdout=write_end)
        finally:
            os.close(write_end)
        server.send(request(1, "initialize", INITIALIZE), INITIALIZED,
                    *_writes(30), "not json")
        assert server.finish() == b""
        assert "Traceback" not in (tmp_path / "stderr.log").read_text()
        assert _stored(store_path) == sorted(f"w{i}" for i in range(30))

    def test_sigterm_amid_calls_keeps_every_acknowledged_write_and_answers_nothing_twice(self, store_path, tmp_path):
        """A stop by signal while calls run: each call's answer is its result or the SDK's
        "Connection closed" error, at most once; every acknowledged write is stored.  On the
        fast path a write that committed is answered with its result (the SDK may answer
        it "Connection closed")."""
        server = self.serve(store_path, tmp_path / "stderr.log")
        server.send(request(1, "initialize", INITIALIZE), INITIALIZED)
        assert json.loads(server.line())["id"] == 1
        server.send(*_writes(40))
        server.proc.send_signal(signal.SIGTERM)
        try:
            assert server.proc.wait(timeout=TIMEOUT) == 0        # a bound against hanging, not a timing assertion
            answers = [json.loads(line) for line in server.proc.stdout.read().splitlines()]
        finally:
            server.close()
        ids = [a["id"] for a in answers]
        assert len(ids) == len(set(ids)) and set(ids) <= set(range(10, 50))
        acknowledged = sorted(body_of(json.dumps(a).encode())["message"]["content"] for a in answers if "result" in a)
        assert all(a["error"]["message"] == "Connection closed" for a in answers if "error" in a)
        assert set(acknowledged) <= set(_stored(store_path))
        if self.answers_calls_that_committed_at_a_stop:
            assert acknowledged == _stored(store_path)
        log = (tmp_path / "stderr.log").read_text()
        assert "SIGTERM received: stopping" in log and "Traceback" not in log


class TestFastPath(StdioContract):
    env = {FASTCALL_ENV: "1"}
    answers_calls_that_committed_at_a_stop = True


class TestSdkDispatch(StdioContract):
    env = {FASTCALL_ENV: "0"}
    answers_calls_that_committed_at_a_stop = False
