"""The bulk writer: re-runs add nothing (a grown transcript only its new
turns), a dry run writes nothing, the bulk path leaves the read models with
the same bytes as writing one message per transaction and as a replay, and
the CLI reports what it did without a traceback."""

from __future__ import annotations

import json
import os
import random
import shutil

import import_samples as samples
import pytest

from eventstore.errors import ValidationError
from eventstore.store import EventStore
from projections.index import IndexConfig
from projections.registry import Projector
from server import cli
from server.importers import Options, run_import
from server.importers.turns import MAX_CONTENT, Report, import_id
from server.importers.writer import Writer
from server.maintenance import dump_projections

SMALL = IndexConfig(merge_at=8, chunk=4, build_batch=16)      # many merges and chunks in a small store


def everything(root: str) -> list[tuple[str, list[str]]]:
    """Every source's sample files under ``root``."""
    return [("claude-code", [samples.claude_code(os.path.join(root, "cc"))]),
            ("codex", [samples.codex(os.path.join(root, "codex"))]),
            ("chatgpt", [samples.chatgpt(os.path.join(root, "gpt"), as_zip=True)]),
            ("claude-ai", [samples.claude_ai(os.path.join(root, "cai"))]),
            ("memory-jsonl", [samples.memory_jsonl(os.path.join(root, "mem"))])]


def long_session(root: str, turns: int) -> str:
    """A Claude Code transcript of ``turns`` user/assistant/tool lines."""
    lines = []
    for n in range(turns):
        ts = f"2026-02-01T10:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
        if n % 3 == 2:
            lines.append(samples._cc(f"t{n}", None, "user", [
                {"type": "tool_result", "tool_use_id": f"toolu_{n - 1}", "content": f"output {n} of grep deploy"}],
                ts))
        elif n % 3 == 1:
            lines.append(samples._cc(f"t{n}", None, "assistant", [
                {"type": "text", "text": f"step {n}: look at the retry budget"},
                {"type": "tool_use", "id": f"toolu_{n}", "name": "Grep", "input": {"pattern": f"retry{n}"}}], ts))
        else:
            lines.append(samples._cc(f"t{n}", None, "user", f"question {n} about deploy timeouts", ts))
    return samples._lines(os.path.join(root, "p", "long.jsonl"), lines)


def import_all(store: EventStore, sources: list[tuple[str, list[str]]], options: Options) -> list[dict]:
    return [run_import("", source, paths, options, store=store) for source, paths in sources]


def test_bulk_import_leaves_the_same_read_model_bytes_as_one_message_per_transaction(tmp_path):
    root = str(tmp_path / "src")
    long_session(root, 300)
    sources = everything(root)
    dumps = []
    for name, options in (("bulk", Options(batch=50)), ("single", Options(batch=1, bulk=False))):
        with EventStore(str(tmp_path / name), Projector(SMALL), rng=random.Random(3)) as store:
            import_all(store, sources, options)
            run_import("", "claude-code", [os.path.join(root, "p")], options, store=store)
            dumps.append(dump_projections(store))
    assert dumps[0] == dumps[1]
    assert len(dumps[0]["history"]) > 300


def test_bulk_imported_read_models_equal_their_replay(tmp_path):
    root = str(tmp_path / "src")
    long_session(root, 120)
    sources = everything(root)
    with EventStore(str(tmp_path / "s"), Projector(SMALL), rng=random.Random(5)) as store:
        import_all(store, sources, Options(batch=40))
        run_import("", "claude-code", [os.path.join(root, "p")], Options(batch=40), store=store)
        live = dump_projections(store)
        store.rebuild_projections()
        assert dump_projections(store) == live


def test_importing_the_same_files_twice_adds_nothing(tmp_path):
    sources = everything(str(tmp_path / "src"))
    with EventStore(str(tmp_path / "s"), Projector(SMALL)) as store:
        first = import_all(store, sources, Options(batch=7))
        before = dump_projections(store)
        with store.read() as tx:
            last = store.last_sequence(tx)
        again = import_all(store, sources, Options(batch=7))
        with store.read() as tx:
            assert store.last_sequence(tx) == last
        assert dump_projections(store) == before
    assert [r["written"] for r in again] == [0] * 5
    assert [r["already_present"] for r in again] == [r["written"] for r in first]


