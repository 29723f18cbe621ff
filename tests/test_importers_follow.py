"""``import --follow``: transcripts read part by part as they are written end
with the same sessions and messages as one ``convmem import`` of the same
bytes into a fresh store — whatever the parts (half lines included), across
restarts, and when a file is cut or rewritten."""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import import_samples as samples
import pytest

from eventstore.events import MessageWritten
from eventstore.store import EventStore
from projections.registry import Projector
from server.importers import Options, positions, run_import
from server.importers.follow import Follower, follow, roots
from server.importers.turns import Report
from server.service import MemoryService

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SESSION = f"claude-code:{samples.SID}"
QUIET = Options(progress=False, apart=False)


def snapshot(store_path: str) -> dict[str, dict]:
    """Every session's messages by their source turn (ids are the store's own:
    relations are named by their target's source turn)."""
    svc = MemoryService(store_path)
    try:
        with svc.store.read() as tx:          # who wrote each message, as its event in the log says
            writers = {event.message.message_id: event.principal for _, event, _ in svc.store.iter_events(tx)
                       if isinstance(event, MessageWritten)}
        out: dict[str, dict] = {}
        for s in svc.sessions(1000, None)["sessions"]:
            history = svc.history(s["session_id"], 10_000, None)["history"]
            source = {m["message_id"]: m["metadata"]["source_message_ids"][0] for m in history}
            msgs = {}
            for m in history:
                meta = dict(m["metadata"])
                meta["relations"] = [(r["type"], source.get(r["message_id"])) for r in meta["relations"]]
                msgs[meta["source_message_ids"][0]] = (m["role"], m["content"], m["timestamp"], m["revision"],
                                                       json.dumps(meta, sort_keys=True), writers[m["message_id"]])
            # the time of a session's newest message is that of its summary when a one-shot import
            # writes a summary line after the file's other lines; a follower writes it as soon as its
            # leaf is read (docs/import.md): only that time can differ
            last = None if s["kind_counts"]["summary"] else s["last_message_at"]
            out[s["session_id"]] = {"count": s["message_count"], "kinds": s["kind_counts"],
                                    "started": s["started_at"], "last": last, "messages": msgs}
        return out
    finally:
        svc.close()


def one_shot(tmp_path, name: str, source: str, files: dict[str, bytes], *more: dict[str, bytes]) -> dict:
    """The snapshot of a fresh store after one import of ``files`` (then of each of ``more``)."""
    store = str(tmp_path / f"one-shot-{name}")
    for n, version in enumerate((files, *more)):
        root = tmp_path / f"one-shot-{name}-files-{n}"
        for rel, data in version.items():
            put(root, rel, data)
        run_import(store, source, [str(root)], QUIET)
    return snapshot(store)


def put(root, rel: str, data: bytes) -> None:
    """Write ``data`` at ``root/rel``, its folders made as needed."""
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_bytes(data)


def claude_code_files(tmp_path) -> dict[str, bytes]:
    root = samples.claude_code(str(tmp_path / "sample"), truncated_tail=False)
    more = [samples._cc(f"w{i}", f"w{i - 1}" if i else "u9", "assistant" if i % 2 else "user",
                        [{"type": "tool_use", "id": f"t{i}", "name": "Edit", "input": {"n": i}}] if i % 3 == 1 else
                        [{"type": "tool_result", "tool_use_id": f"t{i - 1}", "content": f"done {i}"}] if i % 3 == 2 else
                        f"line {i}", f"2026-01-20T12:{i:02d}:00.000Z") for i in range(30)]
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                files[os.path.relpath(path, root)] = fh.read()
    main = f"-home-ada-shop/{samples.SID}.jsonl"
    files[main] += b"".join(json.dumps(line).encode() + b"\n" for line in more)
    return files


def codex_files(tmp_path) -> dict[str, bytes]:
    root = samples.codex(str(tmp_path / "sample"))
    path = next(os.path.join(d, n) for d, _, names in os.walk(root) for n in names)
    with open(path, "rb") as fh:
        return {os.path.relpath(path, root): fh.read()}


def one_rollout(tmp_path) -> tuple[dict[str, bytes], Path, str, bytes]:
    """The codex sample, one rollout file, and the folder to follow it in (not written yet):
    ``(files, root, its path below root, its bytes)``."""
    files = codex_files(tmp_path)
    (rel, data), = files.items()
    return files, tmp_path / "f", rel, data


