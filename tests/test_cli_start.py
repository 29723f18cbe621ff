"""``convmem`` refusing at start what it cannot run with: a store path that can
never hold a store (``serve`` included, on either transport), an empty
``--store``, and a log level from the environment that is not one.  Each is a
usage error: exit 2, one line naming what is wrong, no traceback.  Real
processes throughout."""

from __future__ import annotations

import os
import subprocess

import pytest

from tools import _proc

TIMEOUT = 60


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_proc.python("-m", "server.cli", *args), cwd=_proc.REPO, capture_output=True,
                          encoding="utf-8", errors="replace", timeout=TIMEOUT, input="",
                          env={**os.environ, **(env or {})})


@pytest.fixture
def under_a_file(tmp_path) -> str:
    (tmp_path / "afile").write_text("not a directory")
    return str(tmp_path / "afile" / "sub")


@pytest.mark.parametrize("transport", [(), ("--http", "127.0.0.1:0")], ids=["stdio", "http"])
def test_serve_on_a_path_under_a_file_exits_2_at_start_naming_the_path_and_the_cause(under_a_file, transport):
    done = cli("serve", "--store", under_a_file, *transport)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert f"convmem: cannot create the store directory {under_a_file}: Not a directory" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs a Linux /proc")
def test_serve_on_a_path_in_proc_exits_2_at_start_naming_the_path_and_the_cause():
    done = cli("serve", "--store", "/proc/nope")
    assert done.returncode == 2, done.stderr
    assert "convmem: cannot create the store directory /proc/nope: " in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("command", ["serve", "status", "token"])
def test_an_empty_store_path_is_refused_rather_than_taken_for_the_default(tmp_path, command, where):
    default = tmp_path / "default-store"
    store = ["--store", ""]
    args = [*store, command] if where == "before" else [command, *store]
    done = cli(*args, env={"CONVMEM_STORE": str(default), "HOME": str(tmp_path)})
    assert done.returncode == 2, done.stderr
    assert "--store: must name a directory" in done.stderr
    assert "Traceback" not in done.stderr
    assert not default.exists()


@pytest.mark.parametrize("level", ["bogus", "info ", "0"])
def test_a_log_level_from_the_environment_that_is_not_one_is_a_usage_error(store_path, level):
    done = cli("status", "--store", store_path, env={"CONVMEM_LOG_LEVEL": level})
    assert done.returncode == 2, done.stderr
    assert "CONVMEM_LOG_LEVEL: must be one of DEBUG, INFO, WARNING, ERROR" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_log_level_from_the_environment_in_any_case_is_taken(store_path):
    done = cli("status", "--store", store_path, env={"CONVMEM_LOG_LEVEL": "warning"})
    assert "CONVMEM_LOG_LEVEL" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("transport", [(), ("--http", "127.0.0.1:0")], ids=["stdio", "http"])
def test_serve_on_a_store_that_cannot_be_opened_exits_2_before_serving(tmp_path, transport):
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    (store / "data.mdb").write_bytes(b"not an LMDB file " * 4096)
    done = cli("serve", "--store", str(store), *transport)
    assert done.returncode == 2, done.stderr
    assert f"convmem: cannot open the store at {store}: CORRUPT_STORE: " in done.stderr
    assert "serving MCP" not in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_token_file_that_cannot_be_read_or_created_is_named_not_a_traceback(under_a_file, tmp_path):
    for args, where in ((("token", "--store", under_a_file), under_a_file + ".http-token"),
                        (("token", "--store", str(tmp_path / "s"), "--token-file", str(tmp_path / "none")),
                         str(tmp_path / "none"))):
        done = cli(*args)
        assert done.returncode == 2, done.stderr
        assert f"convmem: cannot read or create the token file {where}: " in done.stderr
        assert "Traceback" not in done.stderr