def test_a_transcript_that_grew_imports_only_its_new_turns(tmp_path, store_path):
    root = samples.claude_code(str(tmp_path / "projects"), truncated_tail=False)
    path = os.path.join(root, "-home-ada-shop", f"{samples.SID}.jsonl")
    first = run_import(store_path, "claude-code", [root])
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(samples._cc("u10", "u8", "user", "one more question", "2026-01-20T12:00:00Z")) + "\n")
        fh.write(json.dumps(samples._cc("u11", "u10", "assistant", [
            {"type": "tool_use", "id": "toolu_01C", "name": "Bash", "input": {"command": "ls"}}],
            "2026-01-20T12:00:01Z")) + "\n")
    second = run_import(store_path, "claude-code", [root])
    assert second["written"] == 2 and second["already_present"] == first["written"]
    # a result whose call was imported by the earlier run still finds it
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(samples._cc("u12", "u11", "user", [
            {"type": "tool_result", "tool_use_id": "toolu_01C", "content": "a.txt"}], "2026-01-20T12:00:02Z")) + "\n")
    run_import(store_path, "claude-code", [root])
    with EventStore(store_path, Projector()) as store, store.read() as tx:
        from projections import history, messages
        sid = f"claude-code:{samples.SID}"
        states = [messages.get(tx, m) for m in history.after(tx, sid, None, 100)]
        by_id = {s.metadata.source_message_ids[0]: s for s in states if s is not None}
    result, call = by_id[import_id(sid, "tool_result:toolu_01C")], by_id[import_id(sid, "tool_use:toolu_01C")]
    assert result.metadata.relations == (("depends_on", call.message_id),)


def test_a_dry_run_counts_and_writes_nothing(tmp_path, store_path):
    root = samples.claude_code(str(tmp_path / "projects"))
    dry = run_import(store_path, "claude-code", [root], Options(dry_run=True))
    real = run_import(store_path, "claude-code", [root])
    assert dry["dry_run"] and dry["written"] == real["written"] > 0 and real["already_present"] == 0


def test_content_over_one_mebibyte_is_truncated_with_a_marker(tmp_path, store_path):
    big = "x" * (MAX_CONTENT + 5000)
    samples._lines(str(tmp_path / "p" / "big.jsonl"), [samples._cc("b1", None, "user", big, "2026-01-01T00:00:00Z")])
    run_import(store_path, "claude-code", [str(tmp_path / "p")])
    with EventStore(store_path, Projector()) as store, store.read() as tx:
        from projections import history, messages
        (mid,) = history.after(tx, f"claude-code:{samples.SID}", None, 10)
        content = messages.content(tx, messages.get(tx, mid))
    assert len(content.encode()) <= MAX_CONTENT
    kept = len(content.split("\n[convmem import")[0])
    assert content.endswith(f"\n[convmem import: truncated, {len(big) - kept} more bytes in the source]")


def test_files_that_cannot_be_read_are_reported_not_raised(tmp_path, store_path):
    missing = str(tmp_path / "nope.jsonl")
    garbage = tmp_path / "garbage.zip"
    garbage.write_bytes(b"PK\x03\x04 not really a zip")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x01\n")
    cc = run_import(store_path, "claude-code", [missing, str(binary)])
    gpt = run_import(store_path, "chatgpt", [str(garbage)])
    assert cc["skips"] == [f"{missing}: cannot read the file (No such file or directory)",
                           f"{binary}:1: not valid JSON"]
    assert len(gpt["skips"]) == 1 and gpt["skips"][0].startswith(str(garbage))


