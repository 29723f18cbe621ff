"""A replay builds search records in a second process: the same bytes as built in place."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import open_service, write

from projections.index import IndexConfig, worker
from projections.index.gather import gather
from tools.replay import dump_projections

WORDS = ["deploy", "billing", "東京の天気", "ERR_CONN_RESET", "retries", "the", "backoff"]


# Batches of 4 messages, small merges, and a second process whatever the CPUs.
SMALL = IndexConfig(build_batch=4, backlog=10**9, merge_at=6, second_process=True)   # every batch goes out


def _build(path: str, config: IndexConfig = SMALL) -> dict:
    """A store with written, updated and deleted messages; its live read models."""
    svc = open_service(path, index_config=config)
    try:
        ids = [write(svc, " ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 5 + 1)) + f" n{i}",
                     session=f"s{i % 3}", tags=("ops",) if i % 2 else ())
               for i in range(40)]
        svc.update_message(ids[2], "billing moved", {}, None)
        svc.update_message(ids[30], None, {"summary": "a summary", "tags": ("release",)}, None)
        svc.delete_message(ids[5], None)
        svc.delete_message(ids[38], None)
        write(svc, "written after the deletes")
        return dump_projections(svc.store)
    finally:
        svc.close()


def _replayed(path: str, config: IndexConfig = SMALL) -> dict:
    svc = open_service(path, index_config=config)
    try:
        svc.store.rebuild_projections()
        return dump_projections(svc.store)
    finally:
        svc.close()


@pytest.fixture
def small_batches(monkeypatch):
    """Every frame the replay's second process sends back (with the SMALL config)."""
    loaded = []
    real = worker.loaded
    monkeypatch.setattr(worker, "loaded", lambda frame: loaded.append(frame) or real(frame))
    return loaded


@pytest.fixture
def every_answer(monkeypatch):
    """The end of a replay waits for every batch sent, taking none back."""
    monkeypatch.setattr(worker.Builder, "_take_back", lambda self, w: w.sent)


def test_records_built_in_a_second_process_replay_to_the_live_bytes(tmp_path, small_batches, every_answer):
    live = _build(str(tmp_path / "s"))
    assert _replayed(str(tmp_path / "s")) == live
    assert len(small_batches) == 10            # 41 written messages: 10 whole batches went out


def test_at_its_end_a_replay_gathers_the_batches_its_second_process_has_not_reached(
        tmp_path, small_batches, monkeypatch):
    """The second process starts late: of the 10 batches sent, the replay
    waits for the first alone and gathers the other 9 itself, last first
    (after the last, short one, which is never sent)."""
    live = _build(str(tmp_path / "s"))
    real = subprocess.Popen
    started = []

    def late(args, **kwargs):
        started.append(real([*args[:2], "import time; time.sleep(1); " + args[2], *args[3:]], **kwargs))
        return started[-1]
    monkeypatch.setattr(worker.subprocess, "Popen", late)
    taken = []
    real_gather = worker.gather
    monkeypatch.setattr(worker, "gather", lambda items: taken.append(items[0][0]) or real_gather(items))
    assert _replayed(str(tmp_path / "s")) == live
    assert len(small_batches) == 1 and taken == [45, 37, 33, 29, 25, 21, 17, 13, 9, 5]
    assert started and started[0].poll() is not None      # stopped: it still worked on those taken back


@pytest.mark.parametrize("backlog", [-1, 0, 1])
def test_batches_gathered_here_while_the_second_process_is_busy_replay_to_the_live_bytes(
        tmp_path, small_batches, monkeypatch, backlog):
    live = _build(str(tmp_path / "s"))
    assert _replayed(str(tmp_path / "s"), replace(SMALL, backlog=backlog)) == live
    if backlog < 0:
        assert small_batches == []                # -1: never sent, all gathered here
    else:
        assert 1 <= len(small_batches) <= 10


def test_a_replay_whose_second_process_cannot_start_builds_every_record_in_place(tmp_path, small_batches,
                                                                                monkeypatch):
    live = _build(str(tmp_path / "s"))

    def refuse(*args, **kwargs):
        raise OSError("no processes here")
    monkeypatch.setattr(worker.subprocess, "Popen", refuse)
    assert _replayed(str(tmp_path / "s")) == live
    assert small_batches == []


def test_a_damaged_batch_from_the_second_process_is_built_in_place(tmp_path, small_batches, monkeypatch,
                                                                  every_answer):
    live = _build(str(tmp_path / "s"))
    monkeypatch.setattr(worker, "loaded", lambda frame: small_batches.append(frame) or None)
    assert _replayed(str(tmp_path / "s")) == live
    assert len(small_batches) == 10


