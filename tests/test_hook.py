"""``convmem-hook``: Claude Code's Stop-family events import what is new in
the transcript; SessionStart prints one JSON object with the project's
distilled memories; nothing ever breaks the agent (exit 0, a warning)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys

import import_samples as samples
import pytest
from test_importers_follow import claude_code_files, one_shot, snapshot

from eventstore.events import Metadata
from eventstore.store import EventStore
from projections.registry import Projector
from server import briefing
from server.importers import Options, run_import
from server.service import MemoryService

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SESSION = f"claude-code:{samples.SID}"
PROJECT = "/home/ada/shop"


def hook(store_path: str, payload, *args: str, entry: str = "convmem-hook", importtime: bool = False):
    """Run the hook as Claude Code does: the payload on stdin, a new process."""
    code = "import sys; from server.hook import main; sys.exit(main())"
    command = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", code]
    if entry == "convmem hook":
        command = [sys.executable, "-m", "server.cli", "hook"]
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return subprocess.run([*command, "--store", store_path, *args], input=data, capture_output=True, cwd=ROOT,
                          timeout=120)


def stop(path: str, event: str = "Stop") -> dict:
    return {"hook_event_name": event, "session_id": samples.SID, "transcript_path": path, "cwd": PROJECT}


def write_files(root, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_stop_imports_what_is_new_and_ends_as_one_import_of_the_same_bytes(tmp_path, store_path):
    files = claude_code_files(tmp_path)
    main = f"-home-ada-shop/{samples.SID}.jsonl"
    root = tmp_path / "projects"
    whole = files[main]
    cut = whole.index(b"\n", len(whole) // 2) + 40          # inside a line: the half line waits
    write_files(root, {**files, main: whole[:cut]})
    path = str(root / main)
    first = hook(store_path, stop(path))
    assert first.returncode == 0 and first.stdout == b"", first.stderr
    (root / main).write_bytes(whole)
    again = hook(store_path, stop(path, "SessionEnd"))
    assert again.returncode == 0 and again.stdout == b"", again.stderr
    assert b"truncated" not in first.stderr + again.stderr
    assert snapshot(store_path) == one_shot(tmp_path, "hook", "claude-code", files)


def test_the_subagents_transcripts_are_imported_with_the_session(tmp_path, store_path):
    files = claude_code_files(tmp_path)
    root = tmp_path / "projects"
    write_files(root, files)
    hook(store_path, stop(str(root / f"-home-ada-shop/{samples.SID}.jsonl"), "PreCompact"))
    assert f"{SESSION}/agent-{samples.AGENT}" in snapshot(store_path)


def test_the_hook_never_imports_the_mcp_sdk(tmp_path, store_path):
    files = claude_code_files(tmp_path)
    root = tmp_path / "projects"
    write_files(root, files)
    for payload in (stop(str(root / f"-home-ada-shop/{samples.SID}.jsonl")),
                    {"hook_event_name": "SessionStart", "session_id": "s", "cwd": PROJECT}):
        done = hook(store_path, payload, importtime=True)
        assert done.returncode == 0
        modules = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.decode().splitlines()
                   if line.startswith("import time:")]
        assert "server.hook" in modules and ("eventstore.store" in modules)
        assert not [m for m in modules if m == "mcp" or m.startswith("mcp.")]


def _memories(store_path: str) -> dict[str, str]:
    """The sample session imported, and memories written into it and elsewhere; their ids by name."""
    root = samples.claude_code(str(os.path.join(os.path.dirname(store_path), "projects")))
    run_import(store_path, "claude-code", [root], Options(progress=False, apart=False))
    svc = MemoryService(store_path)
    try:
        def write(session: str, content: str, kind: str, importance: int, **more) -> str:
            meta = Metadata(memory_kind=kind, importance=importance, **more)
            return svc.write_message(session, "assistant", content, meta)["message"]["message_id"]
        ids = {"old": write(SESSION, "Deploys go out on Mondays", "semantic", 90)}
        ids["new"] = write(SESSION, "Deploys go out on Tuesdays", "semantic", 70,
                           relations=(("supersedes", ids["old"]),))
        ids["low"] = write(SESSION, "The CI timeout is 20 s", "procedure", 20, summary="CI timeout: 20 s")
        ids["chat"] = write(SESSION, "thanks!", "conversation", 100)
        ids["elsewhere"] = write("claude-code:other", "Somebody else's project", "semantic", 100)
        ids["loose"] = write("notes", "Not in any project", "preference", 100)
        return ids
    finally:
        svc.close()


def test_session_start_prints_one_object_with_the_projects_memories_by_importance(tmp_path, store_path):
    _memories(store_path)
    done = hook(store_path, {"hook_event_name": "SessionStart", "session_id": "new", "cwd": PROJECT,
                             "source": "startup"})
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)         # exactly one JSON object (json.loads refuses anything more)
    assert list(answer) == ["hookSpecificOutput"]
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    context = answer["hookSpecificOutput"]["additionalContext"]
    lines = context.splitlines()
    assert PROJECT in lines[0]
    assert [line.split("] ", 1)[1] for line in lines[1:]] == [
        "Deploys go out on Tuesdays", "Fixing the flaky deploy test", "CI timeout: 20 s"]
    assert "[semantic, importance 70, " in lines[1]
    for absent in ("Mondays", "thanks", "Somebody else", "Not in any project"):
        assert absent not in context


def test_a_superseding_message_deleted_brings_the_old_one_back(tmp_path, store_path):
    ids = _memories(store_path)
    svc = MemoryService(store_path)
    try:
        svc.delete_message(ids["new"], None)
    finally:
        svc.close()
    with EventStore(store_path, Projector()) as store, store.read() as tx:
        texts = [m.text for m in briefing.memories(tx, PROJECT)]
    assert texts == ["Deploys go out on Mondays", "Fixing the flaky deploy test", "CI timeout: 20 s"]


def test_the_briefing_keeps_within_its_budget(tmp_path, store_path):
    _memories(store_path)
    with EventStore(store_path, Projector()) as store, store.read() as tx:
        found = briefing.memories(tx, PROJECT)
    whole = briefing.render(PROJECT, found, 1 << 20)
    for budget in range(0, len(whole.encode()) + 2, 7):
        text = briefing.render(PROJECT, found, budget)
        assert len(text.encode()) <= budget
        assert whole.startswith(text.split("\n(")[0])
    done = hook(store_path, {"hook_event_name": "SessionStart", "cwd": PROJECT}, "--budget", "200")
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert 0 < len(context.encode()) <= 200 and "Tuesdays" in context


def test_session_start_without_a_cwd_still_prints_its_object(store_path):
    done = hook(store_path, {"hook_event_name": "SessionStart", "session_id": "s"})
    assert done.returncode == 0 and b"cwd: required for SessionStart" in done.stderr
    assert json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] == ""


def test_session_start_without_a_store_says_nothing_and_creates_none(tmp_path, store_path):
    done = hook(store_path, {"hook_event_name": "SessionStart", "cwd": PROJECT})
    assert done.returncode == 0
    assert json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] == ""
    assert not os.path.exists(store_path)


@pytest.mark.parametrize("payload", [b"", b"not json", b"[1]", b'{"hook_event_name": 3}',
                                     b'{"hook_event_name": "Stop"}',
                                     b'{"hook_event_name": "Stop", "transcript_path": 7}'])
def test_a_bad_payload_is_a_warning_and_exit_0(store_path, payload):
    done = hook(store_path, payload)
    assert done.returncode == 0 and done.stdout == b""
    assert b"convmem hook: warning:" in done.stderr


def test_a_damaged_store_is_a_warning_and_exit_0(tmp_path, store_path):
    os.makedirs(store_path)
    with open(os.path.join(store_path, "data.mdb"), "wb") as fh:
        fh.write(b"\x00garbage" * 4096)
    done = hook(store_path, {"hook_event_name": "SessionStart", "cwd": PROJECT})
    assert done.returncode == 0 and b"warning" in done.stderr
    assert json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] == ""
    files = claude_code_files(tmp_path)
    write_files(tmp_path / "p", files)
    done = hook(store_path, stop(str(tmp_path / "p" / f"-home-ada-shop/{samples.SID}.jsonl")))
    assert done.returncode == 0 and b"warning" in done.stderr


@pytest.mark.parametrize("event", ["Stop", "SessionStart"])
def test_a_busy_store_gives_up_at_the_time_limit_with_exit_0(tmp_path, store_path, event):
    files = claude_code_files(tmp_path)
    write_files(tmp_path / "p", files)
    MemoryService(store_path).close()
    with open(os.path.join(store_path, "convmem.lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)            # as compaction holds it: opening the store waits
        payload = stop(str(tmp_path / "p" / f"-home-ada-shop/{samples.SID}.jsonl"), event)
        done = hook(store_path, payload, "--timeout", "0.5")
    assert done.returncode == 0 and b"gave up after 0.5 s" in done.stderr
    if event == "SessionStart":
        assert json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] == ""
    else:
        assert done.stdout == b""


def test_convmem_hook_is_the_same_hook(tmp_path, store_path):
    _memories(store_path)
    done = hook(store_path, {"hook_event_name": "SessionStart", "cwd": PROJECT}, entry="convmem hook")
    assert done.returncode == 0
    assert "Tuesdays" in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]


def test_other_events_do_nothing(store_path):
    done = hook(store_path, {"hook_event_name": "UserPromptSubmit", "prompt": "hi", "cwd": PROJECT})
    assert done.returncode == 0 and done.stdout == b"" and done.stderr == b""
    assert not os.path.exists(store_path)


def test_a_summary_whose_leaf_is_elsewhere_waits_for_session_end(tmp_path, store_path):
    files = claude_code_files(tmp_path)
    main = f"-home-ada-shop/{samples.SID}.jsonl"
    files[main] = b'{"type":"summary","summary":"Earlier: the payment retries","leafUuid":"elsewhere"}\n' + files[main]
    root = tmp_path / "projects"
    write_files(root, files)
    path = str(root / main)
    hook(store_path, stop(path))
    summaries = lambda: [m for m in snapshot(store_path)[SESSION]["messages"].values() if "payment retries" in m[1]]
    assert summaries() == []                  # its leaf may still come: it waits
    hook(store_path, stop(path, "SessionEnd"))
    assert len(summaries()) == 1
    assert snapshot(store_path) == one_shot(tmp_path, "end", "claude-code", files)


def test_subagent_stop_imports_the_agent_transcript_it_names(tmp_path, store_path):
    files = claude_code_files(tmp_path)
    agent = f"-home-ada-shop/{samples.SID}/subagents/agent-{samples.AGENT}.jsonl"
    root = tmp_path / "projects"
    write_files(root, {agent: files[agent]})            # the main transcript is not there yet
    payload = {**stop(str(root / f"-home-ada-shop/{samples.SID}.jsonl"), "SubagentStop"),
               "agent_transcript_path": str(root / agent)}
    done = hook(store_path, payload)
    assert done.returncode == 0 and done.stderr == b""
    assert list(snapshot(store_path)) == [f"{SESSION}/agent-{samples.AGENT}"]


def test_the_briefing_reads_the_entries_of_the_projects_sessions_only(store_path, monkeypatch):
    from projections import sessions
    from projections.index import IndexConfig
    small = IndexConfig(merge_at=8, chunk=4)        # some documents merged, the last ones pending
    svc = MemoryService(store_path, index_config=small)
    try:
        ids = {}
        for s in range(40):
            meta = Metadata(tags=(f"project:/p{s % 4}",))
            svc.write_message(f"s{s}", "user", f"talk {s}", meta)
            ids[s] = svc.write_message(f"s{s}", "assistant", f"memory {s}",
                                       Metadata(memory_kind="semantic", importance=s))["message"]["message_id"]
        svc.update_message(ids[5], None, {"tags": ("moved",)}, None)      # its session's first message keeps its tag
        svc.delete_message(ids[9], None)
    finally:
        svc.close()
    looked: list[str] = []
    entry = sessions.get

    def counted(tx, session_id):
        looked.append(session_id)
        return entry(tx, session_id)
    monkeypatch.setattr(sessions, "get", counted)
    with EventStore(store_path, Projector(small)) as store, store.read() as tx:
        texts = [m.text for m in briefing.memories(tx, "/p1")]
    assert texts == [f"memory {s}" for s in range(37, 0, -4) if s != 9]
    assert sorted(looked) == sorted(f"s{s}" for s in range(1, 40, 4))
