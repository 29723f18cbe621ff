"""Reading a source in a second process: the same turns in the same order as
reading it in the importing process (so the same store bytes and the same
report), and a second process that cannot run is replaced by reading here."""

from __future__ import annotations

import os
import random

import pytest
from test_importers_writer import SMALL, everything, import_all, long_session

from eventstore.store import EventStore
from projections.registry import Projector
from server.importers import Options, reader, run_import
from server.maintenance import dump_projections


def imported(path: str, root: str, sources: list, apart: bool) -> tuple[dict, list[dict]]:
    options = Options(batch=40, apart=apart)
    with EventStore(path, Projector(SMALL), rng=random.Random(3)) as store:
        summaries = import_all(store, sources, options)
        summaries.append(run_import("", "claude-code", [os.path.join(root, "p")], options, store=store))
        return dump_projections(store), summaries


def test_a_source_read_in_a_second_process_gives_the_store_and_report_read_here_gives(tmp_path, monkeypatch,
                                                                                        capfd):
    root = str(tmp_path / "src")
    long_session(root, 250)
    sources = everything(root)
    monkeypatch.setattr(reader, "FRAME_ITEMS", 7)            # many frames, groups among them
    here, here_report = imported(str(tmp_path / "here"), root, sources, apart=False)
    warned_here = capfd.readouterr().err
    apart, apart_report = imported(str(tmp_path / "apart"), root, sources, apart=True)
    assert apart == here
    assert apart_report == here_report
    assert any(s["skipped"] for s in here_report)
    assert capfd.readouterr().err == warned_here              # the skips, printed by this process


def test_a_reading_process_started_on_other_code_is_replaced_by_reading_here(tmp_path, monkeypatch):
    root = str(tmp_path / "src")
    path = long_session(root, 30)
    monkeypatch.setattr(reader, "fingerprint", lambda: "other code")
    summary = run_import(str(tmp_path / "s"), "claude-code", [path], Options(apart=True))
    assert summary == run_import(str(tmp_path / "here"), "claude-code", [path], Options(apart=False))
    assert summary["written"] == 40 and summary["files"] == 1


def test_a_reading_process_that_ends_early_fails_the_import_and_a_second_run_completes_it(tmp_path, monkeypatch):
    root = str(tmp_path / "src")
    path = long_session(root, 60)
    monkeypatch.setattr(reader, "FRAME_ITEMS", 5)
    real = reader._drain

    def cut_short(pipe, frames):          # the pipe ends after three frames, as if the process died
        taken = []
        real(pipe, taken_queue(taken, 3))
        for frame in taken:
            frames.put(frame)
        frames.put(None)
    monkeypatch.setattr(reader, "_drain", cut_short)
    store = str(tmp_path / "s")
    with pytest.raises(reader.ReaderError):
        run_import(store, "claude-code", [path], Options(apart=True, batch=4))
    monkeypatch.undo()
    again = run_import(store, "claude-code", [path], Options())
    assert again["turns"] == 80 and 0 < again["already_present"] < 80
    assert again["already_present"] + again["written"] == 80


def taken_queue(taken: list, limit: int):
    class Taking:
        def put(self, frame):
            if frame is not None and len(taken) < limit:
                taken.append(frame)
    return Taking()