def test_a_record_needed_before_its_batch_returns_is_built_in_place(tmp_path, small_batches):
    """An update or delete in the log reaches a message still in a batch; the replay builds it then."""
    path = str(tmp_path / "s")
    svc = open_service(path, index_config=SMALL)
    try:
        ids = [write(svc, f"zebra number {i}") for i in range(9)]
        svc.update_message(ids[8], "giraffe now", {}, None)       # its batch (docnos 9–12) is still open
        svc.delete_message(ids[1], None)                          # its batch went out
        live = dump_projections(svc.store)
    finally:
        svc.close()
    assert _replayed(path) == live


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(worker.__file__))))


def _serve(stdin: bytes, fingerprint: str = worker.FINGERPRINT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from projections.index.worker import serve; serve()",
                           fingerprint],
                          input=stdin, capture_output=True, cwd=ROOT, timeout=60)


def test_the_second_process_answers_each_batch_with_what_gather_makes_of_it():
    batches = [[(1, "hello world, hello", None, ()), (2, "東京の天気", "a summary", ("t", "u"))],
               [(5, "ERR_CONN_RESET again", None, ())]]
    frames = [pickle.dumps(b, 5) for b in batches]
    done = _serve(b"".join(len(f).to_bytes(4, "big") + f for f in frames))
    assert done.returncode == 0 and done.stderr == b""
    out, answers = done.stdout, []
    while out:
        n = int.from_bytes(out[:4], "big")
        answers.append(pickle.loads(out[4:4 + n]))
        out = out[4 + n:]
    assert answers == [gather(b) for b in batches]


def test_the_second_process_ends_quietly_on_a_cut_frame():
    frame = pickle.dumps([(1, "hello", None, ())], 5)
    done = _serve(len(frame).to_bytes(4, "big") + frame[:-3])
    assert done.returncode == 0 and done.stderr == b"" and done.stdout == b""


OPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(0, 40), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("update"), st.integers(0, 10**6), st.integers(0, 40) | st.none(), st.booleans()),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.none(), st.booleans())), min_size=1, max_size=45)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, batch=st.sampled_from([2, 3, 5]), backlog=st.sampled_from([-1, 0, 1, 10**9]),
       merge_at=st.sampled_from([2, 4, 7]), hold=st.sampled_from([3, 8, 10**5]), spread=st.sampled_from([0, 3]))
def test_any_log_replays_to_the_live_bytes_however_its_batches_travel(ops, batch, backlog, merge_at, hold, spread):
    config = IndexConfig(bulk_hold=hold, merge_at=merge_at, merge_spread=spread, build_batch=batch, backlog=backlog,
                         second_process=True)
    with tempfile.TemporaryDirectory() as tmp:
        svc = open_service(tmp, index_config=config)
        try:
            live_ids: list[str] = []
            for kind, a, b, flag in ops:
                if kind == "write":
                    text = " ".join(WORDS[(a + j) % len(WORDS)] for j in range(a % 4 + 1)) + f" w{a} w{a}"
                    live_ids.append(write(svc, text, session=f"s{b}", tags=("ops",) if flag else ()))
                elif live_ids and kind == "update":
                    mid = live_ids[a % len(live_ids)]
                    text = None if b is None else f"{WORDS[b % len(WORDS)]} changed u{b} u{b} u{b}"
                    svc.update_message(mid, text, {"tags": ("upd",)} if flag else {"importance": b or 1}, None)
                elif live_ids and kind == "delete":
                    svc.delete_message(live_ids.pop(a % len(live_ids)), None)
            live = dump_projections(svc.store)
            svc.store.rebuild_projections()
            assert dump_projections(svc.store) == live
        finally:
            svc.close()


def test_the_second_process_does_nothing_for_a_replay_that_loaded_other_code():
    frame = pickle.dumps([(1, "hello", None, ())], 5)
    done = _serve(len(frame).to_bytes(4, "big") + frame, fingerprint="another version")
    assert done.returncode == 0 and done.stdout == b"" and done.stderr == b""


def test_a_replay_whose_code_differs_from_the_code_on_disk_gathers_every_batch_itself(
        tmp_path, small_batches, monkeypatch):
    live = _build(str(tmp_path / "s"))
    monkeypatch.setattr(worker, "FINGERPRINT", "not what is on disk")
    assert _replayed(str(tmp_path / "s")) == live
    assert small_batches == []                  # the second process answered nothing


def _with_child(monkeypatch, script: str) -> list:
    """Make the replay start ``script`` as its second process; returns the processes."""
    started = []
    real = subprocess.Popen

    def popen(args, **kwargs):
        started.append(real([sys.executable, "-c", script], **kwargs))
        return started[-1]
    monkeypatch.setattr(worker.subprocess, "Popen", popen)
    return started


