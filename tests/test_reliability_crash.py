"""SIGKILL a real ``convmem serve`` process and check that nothing acknowledged is lost.

The short version of ``python -m tools.crashloop`` (see docs/reliability.md for
the long run): a handful of kills at random moments — mid-operation, right
after ``rebuild_index`` was sent, inside a running compaction, while idle —
each followed by a restart that reads the whole store back and checks it
against a model of the acknowledged operations, counters included.
"""

from __future__ import annotations

import os

import anyio
import pytest

from eventstore.events import Metadata
from server.service import MemoryService
from tools import _proc, crashloop
from tools.mcp_client import call, ok, read_everything, served


def test_killed_servers_lose_no_acknowledged_operation_and_keep_a_verifiable_store():
    report = crashloop.run(kills=3, seed=20240611, seed_messages=60, verify_every=2,
                           modes=("op", "rebuild", "idle"), until_compaction_kill=6)
    assert report.losses == []
    assert report.torn == []
    assert report.phantoms == []
    assert report.failures == []
    assert report.replay_verify_failures == []
    assert report.kills >= 3
    assert report.kills_in_compaction >= 1
    assert report.replay_verifies >= 2


@pytest.mark.anyio
async def test_a_kill_right_after_rebuild_index_was_sent_leaves_the_old_or_the_new_store_whole(tmp_path):
    store, work = str(tmp_path / "store"), str(tmp_path)
    written = {}
    service = MemoryService(store)
    try:
        for i in range(60):
            out = service.write_message(f"s{i % 3}", "user", f"message {i} " + "word " * (i * 20), Metadata())
            written[out["message"]["message_id"]] = out["message"]["content"]
        for mid in list(written)[::4]:
            assert service.delete_message(mid, None) == {"status": "OK"}
            del written[mid]
    finally:
        service.close()
    async with served(store, work) as (client, pid):
        async with anyio.create_task_group() as tg:
            async def rebuild() -> None:
                try:
                    await call(client, "rebuild_index")
                except Exception:   # the connection died with the process
                    pass
            tg.start_soon(rebuild)
            await anyio.sleep(0)          # the request is on its way
            _proc.kill_pid(pid)
    async with served(store, work) as (client, _pid):
        found = await read_everything(client)
        health = await ok(client, "get_system_health")
    assert {mid: m["content"] for mid, m in found.items()} == written
    assert health["active_messages"] == len(written)
    assert health["snapshot_valid"] is True
    assert not os.path.exists(os.path.join(store, crashloop.COMPACT_DIR))
    verify = _proc.run(_proc.python("-m", "tools.replay", store, "--verify"), timeout=120)
    assert verify.returncode == 0, verify.stderr
