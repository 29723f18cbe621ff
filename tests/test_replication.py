"""Replication on NATS JetStream: nodes on one stream behave like one store.

A 3-server JetStream cluster on loopback (``sync_interval: always``) is shared
by the module; each test uses a stream name of its own.  Nodes are
:class:`MemoryService` objects in this process, except where principals come
from named tokens over HTTP: there they are ``convmem serve --http --replicate``
processes (the failure tests in ``test_replication_failures.py`` run real
``convmem serve`` processes too).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading

import import_samples as samples
import pytest

from eventstore.errors import ConflictError, NotFoundError, StoreIOError, ValidationError
from eventstore.events import Metadata
from projections.search import Filters
from server.cli import main
from server.importers import Options, run_import
from server.maintenance import differences, dump_projections
from server.principals import Principal
from server.replication import Settings, committer_factory, import_settings, parse_settings
from server.service import MemoryService
from tools._nats import Cluster, files_holding
from tools.mcp_client import connect_http, http_server, ok

pytestmark = pytest.mark.replication
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(str(tmp_path_factory.mktemp("nats")), size=3) as c:
        yield c


@pytest.fixture
def stream(request) -> str:
    return "T" + str(abs(hash(request.node.name)) % 10**8)


@pytest.fixture
def nodes(cluster, stream, tmp_path):
    """``nodes(n, **settings)``: n replicated services on the stream; all closed at the end."""
    opened: list[MemoryService] = []

    def make(n: int = 2, **settings) -> list[MemoryService]:
        out = [node(cluster, stream, str(tmp_path / f"node{len(opened) + i}"), **settings) for i in range(n)]
        opened.extend(out)
        return out
    yield make
    for svc in opened:
        svc.close()


def node(cluster: Cluster, stream: str, path: str, **settings) -> MemoryService:
    config = Settings(tuple(cluster.urls.split(",")), stream, 3, **settings)
    return MemoryService(path, committer=committer_factory(config))


def caught_up(*services: MemoryService) -> None:
    for svc in services:
        assert svc.replicated is not None
        svc.replicated.sync(timeout=60)


def contents(svc: MemoryService, session: str = "s") -> list[str]:
    return [m["content"] for m in svc.history(session, 1000, None)["history"]]


# ------------------------------------------------------------ settings
def test_replication_settings_refuse_what_cannot_work():
    with pytest.raises(ValidationError, match="nats://"):
        parse_settings("http://127.0.0.1:4222")
    with pytest.raises(ValidationError, match="at least one"):
        parse_settings(" , ")
    with pytest.raises(ValidationError, match="--stream"):
        parse_settings("nats://127.0.0.1:4222", "a.b")
    with pytest.raises(ValidationError, match="--replicas"):
        parse_settings("nats://127.0.0.1:4222", replicas=0)
    assert parse_settings("nats://a:1, nats://b:2", "S", 1).servers == ("nats://a:1", "nats://b:2")


def test_serve_refuses_a_bad_replicate_flag_before_starting(tmp_path):
    out = subprocess.run([sys.executable, "-m", "server.cli", "serve", "--store", str(tmp_path / "s"),
                          "--replicate", "localhost:4222"], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert "--replicate: each URL must start with nats://" in out.stderr


def test_without_replicate_nothing_imports_nats(tmp_path):
    code = ("import sys\n"
            "from server.cli import parser\n"
            "from server.service import MemoryService\n"
            "from eventstore.events import Metadata\n"
            f"s = MemoryService({str(tmp_path / 's')!r})\n"
            "s.write_message('s', 'user', 'x', Metadata()); s.health(); s.rebuild(); s.close()\n"
            "parser()\n"
            "print(sorted(m for m in sys.modules if m == 'nats' or m.startswith('nats.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_store_of_its_own_seeds_an_empty_stream_and_is_refused_by_one_with_a_history(cluster, stream, tmp_path):
    first, second = str(tmp_path / "own"), str(tmp_path / "other")
    for path in (first, second):
        with contextlib.closing(MemoryService(path)) as plain:
            kept = plain.write_message("s", "user", f"kept in {path}", Metadata())["message"]["message_id"]
            gone = plain.write_message("s", "user", "deleted before", Metadata())["message"]["message_id"]
            plain.update_message(kept, f"updated in {path}", {}, None)
            plain.delete_message(gone, None)
            last = plain.health()["last_sequence"]
    seeded = node(cluster, stream, first)
    seeded.write_message("s", "user", "after seeding", Metadata())          # it has seeded the stream now
    empty, refused = node(cluster, stream, str(tmp_path / "empty")), node(cluster, stream, second, write_timeout=2.0)
    try:
        caught_up(seeded, empty)
        assert contents(seeded) == contents(empty) == [f"updated in {first}", "after seeding"]
        assert seeded.health()["last_sequence"] == last + 1                # its numbers go on
        assert dump_projections(seeded.store) == dump_projections(empty.store)
        with pytest.raises(StoreIOError, match="events of its own and the stream already has a history"):
            refused.write_message("s", "user", "never", Metadata())
        assert contents(refused) == [f"updated in {second}"]                # its reads still work
        health = refused.health()
        assert health["status"] == "DEGRADED" and "history" in health["last_error"]
    finally:
        for svc in (seeded, empty, refused):
            svc.close()


# ------------------------------------------------------------ one store
def test_writes_on_any_node_are_read_on_every_node_with_identical_read_models(nodes, tmp_path):
    a, b, c = nodes(3)
    first = a.write_message("s", "user", "written on a", Metadata(tags=("x",)))["message"]
    b.write_message("s", "assistant", "written on b", Metadata())
    b.update_message(first["message_id"], "changed on b", {"importance": 70}, 1)
    gone = c.write_message("s", "user", "deleted on c", Metadata())["message"]["message_id"]
    assert c.delete_message(gone, None) == {"status": "OK"}
    caught_up(a, b, c)
    for svc in (a, b, c):
        assert contents(svc) == ["changed on b", "written on b"]
        assert [r["content"] for r in svc.search("changed", Filters(), 0, 10)["results"]] == ["changed on b"]
    assert dump_projections(a.store) == dump_projections(b.store) == dump_projections(c.store)
    health = a.health()["replication"]
    assert health["lag_events"] == 0 and health["applied_sequence"] == health["stream_sequence"] == 5
    paths = [svc.path for svc in (a, b, c)]
    for svc in (a, b, c):
        svc.close()
    for path in paths:
        assert differences(path) == []


def test_an_import_into_a_node_goes_through_the_stream_and_never_around_it(nodes, tmp_path):
    """An import given the node's service submits its batches like a tool's write: they reach
    the stream and every node; one that would write the node's files directly is refused."""
    a, b = nodes(2)
    a.write_message("s", "user", "written before the import", Metadata())
    root = samples.claude_code(str(tmp_path / "projects"))
    with pytest.raises(ValidationError, match="^store: is a node of a replicated store"):
        run_import("", "claude-code", [root], Options(progress=False), store=a.store)
    summary = run_import("", "claude-code", [root], Options(progress=False), store=a.store, committer=a)
    assert summary["written"] > 0
    a.write_message("s", "user", "written after the import", Metadata())     # the node still follows the stream
    caught_up(a, b)
    imported = [e["session_id"] for e in a.sessions(100, None)["sessions"] if e["session_id"] != "s"]
    assert imported and b.sessions(100, None) == a.sessions(100, None)
    for svc in (a, b):
        assert sum(len(contents(svc, sid)) for sid in imported) == summary["written"]
        assert contents(svc) == ["written before the import", "written after the import"]
    assert dump_projections(a.store) == dump_projections(b.store)
    health = b.health()["replication"]
    assert health["applied_sequence"] == health["stream_sequence"] == summary["written"] + 2
    again = run_import("", "claude-code", [root], Options(progress=False), store=b.store, committer=b)
    assert again["written"] == 0 and again["already_present"] == summary["written"]


