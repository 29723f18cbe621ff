"""A full disk: every failing write is IO_ERROR, nothing acknowledged is lost,
reads keep working, health says DEGRADED until space returns.

The store runs on a small filesystem: a 3 MiB tmpfs the test mounts (we may
run as root), holding a filler file created beforehand; deleting the filler is
"space returns".  Where mounting is not allowed the same scenario runs in a
subprocess under ``RLIMIT_FSIZE`` (SIGXFSZ ignored, so writes past the limit
fail with EFBIG), and raising the limit is "space returns".  Everything goes
through the SDK's in-memory MCP client.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from mcp import Client

from server.app import build_server
from tools import _proc

TESTS = str(Path(__file__).resolve().parent)
TMPFS_SIZE = "3m"
FILLER_BYTES = 1 << 20
WORDS = "lorem ipsum dolor sit amet " * 260 + " ".join(f"w{i:03d}" for i in range(40))    # ~7 KB


# ----------------------------------------------------------------- helpers
def _body(result) -> tuple[bool, dict]:
    return bool(result.is_error), json.loads(result.content[0].text)


class Session:
    """A connected in-memory client plus the model of what was acknowledged."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.live: dict[str, str] = {}        # message id -> content
        self.io_errors: list[str] = []

    async def call(self, name: str, args: dict | None = None) -> tuple[bool, dict]:
        return _body(await self.client.call_tool(name, args or {}))

    async def health(self) -> dict:
        is_error, out = await self.call("get_system_health")
        assert not is_error, out
        return out

    async def attempt(self, name: str, args: dict) -> dict | None:
        """One state-changing call on a nearly full disk: OK, or IO_ERROR that changed nothing."""
        before = await self.health()
        is_error, out = await self.call(name, args)
        if not is_error:
            return out
        assert out["error"]["code"] == "IO_ERROR", out
        assert out["error"]["message"]
        self.io_errors.append(out["error"]["message"])
        after = await self.health()
        for key in ("last_sequence", "io", "active_messages", "session_count", "deleted_messages"):
            assert after[key] == before[key], key
        assert after["status"] == "DEGRADED"
        assert after["last_error"] == out["error"]["message"]
        return None

    async def write(self, n: int) -> bool:
        content = f"note{n:05d} {WORDS}"
        out = await self.attempt("write_message", {"session_id": f"s{n % 3}", "role": "user", "content": content})
        if out is None:
            return False
        self.live[out["message"]["message_id"]] = content
        return True

    async def read_back(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for sid in ("s0", "s1", "s2"):
            cursor = None
            while True:
                args = {"session_id": sid, "limit": 100, **({"cursor": cursor} if cursor else {})}
                is_error, out = await self.call("read_messages", args)
                assert not is_error, out
                found.update({m["message_id"]: m["content"] for m in out["history"]})
                cursor = out.get("nextCursor")
                if not cursor:
                    break
        return found


async def fill_until_full(store: str, make_room: Callable[[], None], try_rebuild: bool = False) -> dict:
    """The whole scenario; returns figures for the caller to report.

    ``try_rebuild`` also runs ``rebuild_index`` on the full disk (not on a full
    tmpfs: see test_rebuild_index_on_a_full_filesystem_answers_io_error_instead_of_crashing).
    """
    async with Client(build_server(store)) as client:
        s = Session(client)
        n = 0
        while await s.write(n):
            n += 1
            assert n < 5000, "the small filesystem never filled up"
        full_at = n
        # More state-changing commands on the full disk: each is OK or IO_ERROR, nothing else.
        for i in range(12):
            ids = list(s.live)
            if i % 3 == 0:
                await s.write(n + 1 + i)
            elif i % 3 == 1:
                mid = ids[i % len(ids)]
                if await s.attempt("update_message", {"message_id": mid, "content": f"changed {i} {WORDS}"}):
                    s.live[mid] = f"changed {i} {WORDS}"
            else:
                mid = ids[-i % len(ids)]
                if await s.attempt("delete_message", {"message_id": mid}) == {"status": "OK"}:
                    del s.live[mid]
        await s.write(n + 100)                    # leave the store degraded by a failing write
        health = await s.health()
        assert health["status"] == "DEGRADED"
        assert health["last_error"]
        reason = health["last_error"]
        # Reads keep working and show exactly what was acknowledged.
        assert await s.read_back() == s.live
        is_error, found = await s.call("search_messages", {"query": "note00000"})
        assert not is_error and found["results"][0]["message_id"] == list(s.live)[0]
        is_error, chunk = await s.call("read_messages", {"view": "content", "message_id": list(s.live)[0],
                                                        "content_limit": 16})
        assert not is_error and chunk["content_range"]["content"] == s.live[list(s.live)[0]][:16]
        if try_rebuild:     # a compaction that cannot write its new file leaves the old store whole
            is_error, out = await s.call("rebuild_index")
            if is_error:
                assert out["error"]["code"] == "IO_ERROR", out
                assert not os.path.exists(os.path.join(store, "compact.tmp"))
            assert await s.read_back() == s.live
        # Space returns: writes succeed again and health clears.
        make_room()
        assert await s.write(n + 200)
        health = await s.health()
        assert health["status"] == "OK"
        assert health["last_error"] == ""
        assert health["active_messages"] == len(s.live)
        model, io_errors = dict(s.live), len(s.io_errors)
    async with Client(build_server(store)) as client:       # a restart loses nothing either
        s = Session(client)
        assert await s.read_back() == model
        health = await s.health()
        assert health["status"] == "OK" and health["snapshot_valid"] is True
        assert health["active_messages"] == len(model)
    return {"acknowledged_before_full": full_at, "io_errors": io_errors, "reason": reason}


# -------------------------------------------------------- small filesystems
@contextlib.contextmanager
def tmpfs(path: Path):
    """A size-limited tmpfs at ``path``, or None when mounting is not allowed."""
    path.mkdir()
    try:
        done = _proc.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(path)],
                         timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        yield None
        return
    if done.returncode != 0:
        yield None
        return
    try:
        yield path
    finally:
        _proc.run(["umount", "-l", str(path)], timeout=30)


