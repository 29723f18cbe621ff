"""SIGKILL of ``convmem serve --http`` under 16 concurrent clients: after a
restart every acknowledged write is there, once, with its content, and each
client's writes are in the order it made them (group commit answers a write
only once the commit holding it is durable)."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from tools._proc import kill_pid
from tools.mcp_client import connect_http, http_server, ok, read_everything

pytestmark = pytest.mark.anyio

CLIENTS = 16
KILL_AFTER = 400             # acknowledged writes in all


async def test_sigkill_under_16_http_clients_loses_no_acknowledged_write_and_repeats_none(store_path):
    acked: dict[int, list[tuple[str, str]]] = {i: [] for i in range(CLIENTS)}
    with http_server(store_path, log_level="WARNING") as server:
        killed = anyio.Event()

        async def client(i: int) -> None:
            try:
                async with connect_http(server.url, server.token) as c:
                    for n in range(100_000):
                        content = f"client {i} write {n}"
                        out = await ok(c, "write_message", {"session_id": f"c{i % 4}", "role": "user",
                                                            "content": content})
                        acked[i].append((out["message"]["message_id"], content))
                        if sum(map(len, acked.values())) >= KILL_AFTER and not killed.is_set():
                            kill_pid(server.pid)
                            killed.set()
            except Exception:                # the server died under this client: expected
                return
        async with anyio.create_task_group() as tg:
            for i in range(CLIENTS):
                tg.start_soon(client, i)
        assert killed.is_set()
    with http_server(store_path, log_level="WARNING") as server:
        async with connect_http(server.url, server.token) as c:
            stored = await read_everything(c)          # also checks: no id listed twice
    contents = Counter(m["content"] for m in stored.values())
    assert max(contents.values()) == 1
    for i, writes in acked.items():
        ids = [mid for mid, _ in writes]
        assert ids == sorted(ids), f"client {i}: acknowledged writes out of order"
        for mid, content in writes:
            assert stored[mid]["content"] == content
    assert sum(map(len, acked.values())) >= KILL_AFTER