def parts(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    """``data`` cut at ``count`` random places (most of them inside a line)."""
    cuts = sorted(rng.sample(range(1, len(data)), count))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def follower(store: EventStore, source: str, root) -> Follower:
    return Follower(store, source, [str(root)], QUIET, Report(source, echo=False))


@pytest.mark.parametrize("source", ["claude-code", "codex"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_following_a_growing_file_in_parts_gives_what_one_import_of_its_bytes_gives(tmp_path, source, seed):
    files = claude_code_files(tmp_path) if source == "claude-code" else codex_files(tmp_path)
    rng = random.Random(seed)
    root = tmp_path / "follow"
    pieces = {rel: parts(data, rng, 12) for rel, data in files.items()}
    store_path = str(tmp_path / "store")
    store = EventStore(store_path, Projector())
    try:
        f = follower(store, source, root)
        for step in range(13):
            for rel, chunks in pieces.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                with open(root / rel, "ab") as fh:
                    fh.write(chunks[step])
            f.sweep()
            if step == 6:                   # a restart: a new process, the same store
                store.close()
                store = EventStore(store_path, Projector())
                f = follower(store, source, root)
        assert not [s for s in f.report.skipped if "truncated" in s]     # a half line waits: no skip
    finally:
        store.close()
    assert snapshot(store_path) == one_shot(tmp_path, "all", source, files)


def test_a_file_without_a_position_is_read_whole_and_a_new_project_is_found(tmp_path, store_path):
    files = claude_code_files(tmp_path)
    root = tmp_path / "projects"
    root.mkdir()
    with EventStore(store_path, Projector()) as store:
        f = follower(store, "claude-code", root)
        assert f.sweep() == 0
        for rel, data in files.items():       # a project directory that appears while following
            put(root, rel, data)
        assert f.sweep() > 0
        assert f.sweep() == 0                 # nothing new
        with store.read() as tx:
            kept = positions.all_of(store, tx, "claude-code")
        assert sorted(p.path for p in kept) == sorted(str(root / rel) for rel in files)
        assert all(p.offset == len(files[os.path.relpath(p.path, root)]) for p in kept)
    assert snapshot(store_path) == one_shot(tmp_path, "whole", "claude-code", files)


def test_a_restart_reads_from_the_position_not_the_whole_file(tmp_path, store_path):
    files, root, rel, data = one_rollout(tmp_path)
    put(root, rel, data)
    with EventStore(store_path, Projector()) as store:
        follower(store, "codex", root).sweep()
    with open(root / rel, "ab") as fh:
        fh.write(b'{"timestamp":"2025-10-02T09:01:00.000Z","type":"response_item","payload":{"type":"message",'
                 b'"role":"user","content":[{"type":"input_text","text":"and a test"}]}}\n')
    with EventStore(store_path, Projector()) as store:
        f = follower(store, "codex", root)
        f.sweep()
        # the first lines were not read again: none of their skips is reported a second time
        assert f.report.skipped == [] and f.report.written == 1 and f.report.present == 0


@pytest.mark.parametrize("change", ["truncated", "rewritten", "replaced"])
def test_a_file_cut_or_changed_before_its_position_is_read_again_from_its_start(tmp_path, store_path, change):
    files = claude_code_files(tmp_path)
    main = f"-home-ada-shop/{samples.SID}.jsonl"
    old = files[main]
    lines = old.splitlines(keepends=True)
    if change == "truncated":          # cut to its first lines, then another line appended
        new = b"".join(lines[:8]) + json.dumps(samples._cc("x1", None, "user", "after the cut",
                                                              "2026-01-21T10:00:00.000Z")).encode() + b"\n"
    else:                              # the same length, a byte changed near its start; or a new inode
        new = old.replace(b"Why does test_deploy fail", b"Why does test_deploy FAIL", 1)
    root = tmp_path / "f"
    with EventStore(store_path, Projector()) as store:
        f = follower(store, "claude-code", root)
        for rel, data in files.items():
            put(root, rel, data)
        f.sweep()
        if change == "replaced":
            os.rename(root / main, root / "old")
        with open(root / main, "r+b" if change == "rewritten" else "wb") as fh:
            fh.write(new)
            fh.truncate()
        f.seen.clear()                  # as a restart would: the same size and time may be seen
        f.sweep()
        with store.read() as tx:
            kept = positions.load(store, tx, "claude-code", str(root / main))
        assert kept is not None and kept.offset == len(new)
    assert snapshot(store_path) == one_shot(tmp_path, change, "claude-code", files, {**files, main: new})


def test_a_damaged_position_is_taken_for_none(tmp_path, store_path):
    files, root, rel, data = one_rollout(tmp_path)
    put(root, rel, data)
    with EventStore(store_path, Projector()) as store:
        store.execute(lambda w: store.set_caller_value(w, positions.key("codex", str(root / rel)), b"\xff\x00"))
        follower(store, "codex", root).sweep()
        with store.read() as tx:
            assert positions.load(store, tx, "codex", str(root / rel)).offset == len(data)
    assert snapshot(store_path) == one_shot(tmp_path, "damaged", "codex", files)


def test_the_store_refuses_a_caller_key_outside_its_prefix(store_path):
    with EventStore(store_path, Projector()) as store:
        with store.read() as tx, pytest.raises(ValueError, match="key: must start with 'follow/'"):
            store.caller_values(tx, b"last_id")


def test_positions_survive_compaction_and_reading_goes_on(tmp_path, store_path):
    files = claude_code_files(tmp_path)
    main = f"-home-ada-shop/{samples.SID}.jsonl"
    whole = files[main]
    first, cut = whole.index(b"\n", len(whole) // 3) + 1, whole.index(b"\n", len(whole) // 2) + 1
    root = tmp_path / "f"
    for rel, data in files.items():
        put(root, rel, data if rel != main else whole[:first])
    with EventStore(store_path, Projector()) as store:
        follower(store, "claude-code", root).sweep()
        (root / main).write_bytes(whole[:cut])
        follower(store, "claude-code", root).sweep()     # a position that looks at the events after its own
    svc = MemoryService(store_path)
    try:
        svc.delete_message(svc.history(SESSION, 1, None)["history"][0]["message_id"], None)
        svc.rebuild()                    # compacts the store into a fresh file, renumbering its events
        with svc.store.read() as tx:
            assert positions.load(svc.store, tx, "claude-code", str(root / main)).offset == cut
    finally:
        svc.close()
    (root / main).write_bytes(whole)
    with EventStore(store_path, Projector()) as store:
        f = follower(store, "claude-code", root)
        f.sweep()
        assert f.report.present == 0      # nothing read twice
    expected = one_shot(tmp_path, "compacted", "claude-code", files)
    got = snapshot(store_path)
    assert len(got[SESSION]["messages"]) == len(expected[SESSION]["messages"]) - 1     # the one deleted
    assert got[SESSION]["messages"].items() <= expected[SESSION]["messages"].items()


@pytest.mark.parametrize("notify", [True, False])
def test_the_loop_imports_appended_lines_until_stopped(tmp_path, store_path, notify):
    files, root, rel, data = one_rollout(tmp_path)
    head, tail = data[:len(data) // 2], data[len(data) // 2:]
    put(root, rel, head)
    stop = threading.Event()
    sweeps: queue.Queue[int] = queue.Queue()
    with EventStore(store_path, Projector()) as store:
        f = follower(store, "codex", root)
        loop = threading.Thread(target=follow, args=(f, stop), kwargs={"poll": 0.05, "notify": notify,
                                                                        "swept": sweeps.put})
        loop.start()
        try:
            sweeps.get(timeout=60)                      # the first sweep
            with open(root / rel, "ab") as fh:
                fh.write(tail)
            while _offset(store, root / rel) != len(data):
                sweeps.get(timeout=60)                  # (a deadline only so that a broken loop fails, not hangs)
        finally:
            stop.set()
            loop.join(60)
        assert not loop.is_alive()
    assert snapshot(store_path) == one_shot(tmp_path, "loop", "codex", files)


def _offset(store: EventStore, path) -> int:
    with store.read() as tx:
        found = positions.load(store, tx, "codex", str(path))
    return found.offset if found is not None else -1


def test_roots_are_the_directories_above_the_globs(tmp_path):
    from server.importers import claude_code
    home = os.path.expanduser("~")
    assert roots(claude_code, []) == [os.path.join(home, ".claude", "projects")]
    assert roots(claude_code, [str(tmp_path / "a" / "*" / "*.jsonl"), str(tmp_path)]) == [
        str(tmp_path / "a"), str(tmp_path)]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_the_command_stops_cleanly(tmp_path, store_path, sig, code):
    files, root, rel, data = one_rollout(tmp_path)
    put(root, rel, data)
    with subprocess.Popen([sys.executable, "-m", "server.cli", "import", "codex", str(root), "--follow",
                           "--store", store_path], cwd=ROOT, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stderr is not None
            lines = []
            for line in proc.stderr:
                lines.append(line)
                if "wrote" in line:
                    break
            proc.send_signal(sig)
            assert proc.wait(60) == code, "".join(lines) + proc.stderr.read()
            assert "stopped" in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert snapshot(store_path) == one_shot(tmp_path, "cli", "codex", files)


def test_follow_is_offered_for_claude_code_and_codex_only(tmp_path, store_path):
    done = subprocess.run([sys.executable, "-m", "server.cli", "import", "chatgpt", str(tmp_path), "--follow",
                           "--store", store_path], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--follow" in done.stderr


def test_lines_a_one_shot_import_wrote_after_the_position_are_not_written_twice(tmp_path, store_path):
    files = claude_code_files(tmp_path)
    main = f"-home-ada-shop/{samples.SID}.jsonl"
    whole = files[main]
    a, b = whole.index(b"\n", len(whole) // 3) + 1, whole.index(b"\n", 2 * len(whole) // 3) + 1
    root = tmp_path / "f"
    for rel, data in files.items():
        put(root, rel, data if rel != main else whole[:a])
    with EventStore(store_path, Projector()) as store:
        first, second = follower(store, "claude-code", root), follower(store, "claude-code", root)
        first.sweep()
        (root / main).write_bytes(whole[:b])
        run_import("", "claude-code", [str(root)], QUIET, store=store)     # knows no position
        (root / main).write_bytes(whole)
        second.sweep()                    # another follower (a hook) takes the file further
        first.sweep()                     # the first one, whose writer saw the store before
    assert snapshot(store_path) == one_shot(tmp_path, "others", "claude-code", files)


def test_reading_on_from_a_position_does_not_read_every_message_of_the_session(tmp_path, store_path, monkeypatch):
    files, root, rel, data = one_rollout(tmp_path)
    put(root, rel, data)
    from server.importers import writer
    line = ('{"timestamp":"2025-10-02T09:01:00.000Z","type":"response_item","payload":{"type":"message",'
            '"role":"user","content":[{"type":"input_text","text":"and test %d"}]}}\n')
    read: list[str] = []
    get = writer.messages.get
    monkeypatch.setattr(writer.messages, "get", lambda tx, mid: read.append(mid) or get(tx, mid))
    with EventStore(store_path, Projector()) as store:
        f = follower(store, "codex", root)
        f.sweep()
        for n in range(3):
            with open(root / rel, "a") as fh:
                fh.write(line % n)
            read.clear()
            before = f.report.written
            f.sweep()
            assert f.report.written == before + 1
        # what was written since the last reading began (the line before) is read, not the whole session
        assert len(read) == 1


@pytest.mark.parametrize("chunk", [100, 700])
def test_files_read_in_small_parts_give_the_same_messages(tmp_path, store_path, chunk):
    files = claude_code_files(tmp_path)
    root = tmp_path / "f"
    for rel, data in files.items():
        put(root, rel, data)
    with EventStore(store_path, Projector()) as store:
        f = Follower(store, "claude-code", [str(root)], QUIET, Report("claude-code", echo=False), chunk=chunk)
        f.sweep()
        with store.read() as tx:
            assert all(p.offset == len(files[os.path.relpath(p.path, root)])
                       for p in positions.all_of(store, tx, "claude-code"))
    assert snapshot(store_path) == one_shot(tmp_path, "parts", "claude-code", files)


def test_a_watcher_that_fails_falls_back_to_polling(tmp_path, monkeypatch, caplog):
    from server.importers import follow as following

    def broken(*dirs, **options):
        raise OSError(28, "inotify watch limit reached")
        yield                                   # a generator, as watchfiles.watch is
    monkeypatch.setattr(following, "_watchfiles", lambda: broken)
    stop = threading.Event()
    ticks = following.changes([str(tmp_path)], stop, 0.01, True)
    next(ticks)                                 # polled: it goes on
    next(ticks)
    stop.set()
    assert list(ticks) == []
    assert "polling every 0.01 s" in caplog.text