def rlimit_main(store: str) -> None:
    """Entry point of the RLIMIT_FSIZE variant (runs in a subprocess)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def make_room() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))

    async def main() -> dict:
        async with Client(build_server(store)):
            pass                                    # create the store with room to spare
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(os.path.join(store, "data.mdb")) + 2 * FILLER_BYTES,
                                                   hard))
        return await fill_until_full(store, make_room, try_rebuild=True)
    print(json.dumps(anyio.run(main)))


def run_under_rlimit(store: Path) -> dict:
    module = Path(__file__).stem
    code = f"import sys; sys.path.insert(0, {TESTS!r}); import {module} as t; t.rlimit_main({str(store)!r})"
    done = _proc.run(_proc.python("-c", code), timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# -------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def full_disk_figures(tmp_path_factory) -> dict:
    """The scenario on a tmpfs (or, where mounting fails, under RLIMIT_FSIZE), run once."""
    base = tmp_path_factory.mktemp("diskfull")
    with tmpfs(base / "small") as mount:
        if mount is None:
            return run_under_rlimit(base / "store")
        filler = mount / "filler"
        filler.write_bytes(os.urandom(FILLER_BYTES))
        return anyio.run(fill_until_full, str(mount / "store"), filler.unlink)


def test_a_full_disk_answers_io_error_loses_nothing_and_clears_when_space_returns(full_disk_figures):
    assert full_disk_figures["acknowledged_before_full"] > 0
    assert full_disk_figures["io_errors"] >= 1


def test_a_file_size_limit_is_handled_like_a_full_disk(tmp_path):
    figures = run_under_rlimit(tmp_path / "store")
    assert figures["acknowledged_before_full"] > 0
    assert figures["io_errors"] >= 1


REBUILD_ON_FULL_DISK = """
import os, sys
from eventstore.errors import StoreIOError
from eventstore.events import Metadata
from server.service import MemoryService
service = MemoryService(sys.argv[1])
try:
    n = 0
    while True:
        try:
            service.write_message("s", "user", f"note{n} " + "word " * 2000, Metadata())
        except StoreIOError:
            break
        n += 1
    try:
        service.rebuild()
        print("rebuilt")
    except StoreIOError as exc:
        print("IO_ERROR", exc.message)
finally:
    service.close()
"""


def test_rebuild_index_on_a_full_filesystem_answers_io_error_instead_of_crashing(tmp_path):
    with tmpfs(tmp_path / "small") as mount:
        if mount is None:
            pytest.skip("needs a small tmpfs (mount -t tmpfs needs root or CAP_SYS_ADMIN)")
        done = _proc.run(_proc.python("-c", REBUILD_ON_FULL_DISK, str(mount / "store")), timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.startswith(("IO_ERROR", "rebuilt"))


def test_last_error_names_the_full_disk_as_the_reason(full_disk_figures):
    reason = full_disk_figures["reason"].lower()
    assert any(word in reason for word in ("full", "space", "file too large", "input/output")), reason
