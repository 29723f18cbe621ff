"""A few end-to-end runs of ``convmem serve`` as a real process over stdio.

Kept few on purpose (each starts a Python process): stdout purity, the exact
bytes of a line, a client that writes a lot before reading, SIGKILL after an
acknowledged write, two processes on one store, and the legacy initialize
handshake.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path

import mcp.types as types
import pytest
from helpers import Mcp, parse

from server.service import MemoryService
from tools import _proc
from tools.mcp_client import connect, serve_command, server_parameters

TIMEOUT = 60


class RawServer:
    """``convmem serve`` driven with hand-written JSON-RPC lines."""

    def __init__(self, store: str, stderr_path: Path, *, reading: bool = True) -> None:
        """``reading=False``: nothing reads the server's stdout until :meth:`start_reading`."""
        self.stderr = open(stderr_path, "wb")
        self.proc = _proc.start(serve_command(store, log_level=None), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=self.stderr)
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.seen: list[bytes] = []
        self.next_id = 0
        self.pump = threading.Thread(target=self._pump, daemon=True)
        if reading:
            self.start_reading()

    def start_reading(self) -> None:
        self.pump.start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, text: str) -> None:
        self.proc.stdin.write(text.encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def notify(self, method: str) -> None:
        self.send_raw(json.dumps({"jsonrpc": "2.0", "method": method}))

    def request(self, method: str, params: dict | None = None, raw_params: str | None = None) -> dict:
        self.next_id += 1
        if raw_params is not None:
            self.send_raw(f'{{"jsonrpc":"2.0","id":{self.next_id},"method":"{method}","params":{raw_params}}}')
        else:
            self.send_raw(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                      "params": params or {}}))
        while True:
            message = self.next_message()
            if message.get("id") == self.next_id:
                return message

    def next_message(self) -> dict:
        line = self.lines.get(timeout=TIMEOUT)
        assert line is not None, "the server closed stdout"
        self.seen.append(line)
        return json.loads(line)

    def initialize(self) -> dict:
        reply = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                            "clientInfo": {"name": "test", "version": "0"}})
        self.notify("notifications/initialized")
        return reply

    def call(self, name: str, arguments: dict) -> tuple[bool, dict]:
        result = self.request("tools/call", {"name": name, "arguments": arguments})["result"]
        return result.get("isError", False), json.loads(result["content"][0]["text"])

    def finish(self) -> list[bytes]:
        """Close stdin, wait for a clean exit, and return every line written to stdout."""
        self.proc.stdin.close()
        try:
            assert self.proc.wait(timeout=TIMEOUT) == 0
            while (line := self.lines.get(timeout=TIMEOUT)) is not None:
                self.seen.append(line)
        finally:
            self._close()
        return self.seen

    def kill(self) -> None:
        _proc.kill(self.proc, timeout=TIMEOUT)
        self._close()

    def _close(self) -> None:
        self.pump.join(timeout=TIMEOUT)
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            stream.close()


def handshake() -> list[dict]:
    """A client's first two lines: ``initialize`` (id 1) and ``notifications/initialized``."""
    return [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"}]


def write_args(content: str, session: str = "s") -> dict:
    return {"session_id": session, "role": "user", "content": content}


def test_stdout_carries_nothing_but_json_rpc(store_path, tmp_path):
    server = RawServer(store_path, tmp_path / "stderr.log")
    try:
        reply = server.initialize()
        assert reply["result"]["serverInfo"]["name"] == "tiny-convmem"
        tools = server.request("tools/list")["result"]["tools"]
        assert len(tools) == 7
        assert server.call("write_message", write_args("kept"))[0] is False
        is_error, body = server.call("write_message", {**write_args("x"), "role": "robot"})
        assert is_error and body["error"]["code"] == "VALIDATION_ERROR"
        surrogate = server.request(
            "tools/call", raw_params='{"name":"write_message","arguments":'
                                     '{"session_id":"s","role":"user","content":"bad \\ud800 text"}}')
        assert surrogate["error"]["code"] == -32600           # answered, with the request's id
        server.send_raw("this line is not JSON")
        assert server.next_message() == {
            "jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: the line is not JSON"}}
        assert "error" in server.request("no/such/method")
        is_error, body = server.call("read_messages", {"session_id": "s"})
        assert [m["content"] for m in body["history"]] == ["kept"]
    finally:
        lines = server.finish()
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert b"store open" in (tmp_path / "stderr.log").read_bytes()


def sdk_line(rid: int, body: dict, is_error: bool) -> bytes:
    """The line the SDK's own stdio transport writes for a tool result (its serialization)."""
    result = {"content": [{"text": json.dumps(body, ensure_ascii=False, separators=(",", ":")), "type": "text"}],
              "isError": is_error}
    return types.JSONRPCResponse(jsonrpc="2.0", id=rid, result=result).model_dump_json(
        by_alias=True, exclude_unset=True).encode("utf-8") + b"\n"