def test_the_cli_imports_prints_a_summary_and_exits_1_when_lines_were_skipped(tmp_path, capsys):
    root = samples.claude_code(str(tmp_path / "projects"))
    store = str(tmp_path / "store")
    assert cli.main(["import", "claude-code", root, "--store", store]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"import claude-code into {store}: 2 files, 14 turns; wrote 14 messages" in err
    assert "Traceback" not in err and f"{samples.SID}.jsonl:15: not valid JSON" in err
    clean = str(tmp_path / "clean")
    shutil.copytree(os.path.join(root, "-home-ada-shop", samples.SID), clean)
    assert cli.main(["import", "claude-code", clean, "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["already_present"] == 4


def test_the_cli_refuses_an_unknown_source(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["import", "myspace", "x"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_a_dry_run_creates_no_store_and_finding_no_file_exits_1(tmp_path, capsys):
    root = samples.claude_code(str(tmp_path / "projects"))
    store = str(tmp_path / "store")
    assert cli.main(["import", "claude-code", root, "--store", store, "--dry-run"]) == 1
    assert "would write 14 messages" in capsys.readouterr().err
    assert not os.path.exists(store)
    (tmp_path / "empty").mkdir()
    assert cli.main(["import", "codex", str(tmp_path / "empty"), "--store", store]) == 1
    assert f"no codex files found in {tmp_path / 'empty'}" in capsys.readouterr().err


def test_lone_surrogates_become_replacement_characters_and_cuts_keep_whole_characters():
    from server.importers.turns import Turn, cut
    turn = Turn("s\udc00", "k", "user", "a\ud800b", 0, ("t\ud800",))
    assert (turn.session_id, turn.content, turn.tags) == ("s\ufffd", "a\ufffdb", ("t\ufffd",))
    assert cut("héllo", 2) == "h" and cut("héllo", 3) == "hé"


def test_a_relation_to_a_turn_later_in_the_same_batch_is_kept_and_the_log_is_that_of_ids_given_first(tmp_path):
    """A result line before its call's line (out of order in the file): the
    writer holds the turns from the result on and appends them when the
    batch's ids are all known, the events being those of giving every turn
    its id first."""
    lines = [samples._cc("u1", None, "user", "first question", "2026-01-20T12:00:00Z"),
             samples._cc("u2", "u1", "user", [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "ok"}],
                         "2026-01-20T12:00:01Z"),
             samples._cc("u3", "u2", "user", "in between", "2026-01-20T12:00:02Z"),
             samples._cc("u4", "u3", "assistant", [{"type": "tool_use", "id": "toolu_9", "name": "Bash",
                                                    "input": {"command": "ls"}}], "2026-01-20T12:00:03Z"),
             samples._cc("u5", "u4", "user", "after", "2026-01-20T12:00:04Z")]
    path = samples._lines(str(tmp_path / "src" / "x.jsonl"), lines)
    with EventStore(str(tmp_path / "s"), Projector(SMALL), rng=random.Random(1)) as store:
        run_import("", "claude-code", [path], Options(), store=store)
        with store.read() as tx:
            events = [event.message for _, event, _ in store.iter_events(tx)]
    by_key = {m.metadata.source_message_ids[0]: m for m in events}
    sid = f"claude-code:{samples.SID}"
    result, call = by_key[import_id(sid, "tool_result:toolu_9")], by_key[import_id(sid, "tool_use:toolu_9")]
    assert result.metadata.relations == (("depends_on", call.message_id),)
    assert [m.content for m in events] == ["first question", "ok", "in between",
                                           '[tool_use Bash]\n{"command": "ls"}', "after"]
    assert [m.message_id for m in events] == sorted(m.message_id for m in events)


def test_an_imports_transactions_share_one_second_process_stopped_when_the_import_ends(tmp_path, monkeypatch):
    from projections.index import worker
    started = []
    real = worker.subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]
    monkeypatch.setattr(worker.subprocess, "Popen", popen)
    root = str(tmp_path / "src")
    path = long_session(root, 300)
    dumps = []
    for name, second in (("apart", True), ("here", False)):
        config = IndexConfig(merge_at=8, chunk=4, build_batch=16, second_process=second)
        with EventStore(str(tmp_path / name), Projector(config), rng=random.Random(3)) as store:
            summary = run_import("", "claude-code", [path], Options(batch=50, apart=False), store=store)
            dumps.append(dump_projections(store))
        assert summary["written"] > 300             # several transactions of 50
    assert dumps[0] == dumps[1]
    assert len(started) == 1                            # six transactions, one process
    assert started[0].poll() is not None                # stopped with the import


class RecordingCommitter:
    """A committer (:class:`eventstore.committer.Submits`) that runs each command in the
    store's transaction and records how it was submitted."""

    def __init__(self, store: EventStore) -> None:
        self.store, self.submitted = store, []

    def submit(self, command, *, bulk: bool = False):
        self.submitted.append(bulk)
        return self.store.execute(command, bulk=bulk)


def test_every_batch_of_an_import_is_submitted_to_the_committer_given(tmp_path):
    root = samples.claude_code(str(tmp_path / "cc"))
    with EventStore(str(tmp_path / "s"), Projector()) as store:
        committer = RecordingCommitter(store)
        summary = run_import("", "claude-code", [root], Options(progress=False, batch=2), store=store,
                             committer=committer)
        with store.read() as tx:
            written = store.last_sequence(tx)
    assert summary["written"] == written > 2
    assert committer.submitted == [True] * -(-summary["written"] // 2)      # every batch, in bulk


def test_an_import_never_writes_a_replicated_nodes_files_behind_the_stream(tmp_path, capsys):
    """A node's store is written through its stream only: without a committer the writer
    refuses it; ``run_import`` and the CLI look for the stream, and when the store does not
    say where it is (nor ``--replicate``), refuse, naming the option; nothing is written."""
    from server.replication.apply import Position, write_position
    path = str(tmp_path / "node")
    with EventStore(path, Projector()) as store:       # what a node of a stream holds in its meta
        store.maintain(lambda w: write_position(w, Position(1, 0)), "test")
        with pytest.raises(ValidationError, match="^store: is a node of a replicated store"):
            Writer(store, Report("claude-code"))
    root = samples.claude_code(str(tmp_path / "cc"))
    with pytest.raises(ValidationError, match="^--replicate: required: the store is a node of a replicated store"):
        run_import(path, "claude-code", [root], Options(progress=False))
    assert cli.main(["--store", path, "import", "claude-code", root]) == 2
    assert "--replicate: required: the store is a node of a replicated store" in capsys.readouterr().err
    with EventStore(path, Projector()) as store, store.read() as tx:
        assert store.last_sequence(tx) == 0
