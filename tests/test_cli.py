"""The ``convmem`` command as a person meets it: stopping ``serve`` with Ctrl-C
or SIGTERM, read-only commands that never create a store, a closed pipe, global
options after the subcommand, a store path that is a file, and the read
commands on a pipe and as JSON.  Real processes throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from strategies import open_service, write
from test_mcp_stdio import RawServer, write_args

from server.service import MemoryService
from tools import _proc

TIMEOUT = 60


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _proc.run(_proc.python("-m", "server.cli", *args))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_cleanly_on_sigint_and_sigterm_and_keeps_every_acknowledged_write(store_path, tmp_path, sig):
    server = RawServer(store_path, tmp_path / "stderr.log")
    try:
        server.initialize()
        acked = [server.call("write_message", write_args(f"kept {i}"))[1]["message"]["message_id"] for i in range(3)]
        server.proc.send_signal(sig)
        assert server.proc.wait(timeout=TIMEOUT) == 0        # a bound against hanging, not a timing assertion
    finally:
        server.kill()
    log = (tmp_path / "stderr.log").read_text()
    assert f"{sig.name} received: stopping" in log and "Traceback" not in log
    service = MemoryService(store_path)
    try:
        assert not service.store.recovered_tail
        history = service.history("s", 10, None)["history"]
    finally:
        service.close()
    assert [m["message_id"] for m in history] == acked


def test_serve_on_a_terminal_stops_on_ctrl_c_without_waiting_for_input(store_path):
    """The defect: on a terminal, stdin was read in a thread that Ctrl-C could not stop."""
    master, slave = os.openpty()
    try:
        proc = _proc.start(_proc.python("-m", "server.cli", "serve", "--store", store_path),
                           stdin=slave, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(slave)
        assert b"store open" in proc.stderr.readline()       # serving, its stdin a terminal with no input
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=TIMEOUT) == 0
        proc.stderr.close()
    finally:
        os.close(master)


@pytest.mark.parametrize("command", [["health"], ["status"], ["replay"], ["export"], ["sessions"],
                                     ["history", "s"], ["search", "x"], ["show", "01M8S3A2BNY1QPFZ81KJJ6A67X"],
                                     ["backup", "/nonexistent-parent-dir-for-test/b"]])
def test_a_read_only_command_on_a_missing_store_names_the_path_exits_2_and_creates_nothing(tmp_path, command):
    missing = tmp_path / "typo"
    done = cli(*command, "--store", str(missing))
    if command[0] == "backup":
        assert done.returncode == 2 and "no such directory" in done.stderr
    else:
        assert done.returncode == 2, done.stderr
        assert f"no store at {missing}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not missing.exists()


@pytest.mark.parametrize("command", [["serve"], ["health"], ["import", "jsonl", "f"]])
def test_a_store_path_that_is_a_file_is_refused_naming_it_and_what_to_do(tmp_path, command):
    path = tmp_path / "afile"
    path.write_text("")
    done = cli(*command, "--store", str(path))
    assert done.returncode == 2
    assert f"{path} is a file, not a store directory" in done.stderr and "--store" in done.stderr
    assert "Traceback" not in done.stderr


def test_health_piped_into_a_reader_that_stops_early_ends_without_a_traceback(store_path):
    MemoryService(store_path).close()
    pipeline = f"{sys.executable} -m server.cli health --store {store_path} | head -1"
    done = subprocess.run(["/bin/sh", "-c", pipeline], cwd=_proc.REPO, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.stdout == "{\n"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


@pytest.mark.parametrize("command", [["health"], ["status"], ["sessions"], ["export"]])
def test_a_command_whose_reader_is_gone_before_it_writes_exits_141_quietly(store_path, command):
    """Deterministic: the pipe's read end is closed before the command starts."""
    svc = open_service(store_path)
    write(svc, "something")
    svc.close()
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(_proc.python("-m", "server.cli", *command, "--store", store_path), cwd=_proc.REPO,
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_global_options_work_after_the_subcommand_too(store_path):
    MemoryService(store_path).close()
    done = cli("health", "--store", store_path, "--log-level", "debug")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["store"] == store_path and report["status"] == "OK"
    assert cli("--store", store_path, "health").returncode == 0
    assert cli("--version").stdout.startswith("convmem ")


def test_a_conflict_says_what_the_current_revision_is(service):
    from eventstore.errors import ConflictError
    mid = write(service, "v1")
    service.update_message(mid, "v2", {}, None)
    with pytest.raises(ConflictError, match=r"current revision \(2\)"):
        service.update_message(mid, "v3", {}, 1)


def test_the_read_commands_print_plain_text_when_piped_and_the_tools_json_with_json(store_path):
    svc = open_service(store_path)
    first = write(svc, "Deploys go out on Tuesdays", session="project-x")
    second = write(svc, "Noted: deploy day is Tuesday", session="project-x", role="assistant",
                   relations=(("derived_from", first),))
    svc.close()
    found = cli("search", "deploy", "--store", store_path)
    assert found.returncode == 0 and "\x1b[" not in found.stdout
    assert second in found.stdout and "Noted: deploy day is Tuesday" in found.stdout
    as_json = json.loads(cli("search", "deploy", "--json", "--store", store_path).stdout)
    assert {r["message_id"] for r in as_json["results"]} == {first, second}
    history = cli("history", "project-x", "--store", store_path)
    assert history.stdout.index("Deploys go out") < history.stdout.index("Noted: deploy")
    assert [m["message_id"] for m in json.loads(cli("history", "project-x", "--json", "--store", store_path).stdout)] \
        == [first, second]
    sessions = json.loads(cli("sessions", "--json", "--store", store_path).stdout)
    assert [s["session_id"] for s in sessions] == ["project-x"]
    shown = cli("show", second, "--store", store_path)
    assert "derived_from" in shown.stdout and first in shown.stdout
    assert cli("show", "not-an-id", "--store", store_path).returncode == 2
    status = cli("status", "--store", store_path)
    assert status.returncode == 0 and store_path in status.stdout and "Nothing to do." in status.stdout


def test_serve_with_stdin_closed_says_so_instead_of_a_traceback(store_path):
    done = subprocess.run(["/bin/sh", "-c", f"exec {sys.executable} -m server.cli serve --store {store_path} <&-"],
                          cwd=_proc.REPO, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2
    assert "stdin or stdout is closed" in done.stderr and "Traceback" not in done.stderr


def test_replay_and_backup_write_no_progress_bar_into_a_log_file(store_path, tmp_path):
    svc = open_service(store_path)
    for i in range(3):
        write(svc, f"message {i}")
    svc.close()
    for command in (["replay"], ["replay", "--verify"], ["backup", str(tmp_path / "b")]):
        done = subprocess.run(_proc.python("-m", "server.cli", *command, "--store", store_path), cwd=_proc.REPO,
                              capture_output=True, timeout=TIMEOUT)      # bytes: text mode would translate \r
        assert done.returncode == 0, done.stderr
        assert b"\r" not in done.stderr and b"\x1b[" not in done.stderr
        assert store_path.encode() in done.stderr