def test_each_answer_is_the_line_the_sdks_transport_writes_byte_for_byte(store_path, tmp_path):
    server = RawServer(store_path, tmp_path / "stderr.log")
    text = 'quote " backslash \\ newline \n tab \t bell \x07 del \x7f é 日本語 😀 \u2028'
    try:
        server.initialize()
        is_error, body = server.call("write_message", write_args(text))
        assert not is_error and body["message"]["content"] == text
        assert server.seen[-1] == sdk_line(server.next_id, body, False)
        is_error, body = server.call("write_message", {**write_args(text), "role": "robot"})
        assert is_error and server.seen[-1] == sdk_line(server.next_id, body, True)
    finally:
        server.finish()


def test_a_client_that_writes_megabytes_before_reading_gets_every_answer_whole(store_path, tmp_path):
    """Nothing reads the answers (~1 MB each) while the client writes its requests:
    the server's stdout fills, and the server must keep reading stdin meanwhile,
    or both sides would wait for each other forever."""
    server = RawServer(store_path, tmp_path / "stderr.log", reading=False)
    big = "é" * 500_000
    lines = handshake()
    lines += [{"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
               "params": {"name": "write_message", "arguments": write_args(f"{i} {big}")}} for i in range(6)]
    try:
        writer = threading.Thread(target=server.send_raw, args=("\n".join(json.dumps(r) for r in lines),),
                                  daemon=True)
        writer.start()
        writer.join(timeout=TIMEOUT)
        assert not writer.is_alive(), "the server stopped reading while its answers waited"
        server.start_reading()
        answers = [server.next_message() for _ in range(7)]
    finally:
        if server.pump.ident is None:
            server.start_reading()
        server.finish()
    assert answers[0]["id"] == 1 and answers[0]["result"]["serverInfo"]["name"] == "tiny-convmem"
    assert sorted(a["id"] for a in answers[1:]) == [100 + i for i in range(6)]
    for a in answers[1:]:
        body = json.loads(a["result"]["content"][0]["text"])
        assert body["message"]["content"] == f"{a['id'] - 100} {big}"


def _wait_until_stored(store_path: str, n: int) -> None:
    """Until session "s" holds ``n`` messages (read beside the serving process)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        service = MemoryService(store_path)
        try:
            if len(service.history("s", 10, None)["history"]) >= n:
                return
        finally:
            service.close()
        time.sleep(0.05)


def test_a_client_that_closed_its_end_of_stdout_leaves_a_server_that_ends_cleanly_with_stdin(store_path, tmp_path):
    """Answers nobody can read are dropped (the writes still commit); the server ends
    at the end of stdin, exit status 0, no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(tmp_path / "stderr.log", "wb") as err:
        proc = _proc.start(serve_command(store_path, log_level=None), stdin=subprocess.PIPE, stdout=write_end,
                           stderr=err)
    os.close(write_end)
    lines = handshake()
    lines += [{"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
               "params": {"name": "write_message", "arguments": write_args(f"unread {i}")}} for i in range(3)]
    try:
        proc.stdin.write(("\n".join(json.dumps(r) for r in lines) + "\nnot json\n").encode())
        proc.stdin.flush()
        _wait_until_stored(store_path, 3)       # stdin ends after the calls, not while they run
        proc.stdin.close()
        assert proc.wait(timeout=TIMEOUT) == 0
    finally:
        _proc.kill(proc, timeout=TIMEOUT)
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()
    service = MemoryService(store_path)
    try:
        stored = sorted(m["content"] for m in service.history("s", 10, None)["history"])   # concurrent calls
        assert stored == [f"unread {i}" for i in range(3)]
    finally:
        service.close()


@pytest.mark.anyio
async def test_an_acknowledged_write_survives_sigkill_and_the_legacy_handshake_reads_it(store_path, tmp_path):
    server = RawServer(store_path, tmp_path / "stderr.log")
    try:
        server.initialize()
        acked = [server.call("write_message", write_args(f"durable {i}"))[1]["message"] for i in range(3)]
        updated = server.call("update_message", {"message_id": acked[0]["message_id"], "content": "changed"})[1]
    finally:
        server.kill()
    async with connect(server_parameters(store_path), mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        m = Mcp(client)
        history = (await m.read(session_id="s"))["history"]
        assert history == [updated["message"], *acked[1:]]
        health = await m.health()
        assert health["active_messages"] == 3 and health["last_sequence"] == 4
        assert health["snapshot_valid"] is True and health["recovered_tail"] is False


@pytest.mark.anyio
async def test_two_processes_share_one_store_and_rebuild_is_busy_while_both_are_attached(store_path):
    params = server_parameters(store_path)
    async with connect(params, mode="auto") as first:
        a = Mcp(first)
        mine = await a.write("written by the first process", session="shared")
        async with connect(params, mode="auto") as second:
            b = Mcp(second)
            assert (await b.read(session_id="shared"))["history"] == [mine]
            theirs = await b.write("written by the second process", session="shared")
            assert theirs["message_id"] > mine["message_id"]
            found = await a.search("second process")
            assert [r["message_id"] for r in found][:1] == [theirs["message_id"]], found
            before = await a.health()
            result = await first.call_tool("rebuild_index", {})
            assert result.is_error and parse(result)["error"]["code"] == "BUSY"
            assert await b.health() == before
        body = await a.ok("rebuild_index")
        assert body["messages_indexed"] == 2
        assert await a.history_ids("shared") == [mine["message_id"], theirs["message_id"]]
