"""``convmem import SOURCE`` on the command line: a source with no default
place needs a path (refused before anything is created), each source's
``--help`` offers only the options that apply to it, and counts read as
English ("1 file", "2 files")."""

from __future__ import annotations

import os

import import_samples as samples
import pytest

from server.cli import main

NO_DEFAULT = ["chatgpt", "claude-ai", "memory-jsonl"]


@pytest.mark.parametrize("source", NO_DEFAULT)
def test_a_source_with_no_default_place_and_no_path_is_refused_before_anything_is_created(
        tmp_path, monkeypatch, capsys, source):
    monkeypatch.delenv("MEMORY_FILE_PATH", raising=False)
    monkeypatch.setenv("CONVMEM_STORE", str(tmp_path / "default-store"))
    store = tmp_path / "store"
    assert main(["import", source, "--store", str(store)]) == 2
    assert main(["import", source]) == 2
    err = capsys.readouterr().err
    assert err.count(f"import {source}: name the file to import") == 2 and "Traceback" not in err
    assert os.listdir(tmp_path) == []          # no store, no convmem.gate or convmem.lock beside one


def test_memory_jsonl_reads_memory_file_path_when_it_is_set(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_FILE_PATH", samples.memory_jsonl(str(tmp_path / "graph")))
    assert main(["import", "memory-jsonl", "--store", str(tmp_path / "store")]) == 1    # the sample's bad lines
    assert "1 file, 4 turns; wrote 4 messages" in capsys.readouterr().err
    assert os.path.isdir(tmp_path / "store")


def test_a_source_with_default_places_and_no_file_there_creates_no_store(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    store = tmp_path / "store"
    assert main(["import", "claude-code", "--store", str(store)]) == 1
    assert "no claude-code files found in the default places" in capsys.readouterr().err
    assert main(["import", "codex", str(tmp_path / "home"), "--store", str(store)]) == 1
    assert not store.exists() and os.listdir(tmp_path) == ["home"]


@pytest.mark.parametrize(("source", "thinking", "branches"), [
    ("claude-code", True, False), ("codex", True, False), ("chatgpt", True, True), ("claude-ai", True, False),
    ("memory-jsonl", False, False)])
def test_each_source_offers_only_the_options_that_apply_to_it(source, thinking, branches, capsys):
    with pytest.raises(SystemExit):
        main(["import", source, "--help"])
    out = capsys.readouterr().out
    assert ("--thinking" in out, "--branches" in out) == (thinking, branches)
    assert all(option in out for option in ("--dry-run", "--batch", "--json"))
    if not branches:
        with pytest.raises(SystemExit):
            main(["import", source, "x", "--branches"])
    if source in NO_DEFAULT[:2]:
        assert "required" in out


def test_counts_of_one_are_singular(tmp_path, capsys):
    path = samples._lines(str(tmp_path / "cc" / f"{samples.SID}.jsonl"), [
        samples._cc("u1", None, "user", "hello", "2026-01-20T11:57:18.000Z"),
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {}}])
    store = str(tmp_path / "store")
    assert main(["import", "claude-code", path, "--store", store]) == 0
    err = capsys.readouterr().err
    assert "1 file, 1 turn; wrote 1 message, 0 already there, 0 updated, 1 line without a message" in err
    assert main(["export", "--store", store, "--out", str(tmp_path / "x.jsonl")]) == 0
    assert "exported 1 message from" in capsys.readouterr().err
    assert main(["import", "jsonl", str(tmp_path / "x.jsonl"), "--store", str(tmp_path / "b"), "--dry-run"]) == 0
    assert "would import 1 of 1 message into" in capsys.readouterr().err
    samples._lines(str(tmp_path / "cc" / "other.jsonl"), [samples._cc("u2", None, "user", "hi", None)])
    assert main(["import", "claude-code", str(tmp_path / "cc"), "--store", store]) == 0
    assert "2 files, 2 turns; wrote 1 message, 1 already there" in capsys.readouterr().err


def test_an_import_expands_the_paths_it_is_given_once(tmp_path, monkeypatch, capsys):
    import glob
    for name in ("a", "b"):
        samples._lines(str(tmp_path / "cc" / f"{name}.jsonl"), [
            samples._cc(f"u{name}", None, "user", "hello", "2026-01-20T11:57:18.000Z")])
    globbed: list[str] = []
    real = glob.glob

    def counted(pattern, **kwargs):
        globbed.append(pattern)
        return real(pattern, **kwargs)
    monkeypatch.setattr(glob, "glob", counted)
    assert main(["import", "claude-code", str(tmp_path / "cc"), "--store", str(tmp_path / "store")]) == 0
    assert "2 files, 2 turns; wrote 2 messages" in capsys.readouterr().err
    assert globbed == [os.path.join(str(tmp_path / "cc"), "**", "*.jsonl")]