def convmem(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """``convmem ARGS`` in a new process (beside the in-process nodes serving its store)."""
    return subprocess.run([sys.executable, "-m", "server.cli", *args], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, input=None if stdin is None else stdin.decode())


def imported(svc: MemoryService) -> dict[str, list[str]]:
    """Every session but ``s``: its messages' contents."""
    sids = [e["session_id"] for e in svc.sessions(100, None)["sessions"] if e["session_id"] != "s"]
    return {sid: contents(svc, sid) for sid in sids}


def test_convmem_import_into_a_served_node_goes_through_its_stream_to_every_node(nodes, tmp_path):
    """``convmem import`` given a node's store while the node serves it (another process):
    its batches reach the stream, the serving node and the other node apply them, and the
    serving node goes on writing; again into the other node's store, nothing is written twice."""
    a, b = nodes(2)
    a.write_message("s", "user", "written before the import", Metadata())
    root = samples.claude_code(str(tmp_path / "projects"))
    out = convmem("import", "claude-code", root, "--store", a.store.path, "--json")
    assert out.returncode == 1, out.stderr          # the sample holds lines that are skipped
    summary = json.loads(out.stdout)
    assert summary["written"] > 0
    a.write_message("s", "user", "written after the import", Metadata())     # the serving node still writes
    caught_up(a, b)
    assert sum(len(c) for c in imported(b).values()) == summary["written"]
    assert imported(a) == imported(b)
    for svc in (a, b):
        assert contents(svc) == ["written before the import", "written after the import"]
        health = svc.health()["replication"]
        assert health["applied_sequence"] == health["stream_sequence"] == summary["written"] + 2
    assert dump_projections(a.store) == dump_projections(b.store)
    again = convmem("import", "claude-code", root, "--store", b.store.path, "--json")
    assert json.loads(again.stdout)["written"] == 0
    assert json.loads(again.stdout)["already_present"] == summary["written"]


def test_the_hook_and_follow_import_into_a_node_whose_server_is_down_through_its_stream(nodes, cluster, stream,
                                                                                      tmp_path):
    """The hook, then ``import --follow``, into the store of a node that is not running:
    each catches the store up with the stream, publishes, and the other node reads it; the
    node, restarted, goes on from there."""
    import signal
    import time

    a, b = nodes(2)
    a.write_message("s", "user", "a", Metadata())
    path = a.store.path
    a.close()
    b.write_message("s", "user", "b, while a is down", Metadata())
    root = samples.claude_code(str(tmp_path / "projects"), truncated_tail=False)
    transcript = os.path.join(root, "-home-ada-shop", f"{samples.SID}.jsonl")
    payload = {"hook_event_name": "Stop", "session_id": samples.SID, "transcript_path": transcript, "cwd": "/"}
    out = convmem("hook", "--store", path, "--timeout", "120", stdin=json.dumps(payload).encode())
    assert out.returncode == 0 and "convmem hook: warning" not in out.stderr, out.stderr
    caught_up(b)
    hooked = imported(b)
    assert hooked and all(hooked.values())
    follower = subprocess.Popen([sys.executable, "-m", "server.cli", "import", "codex",
                                 samples.codex(str(tmp_path / "codex")), "--follow", "--store", path],
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120      # not a timing assertion: how long to wait for the stream
        while len(imported(b)) == len(hooked) and time.monotonic() < deadline and follower.poll() is None:
            time.sleep(0.2)
    finally:
        follower.send_signal(signal.SIGTERM)
        err = follower.communicate(timeout=60)[1]
    assert follower.returncode == 0, err
    assert "wrote" in err and len(imported(b)) > len(hooked)
    (a,) = [node(cluster, stream, path)]
    try:
        a.write_message("s", "user", "a again", Metadata())
        caught_up(a, b)
        assert contents(a) == contents(b) == ["a", "b, while a is down", "a again"]
        assert imported(a) == imported(b)
        assert dump_projections(a.store) == dump_projections(b.store)
    finally:
        a.close()


def test_convmem_import_jsonl_into_a_served_nodes_store_restores_through_its_stream(nodes, tmp_path):
    own = MemoryService(str(tmp_path / "own"))
    try:
        ids = [own.write_message("p", "user", f"kept {i}", Metadata())["message"]["message_id"] for i in range(3)]
    finally:
        own.close()
    export = str(tmp_path / "export.jsonl")
    assert convmem("export", "--store", str(tmp_path / "own"), "--out", export).returncode == 0
    a, b = nodes(2)
    out = convmem("import", "jsonl", export, "--store", a.store.path)
    assert out.returncode == 0, out.stderr
    caught_up(a, b)
    for svc in (a, b):
        assert [m["message_id"] for m in svc.history("p", 10, None)["history"]] == ids
    a.write_message("p", "user", "after", Metadata())            # the serving node writes on
    caught_up(a, b)
    assert contents(b, "p") == ["kept 0", "kept 1", "kept 2", "after"]
    assert dump_projections(a.store) == dump_projections(b.store)


def test_an_import_into_a_node_on_a_new_generation_still_finds_its_stream(nodes, tmp_path):
    """A node adopting a generation keeps what the store records besides the log (the stream's
    servers and name among it): ``convmem import`` into its store needs no ``--replicate``."""
    a, b = nodes(2)
    a.write_message("s", "user", "before", Metadata())
    a.rebuild()
    caught_up(a, b)
    root = samples.claude_code(str(tmp_path / "projects"))
    out = convmem("import", "claude-code", root, "--store", b.store.path, "--json")
    assert out.returncode == 1 and json.loads(out.stdout)["written"] > 0, out.stderr
    caught_up(a, b)
    assert b.health()["replication"]["generation"] == 2
    assert imported(a) == imported(b) and sum(map(len, imported(b).values())) == json.loads(out.stdout)["written"]
    assert dump_projections(a.store) == dump_projections(b.store)


def test_import_follow_lets_a_nodes_store_go_while_its_server_moves_it_to_a_new_generation(nodes, tmp_path):
    """``rebuild_index`` replaces each node's data file, which needs the store alone: an
    ``import --follow`` into a node's store lets it go while the node moves, then follows on."""
    import signal
    import time

    a, b = nodes(2)
    a.write_message("s", "user", "before", Metadata())
    lines = [json.dumps(line) if not isinstance(line, str) else line for line in samples.claude_code_lines()]
    project = tmp_path / "projects" / "-home-ada-shop"
    project.mkdir(parents=True)
    transcript = project / f"{samples.SID}.jsonl"
    transcript.write_text("\n".join(lines[:5]) + "\n")

    def wait_for(check) -> None:
        deadline = time.monotonic() + 120      # not a timing assertion: how long to wait for the stream
        while not check() and time.monotonic() < deadline and follower.poll() is None:
            time.sleep(0.2)
    follower = subprocess.Popen([sys.executable, "-m", "server.cli", "import", "claude-code",
                                 str(tmp_path / "projects"), "--follow", "--store", a.store.path],
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=ROOT)
    try:
        wait_for(lambda: caught_up(b) or bool(imported(b)))
        first = sum(map(len, imported(b).values()))
        assert first > 0
        assert a.rebuild()["messages_indexed"] == first + 1        # the follower let the store go
        with transcript.open("a") as fh:
            fh.write("\n".join(lines[5:]) + "\n")
        wait_for(lambda: caught_up(b) or sum(map(len, imported(b).values())) > first)
    finally:
        follower.send_signal(signal.SIGTERM)
        err = follower.communicate(timeout=60)[1]
    assert follower.returncode == 0, err
    assert "let go, opened again" in err
    caught_up(a, b)
    assert sum(map(len, imported(b).values())) > first and imported(a) == imported(b)
    assert a.health()["replication"]["generation"] == b.health()["replication"]["generation"] == 2
    assert dump_projections(a.store) == dump_projections(b.store)


def test_an_import_into_a_node_needs_to_know_where_its_stream_is(tmp_path):
    with pytest.raises(ValidationError, match="^--replicate: required"):
        import_settings(None, None, None)
    assert import_settings(("nats://h:1", "S"), None, None) == Settings(("nats://h:1",), "S")
    assert import_settings(("nats://h:1", "S"), "nats://g:2", None) == Settings(("nats://g:2",), "S")
    root = samples.claude_code(str(tmp_path / "projects"))
    out = convmem("import", "claude-code", root, "--store", str(tmp_path / "own"), "--replicate", "nats://h:1")
    assert out.returncode == 2 and "--replicate: only for a replicated node's store" in out.stderr
    assert not os.path.exists(tmp_path / "own")                          # no store made


def test_a_command_refused_on_a_stale_local_view_is_checked_against_the_stream(nodes):
    a, b = nodes(2)
    for i in range(30):      # b is busy applying while the update arrives
        a.write_message("s", "user", f"m{i}", Metadata())
    target = a.write_message("s", "user", "target", Metadata())["message"]["message_id"]
    assert b.update_message(target, "updated on b", {}, 1)["status"] == "OK"
    assert b.delete_message(target, None) == {"status": "OK"}
    with pytest.raises(NotFoundError):
        a.update_message(target, "too late", {}, None)


def test_expected_revision_conflicts_exactly_as_on_one_store(nodes):
    a, b = nodes(2)
    mid = a.write_message("s", "user", "v1", Metadata())["message"]["message_id"]
    caught_up(b)
    assert b.update_message(mid, "v2 from b", {}, 1)["message"]["revision"] == 2
    with pytest.raises(ConflictError, match=r"current revision \(2\)"):
        a.update_message(mid, "v2 from a", {}, 1)
    assert a.update_message(mid, "v3 from a", {}, 2)["message"]["revision"] == 3


def test_concurrent_read_modify_write_on_two_nodes_loses_no_update(nodes):
    a, b = nodes(2)
    mid = a.write_message("s", "user", "start;", Metadata())["message"]["message_id"]   # content is never empty
    caught_up(b)
    rounds, conflicts = 15, [0, 0]

    def writer(svc: MemoryService, name: str, index: int) -> None:
        for i in range(rounds):
            while True:
                cur = svc.content_range(mid, 0, 10**6, None)["content_range"]
                try:
                    svc.update_message(mid, cur["content"] + f"{name}{i};", {}, cur["revision"])
                    break
                except ConflictError:
                    conflicts[index] += 1
                    caught_up(svc)
    pairs = ((a, "a"), (b, "b"))
    threads = [threading.Thread(target=writer, args=(svc, name, i)) for i, (svc, name) in enumerate(pairs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    caught_up(a, b)
    final = a.content_range(mid, 0, 10**6, None)["content_range"]
    parts = final["content"].split(";")[1:-1]
    assert final["revision"] == 1 + 2 * rounds                 # every update applied once
    assert sorted(parts) == sorted([f"a{i}" for i in range(rounds)] + [f"b{i}" for i in range(rounds)])
    assert [p for p in parts if p[0] == "a"] == [f"a{i}" for i in range(rounds)]   # each writer's order kept
    assert dump_projections(a.store) == dump_projections(b.store)


def test_sync_reads_see_a_write_acknowledged_on_another_node(nodes):
    (a,) = nodes(1)
    (b,) = nodes(1, sync_reads=True)
    for i in range(20):
        mid = a.write_message("s", "user", f"m{i}", Metadata())["message"]["message_id"]
        assert b.content_range(mid, 0, 100, None)["content_range"]["content"] == f"m{i}"


# ------------------------------------------------------------ provenance
def who(revisions: list[dict]) -> list[tuple[int, str | None, list[str]]]:
    return [(r["revision"], r["principal"], r["changed"]) for r in revisions]


@pytest.mark.anyio
async def test_who_wrote_and_who_updated_reach_every_node_over_http(cluster, stream, tmp_path, capsys):
    """agent-a writes on one ``serve --http --replicate`` node, agent-b updates on another
    (tokens from ``convmem token add``); every node shows both revisions with their principals."""
    made: dict[str, str] = {}
    for name in ("a", "b"):
        assert main(["--store", str(tmp_path / name), "token", "add", f"agent-{name}"]) == 0
        made[name] = capsys.readouterr().out.strip()
    flags = ("--replicate", cluster.urls, "--stream", stream, "--sync-reads")
    expected = [(1, "agent-a", ["created"]), (2, "agent-b", ["content", "tags"])]
    with http_server(str(tmp_path / "a"), extra=flags) as a, http_server(str(tmp_path / "b"), extra=flags) as b:
        async with connect_http(a.url, made["a"]) as on_a, connect_http(b.url, made["b"]) as on_b:
            mid = (await ok(on_a, "write_message", {"session_id": "p/1", "role": "user",
                                                    "content": "written by a"}))["message"]["message_id"]
            await ok(on_b, "update_message", {"message_id": mid, "content": "corrected by b", "expected_revision": 1,
                                              "metadata_json": '{"tags": ["fixed"]}'})
            for client in (on_a, on_b):
                body = await ok(client, "read_messages", {"view": "revisions", "message_id": mid})
                assert who(body["revisions"]) == expected
    c_path = str(tmp_path / "c")
    c = node(cluster, stream, c_path)
    try:
        caught_up(c)
        assert who(c.revisions(mid)["revisions"]) == expected
    finally:
        c.close()
    capsys.readouterr()
    assert main(["--store", c_path, "log", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(e["event"], e["principal"], e["message_id"]) for e in lines] == [
        ("written", "agent-a", mid), ("updated", "agent-b", mid)]


def test_a_new_generation_keeps_the_principal_of_each_current_revision(nodes):
    a, b = nodes(2)
    agent_a, agent_b = Principal("agent-a"), Principal("agent-b")
    mid = a.write_message("s", "user", "v1", Metadata(), principal=agent_a)["message"]["message_id"]
    b.update_message(mid, "v2", {}, None, principal=agent_b)
    kept = b.write_message("s", "user", "only written", Metadata(), principal=agent_b)["message"]["message_id"]
    caught_up(a, b)
    assert who(a.revisions(mid)["revisions"]) == [(1, "agent-a", ["created"]), (2, "agent-b", ["content"])]
    a.rebuild()
    caught_up(a, b)
    for svc in (a, b):
        assert who(svc.revisions(mid)["revisions"]) == [(2, "agent-b", ["rewritten"])]
        assert who(svc.revisions(kept)["revisions"]) == [(1, "agent-b", ["created"])]


# ------------------------------------------------------------ erasure
def test_rebuild_erases_deleted_content_from_every_server_and_node_and_loses_no_write(nodes, cluster, stream,
                                                                                      tmp_path):
    a, b = nodes(2)
    down_path = str(tmp_path / "down")
    down = node(cluster, stream, down_path)
    keep = a.write_message("s", "user", "kept message", Metadata())["message"]["message_id"]
    secret = b.write_message("s", "user", "the PurpleGiraffe password", Metadata())["message"]["message_id"]
    b.update_message(keep, "kept but once said purplegiraffe", {}, None)
    b.update_message(keep, "kept, clean now", {}, None)
    caught_up(down)
    down.close()                                                # misses the switch
    assert a.delete_message(secret, None) == {"status": "OK"}
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            acked.append(b.write_message("w", "user", f"during {len(acked)}", Metadata())["message"]["message_id"])
    t = threading.Thread(target=writer)
    t.start()
    last_before = a.health()["last_sequence"]
    result = a.rebuild()
    stop.set()
    t.join(120)
    assert result["status"] == "OK" and result["messages_indexed"] >= 1
    down = node(cluster, stream, down_path)
    try:
        b.write_message("s", "user", "after the switch", Metadata())
        caught_up(a, b, down)
        for svc in (a, b, down):
            assert svc.health()["replication"]["generation"] == 2
            assert svc.health()["last_sequence"] >= last_before          # never goes back, as on one store
            assert contents(svc) == ["kept, clean now", "after the switch"]
            assert [m["message_id"] for m in svc.history("w", 10**4, None)["history"]] == acked
        assert dump_projections(a.store) == dump_projections(b.store) == dump_projections(down.store)
    finally:
        down.close()
    roots = [cluster.workdir, str(tmp_path)]
    assert files_holding(roots, b"purplegiraffe") == []


def test_a_seal_whose_node_died_before_the_switch_is_finished_by_rebuild_on_another_node(cluster, stream, tmp_path):
    import time

    from server.replication.generations import _seal
    a = node(cluster, stream, str(tmp_path / "a"), write_timeout=1.0)
    b = node(cluster, stream, str(tmp_path / "b"), write_timeout=1.0)
    try:
        kept = a.write_message("s", "user", "kept", Metadata())["message"]["message_id"]
        assert a.replicated is not None
        a.replicated.run(lambda: _seal(a.replicated, time.monotonic() + 10))     # then it "dies"
        a.close()
        with pytest.raises(StoreIOError, match="switching generations"):
            b.write_message("s", "user", "refused while sealed", Metadata())
        result = b.rebuild()                                # no progress for 2 s: b finishes the switch
        assert result["messages_indexed"] == 1
        after = b.write_message("s", "user", "after", Metadata())["message"]["message_id"]
        a = node(cluster, stream, str(tmp_path / "a"), write_timeout=1.0)
        caught_up(a, b)
        for svc in (a, b):
            assert svc.health()["replication"]["generation"] == 2
            assert [m["message_id"] for m in svc.history("s", 10, None)["history"]] == [kept, after]
        assert dump_projections(a.store) == dump_projections(b.store)
    finally:
        a.close()
        b.close()
