"""Replication under failure: what we claim to survive, done for real.

* ``kill -9`` of the stream's leader during a write load on two nodes;
* ``kill -9`` of a ``convmem serve --replicate`` process mid-write and
  mid-catch-up, then a restart whose read models must equal, byte for byte,
  those of a node that never failed (and its own replay);
* every NATS server down: writes refused with ``IO_ERROR``, reads still
  served, and writes working again once the servers are back.

Each test has a cluster of its own (it kills servers).  Nothing here measures
time: waits are bounded only so that a hang fails instead of blocking CI.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from eventstore.errors import StoreIOError
from eventstore.events import Message, Metadata
from eventstore.store import EventStore
from projections.registry import Projector
from server.maintenance import differences, dump_projections
from server.replication import Settings, committer_factory
from server.service import MemoryService
from tools import _proc
from tools._nats import Cluster, files_holding, served_replicated
from tools.mcp_client import call, ok

pytestmark = pytest.mark.replication
STREAM = "F"
BOUND = 120          # seconds a wait may take before the test fails instead of hanging (not a measurement)


@pytest.fixture
def cluster(tmp_path):
    with Cluster(str(tmp_path / "nats"), size=3) as c:
        yield c


def node(cluster: Cluster, path: str, **settings) -> MemoryService:
    config = Settings(tuple(cluster.urls.split(",")), STREAM, 3, **settings)
    return MemoryService(path, committer=committer_factory(config))


def session_ids(svc: MemoryService, session: str) -> list[str]:
    return [m["message_id"] for m in svc.history(session, 10**5, None)["history"]]


def is_subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(x in it for x in short)


# ------------------------------------------------------------ the stream's leader
def test_killing_the_stream_leader_during_writes_loses_and_duplicates_nothing(cluster, tmp_path):
    a, b = node(cluster, str(tmp_path / "a")), node(cluster, str(tmp_path / "b"))
    try:
        a.write_message("warmup", "user", "first", Metadata())
        leader = cluster.stream_leader(f"{STREAM}-g1")
        assert leader is not None
        acked: dict[str, list[str]] = {"a": [], "b": []}
        failed: dict[str, list[str]] = {"a": [], "b": []}
        killed = threading.Event()

        def writer(svc: MemoryService, name: str) -> None:
            for i in range(120):
                content = f"{name} {i}"
                try:
                    acked[name].append(svc.write_message(name, "user", content, Metadata())["message"]["message_id"])
                except StoreIOError:
                    failed[name].append(content)
                if name == "a" and i == 30:
                    cluster.kill(leader)            # mid-load: b is writing too
                    killed.set()
        threads = [threading.Thread(target=writer, args=(svc, name)) for svc, name in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert killed.is_set()
        cluster.start(leader)
        cluster.wait_ready()
        for svc in (a, b):
            assert svc.replicated is not None
            svc.replicated.sync(timeout=60)
        for name in ("a", "b"):
            for svc in (a, b):
                found = session_ids(svc, name)
                assert len(found) == len(set(found))                       # nothing twice
                assert is_subsequence(acked[name], found)                  # every ack, in the writer's order
                assert len(found) <= len(acked[name]) + len(failed[name])  # nothing from nowhere
        assert dump_projections(a.store) == dump_projections(b.store)
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------ a node's process
@pytest.mark.anyio
async def test_a_node_killed_mid_write_and_mid_catch_up_restarts_with_identical_read_models(cluster, tmp_path):
    work = str(tmp_path)
    reference = node(cluster, str(tmp_path / "reference"))
    victim = str(tmp_path / "victim")
    try:
        acked: list[str] = []
        async with served_replicated(victim, work, cluster.urls, STREAM) as (client, pid):
            async def load() -> None:
                for i in range(10_000):
                    try:
                        out = await ok(client, "write_message", {"session_id": "v", "role": "user",
                                                                 "content": f"victim {i}"})
                    except Exception:        # the process died under the call
                        return
                    acked.append(out["message"]["message_id"])

            async with anyio.create_task_group() as tg:
                tg.start_soon(load)
                with anyio.fail_after(BOUND):
                    while len(acked) < 25:
                        await anyio.sleep(0.01)
                _proc.kill_pid(pid)                       # a write is in flight
        assert len(acked) >= 25

        # the reference writes a bulk of events the victim must catch up on, then a few more
        batch = [Message(f"01J{i:023d}", "bulk", "user", f"bulk message {i} " + "text " * 20, 1_720_000_000_000 + i,
                         1_720_000_000_000 + i) for i in range(6000)]
        assert reference.restore_messages(batch) == 6000
        async with served_replicated(victim, work, cluster.urls, STREAM) as (client, pid):
            with anyio.fail_after(BOUND):                 # kill it once it is catching up
                while (await ok(client, "get_system_health"))["replication"]["applied_sequence"] <= len(acked):
                    pass
            _proc.kill_pid(pid)
        reference.write_message("v", "assistant", "after the kills", Metadata())
        async with served_replicated(victim, work, cluster.urls, STREAM, extra=("--sync-reads",)) as (client, _):
            history = await ok(client, "read_messages", {"session_id": "v", "limit": 1000})
            is_error, _out = await call(client, "get_system_health")
            assert not is_error
        assert reference.replicated is not None
        reference.replicated.sync(timeout=60)
        ids = [m["message_id"] for m in history["history"]]
        assert ids[:len(acked)] == acked and ids[-1] == session_ids(reference, "v")[-1]
        assert ids == session_ids(reference, "v")
        expected = dump_projections(reference.store)
    finally:
        reference.close()
    with EventStore(victim, Projector()) as store:
        assert dump_projections(store) == expected
    assert differences(victim) == []


# ------------------------------------------------------------ the whole stream
def test_with_every_server_down_writes_fail_with_io_error_reads_go_on_and_writes_come_back(cluster, tmp_path):
    svc = node(cluster, str(tmp_path / "a"), write_timeout=2.0)
    try:
        before = svc.write_message("s", "user", "before the outage", Metadata())["message"]["message_id"]
        cluster.stop_all()
        with pytest.raises(StoreIOError, match="nothing was written|unreachable"):
            svc.write_message("s", "user", "during the outage", Metadata())
        assert session_ids(svc, "s") == [before]                       # the local view still serves
        health = svc.health()
        assert health["status"] == "DEGRADED" and health["last_error"]
        assert health["replication"]["connected"] is False
        svc.close()                                                   # a node starts without the stream too
        svc = node(cluster, str(tmp_path / "a"), write_timeout=2.0)
        assert session_ids(svc, "s") == [before]
        assert svc.health()["replication"]["connected"] is False
        cluster.start_all()
        after = None
        for _ in range(60):                                           # bounded: reconnects by itself
            try:
                after = svc.write_message("s", "user", "after the outage", Metadata())["message"]["message_id"]
                break
            except StoreIOError:
                continue
        assert after is not None
        found = session_ids(svc, "s")
        assert found[0] == before and found[-1] == after
        assert "during the outage" not in [m["content"] for m in svc.history("s", 100, None)["history"]]
        assert svc.health()["status"] == "OK"
    finally:
        svc.close()


# ------------------------------------------------------------ a switch cut short
@pytest.mark.anyio
async def test_a_node_killed_during_rebuild_index_leaves_a_switch_any_node_finishes(cluster, tmp_path):
    work, victim = str(tmp_path), str(tmp_path / "victim")
    other = node(cluster, str(tmp_path / "other"), write_timeout=3.0)
    try:
        keep = other.write_message("s", "user", "kept", Metadata())["message"]["message_id"]
        gone = other.write_message("s", "user", "the OrangeWalrus code", Metadata())["message"]["message_id"]
        assert other.delete_message(gone, None) == {"status": "OK"}
        async with served_replicated(victim, work, cluster.urls, STREAM) as (client, pid):
            assert (await ok(client, "get_system_health"))["replication"]["applied_sequence"] >= 0
            with anyio.fail_after(BOUND):
                while (await ok(client, "get_system_health"))["active_messages"] < 1:
                    await anyio.sleep(0.01)                 # it has caught up
            async with anyio.create_task_group() as tg:
                async def rebuild() -> None:
                    try:
                        await call(client, "rebuild_index")
                    except Exception:                       # the connection died with the process
                        pass
                tg.start_soon(rebuild)
                await anyio.sleep(0)                        # the request is on its way
                _proc.kill_pid(pid)
        result = other.rebuild()                            # finishes or redoes the switch, whatever was done
        assert result["status"] == "OK" and result["messages_indexed"] == 1
        after = other.write_message("s", "user", "after", Metadata())["message"]["message_id"]
        async with served_replicated(victim, work, cluster.urls, STREAM, extra=("--sync-reads",)) as (client, _):
            history = await ok(client, "read_messages", {"session_id": "s", "limit": 10})
        assert [m["message_id"] for m in history["history"]] == [keep, after] == session_ids(other, "s")
    finally:
        other.close()
    assert differences(victim) == []
    assert files_holding([cluster.workdir, work], b"orangewalrus") == []