@pytest.mark.parametrize("script", [
    "import sys; sys.stdout.buffer.write(b'\\xff\\xff\\xff\\xf0'); sys.stdout.flush(); sys.stdin.read()",
    "import sys; sys.stdout.buffer.write(b'\\x00\\x00\\x00\\x09abc'); sys.stdout.flush(); sys.stdin.read()",
    "import sys; sys.stdout.buffer.write(b'\\x00\\x00\\x00\\x03abc' * 3); sys.stdout.flush(); sys.stdin.read()",
    "import time; time.sleep(600)",
], ids=["a huge frame length", "a cut frame", "frames that are not pickles", "hangs, reading nothing"])
def test_a_second_process_that_misbehaves_neither_hangs_the_replay_nor_changes_a_byte(
        tmp_path, small_batches, monkeypatch, script):
    live = _build(str(tmp_path / "s"))
    started = _with_child(monkeypatch, script)
    assert _replayed(str(tmp_path / "s"), replace(SMALL, join_wait=1.0)) == live
    assert started and all(p.poll() is not None for p in started)      # stopped, not left running


def test_a_replay_that_fails_leaves_no_second_process_behind(tmp_path, small_batches, monkeypatch):
    path = str(tmp_path / "s")
    _build(path)
    started = _with_child(monkeypatch, "import sys; sys.stdin.buffer.read()")
    real = worker.gather

    def failing(items):
        if items and items[0][0] > 20:
            raise RuntimeError("the replay fails half way")
        return real(items)
    monkeypatch.setattr(worker, "gather", failing)
    svc = open_service(path, index_config=replace(SMALL, backlog=-1))   # every batch gathered here,
    try:                                                                 # so the failure comes
        with pytest.raises(Exception):      # noqa: B017  — whatever the store translates the failure into
            svc.store.rebuild_projections()
    finally:
        svc.close()
    assert started and all(p.poll() is not None for p in started)


def test_the_second_process_starts_when_a_quarter_of_the_first_batch_is_written(monkeypatch):
    """Its start-up (~0.1 s of imports) overlaps the filling of the first batch."""
    from eventstore.events import Message
    started = []
    monkeypatch.setattr(worker.Worker, "start", staticmethod(lambda frame_max: started.append(frame_max)))
    builder = worker.Builder(IndexConfig(build_batch=8, second_process=True))
    msgs = [(d, Message(f"m{d}", "s", "user", f"text {d}", d, d)) for d in range(1, 4)]
    builder.add_many(msgs[:1])
    assert started == []                        # an eighth: a transaction this small may never fill one
    builder.add_many(msgs[1:])
    assert len(started) == 1 and builder.sent == [] and len(builder.batches[-1]) == 3


@pytest.mark.skipif(not hasattr(worker.fcntl, "F_GETPIPE_SZ"), reason="pipe sizes are Linux's")
def test_the_pipes_to_and_from_the_second_process_hold_several_frames():
    started = worker.Worker.start(1 << 20)
    assert started is not None
    try:
        for pipe in (started.proc.stdin, started.proc.stdout):
            assert worker.fcntl.fcntl(pipe.fileno(), worker.fcntl.F_GETPIPE_SZ) == worker.PIPE_SIZE
    finally:
        started.stop()


def test_the_second_process_program_serves_without_the_live_path():
    batch = [(1, "hello world, hello", None, ("t",))]
    frame = pickle.dumps(batch, 5)
    program = "import sys; " + worker.PROGRAM.replace(
        "serve()", "serve(); print(sorted(m for m in sys.modules if m.endswith(('.live', '.bulk')) or m == 'numpy'),"
                   " file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", program, worker.FINGERPRINT], cwd=ROOT, timeout=60,
                          input=len(frame).to_bytes(4, "big") + frame, capture_output=True)
    assert done.returncode == 0 and done.stderr.strip() == b"[]"
    assert pickle.loads(done.stdout[4:]) == gather(batch)


def test_a_replay_does_not_load_numpy_ma(tmp_path):
    """``np.unique`` loads ``numpy.ma`` (~25 ms of a replay's write at its end)."""
    script = ("import sys; from server.service import MemoryService; from eventstore.events import Metadata; "
              f"svc = MemoryService({str(tmp_path / 's')!r}); "
              "[svc.write_message('s', 'user', f'hello world {i} ERR_CONN_RESET', Metadata()) for i in range(300)]; "
              "svc.store.rebuild_projections(); svc.close(); print('numpy.ma' in sys.modules, 'numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [b"False", b"True"]
