"""The store is owner-only whatever the umask: directory 0700, every file 0600,
compaction's replacement files included; ``convmem health`` warns on stderr
when an existing store is open to group or others."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
from pathlib import Path

import anyio
import pytest

from tools import _proc
from tools._checks import private_violations
from tools.mcp_client import call, ok, served

UNDER_UMASK_0 = """
import os, sys
os.umask(0)
from eventstore.events import Metadata
from server.service import MemoryService
service = MemoryService(sys.argv[1])
try:
    ids = [service.write_message("s", "user", f"private {i} " + "word " * 400, Metadata())["message"]["message_id"]
           for i in range(int(sys.argv[2]))]
    service.update_message(ids[0], "changed", {}, None)
    service.delete_message(ids[1], None)
    if sys.argv[3] == "rebuild":
        service.rebuild()
finally:
    service.close()
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def create_under_umask_0(store: Path, messages: int = 20, rebuild: bool = True) -> None:
    done = _proc.run(_proc.python("-c", UNDER_UMASK_0, str(store), str(messages), "rebuild" if rebuild else "-"),
                     timeout=300)
    assert done.returncode == 0, done.stderr


def test_a_store_created_under_umask_0_is_owner_only_after_writes_and_compaction(tmp_path):
    store = tmp_path / "store"
    create_under_umask_0(store)
    assert mode(store) == 0o700
    files = sorted(p.name for p in store.iterdir())
    assert "data.mdb" in files and "lock.mdb" in files
    for name in files:
        assert mode(store / name) == 0o600, name
    assert private_violations(str(store)) == []
    assert not (store / "compact.tmp").exists()


@pytest.mark.anyio
async def test_compaction_files_are_owner_only_while_they_are_being_written(tmp_path):
    store = tmp_path / "store"
    create_under_umask_0(store, messages=300, rebuild=False)
    seen: list[dict[str, int]] = []
    with open(tmp_path / "server-stderr.log", "w") as errlog:
        for _attempt in range(8):
            async with served(str(store), str(tmp_path), errlog=errlog, umask=0) as (client, pid):
                await ok(client, "write_message", {"session_id": "s", "role": "user", "content": "one more"})
                async with anyio.create_task_group() as tg:
                    async def rebuild() -> None:
                        with contextlib.suppress(Exception):    # the process is stopped, then killed
                            await call(client, "rebuild_index")
                    tg.start_soon(rebuild)
                    tmp = store / "compact.tmp"
                    with anyio.move_on_after(60):
                        while not tmp.exists():
                            await anyio.sleep(0.0005)
                    if tmp.exists():
                        os.kill(pid, signal.SIGSTOP)           # freeze the compaction mid-way
                        with contextlib.suppress(FileNotFoundError):
                            seen.append({str(p.relative_to(store)): mode(p) for p in [store, tmp, *tmp.iterdir()]})
                    _proc.kill_pid(pid)                 # a stopped process dies of SIGKILL too
            if seen:
                break
    assert seen, "no compaction was caught in progress"
    for modes in seen:
        for name, bits in modes.items():
            assert bits & 0o077 == 0, (name, oct(bits))
    assert private_violations(str(store)) == []


def _health(store: Path) -> subprocess.CompletedProcess:
    return _proc.run(_proc.python("-m", "server.cli", "health", "--store", str(store)), timeout=120)


def test_convmem_health_warns_on_stderr_when_the_store_is_readable_by_others(tmp_path):
    store = tmp_path / "store"
    create_under_umask_0(store, messages=3, rebuild=False)
    os.chmod(store / "data.mdb", 0o644)
    done = _health(store)
    assert "warning" in done.stderr and str(store) in done.stderr
    assert json.loads(done.stdout)["active_messages"] == 2
    os.chmod(store, 0o755)
    assert "warning" in _health(store).stderr


def test_convmem_health_is_silent_about_a_private_store_and_opening_one_tightens_loose_modes(tmp_path):
    store = tmp_path / "store"
    create_under_umask_0(store, messages=3, rebuild=False)
    done = _health(store)
    assert done.returncode == 0
    assert "warning" not in done.stderr
    os.chmod(store, 0o755)
    os.chmod(store / "data.mdb", 0o644)
    _health(store)                  # warns, and opening the store puts the modes back
    assert private_violations(str(store)) == []
