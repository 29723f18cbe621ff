"""The client side of the tools and tests: ``convmem serve`` started as a child
over stdio and driven with the official SDK client.

    async with served(store, workdir) as (client, pid):     # pid: to SIGKILL it
        message = (await ok(client, "write_message", {...}))["message"]
        is_error, out = await call(client, "delete_message", {"message_id": ...})

:func:`connect` is the same for any :func:`server_parameters`, without the
pid.  Both use the ``legacy`` initialize handshake unless told otherwise (it is
the one desktop hosts use).  Every call is bounded by ``CALL_TIMEOUT``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, TextIO

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tools._proc import REPO, python

CALL_TIMEOUT = 120.0


# ------------------------------------------------------------- the server
def serve_command(store: str, *, log_level: str | None = "WARNING", console_script: bool = False) -> list[str]:
    """``convmem [--log-level L] serve --store STORE``: ``python -m server.cli``, or (with
    ``console_script``) the ``convmem`` script beside this Python when there is one."""
    script = os.path.join(os.path.dirname(sys.executable), "convmem")
    head = [script] if console_script and os.access(script, os.X_OK) else python("-m", "server.cli")
    level = ["--log-level", log_level] if log_level else []
    return [*head, *level, "serve", "--store", store]


def server_parameters(store: str, *, pidfile: str | None = None, umask: int | None = None,
                      log_level: str | None = "WARNING", console_script: bool = False) -> StdioServerParameters:
    """How the SDK starts ``convmem serve``.  With a ``pidfile`` or a ``umask`` it runs
    behind ``/bin/sh -c '…; exec …'``, so the pid written is the server's own."""
    command = serve_command(store, log_level=log_level, console_script=console_script)
    prelude = []
    if umask is not None:
        prelude.append(f"umask {umask:03o}")
    if pidfile is not None:
        prelude.append(f"echo $$ > {shlex.quote(pidfile)}")
    if not prelude:
        return StdioServerParameters(command=command[0], args=command[1:], cwd=REPO)
    return StdioServerParameters(command="/bin/sh", args=["-c", "; ".join([*prelude, "exec " + shlex.join(command)])],
                                 cwd=REPO)


@contextlib.asynccontextmanager
async def connect(params: StdioServerParameters, *, errlog: TextIO | None = None, mode: str = "legacy",
                  **client_options: Any) -> AsyncIterator[Client]:
    """A connected SDK client to a server started from ``params``; its stderr to ``errlog``
    (default: the SDK's, our stderr).  ``client_options`` go to ``mcp.Client`` (e.g. ``cache=None``)."""
    transport = stdio_client(params) if errlog is None else stdio_client(params, errlog=errlog)
    async with Client(transport, mode=mode, **client_options) as client:
        yield client


@contextlib.asynccontextmanager
async def served(store: str, workdir: str, *, errlog: TextIO | None = None, umask: int | None = None,
                 mode: str = "legacy", **client_options: Any) -> AsyncIterator[tuple[Client, int]]:
    """A connected client to a fresh ``convmem serve`` on ``store``, and the server's pid.

    The pid file goes in ``workdir``, and so does the server's stderr
    (``server-stderr.log``, appended) unless ``errlog`` is given.
    """
    pidfile = os.path.join(workdir, f"server-{os.getpid()}-{random.getrandbits(32):08x}.pid")
    with contextlib.ExitStack() as stack:
        log = errlog or stack.enter_context(open(os.path.join(workdir, "server-stderr.log"), "a"))
        stack.callback(_remove, pidfile)
        async with connect(server_parameters(store, pidfile=pidfile, umask=umask), errlog=log, mode=mode,
                           **client_options) as client:
            yield client, _read_pid(pidfile)


def _read_pid(pidfile: str) -> int:
    with open(pidfile) as f:
        return int(f.read().strip())


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


# ---------------------------------------------------------------- calls
def body(result) -> tuple[bool, dict]:
    """``(is_error, parsed JSON body)`` of a tool result."""
    assert len(result.content) == 1, "a tool result carries exactly one content block"
    assert result.content[0].type == "text", "a tool result's content is text"
    return bool(result.is_error), json.loads(result.content[0].text)


async def call(client: Client, name: str, arguments: dict | None = None) -> tuple[bool, dict]:
    """One tool call: ``(is_error, body)``; ``TimeoutError`` past ``CALL_TIMEOUT``."""
    with anyio.fail_after(CALL_TIMEOUT):
        return body(await client.call_tool(name, arguments or {}))


async def ok(client: Client, name: str, arguments: dict | None = None) -> dict:
    """One tool call that must succeed with ``"status": "OK"``; its body."""
    is_error, out = await call(client, name, arguments)
    if is_error or out.get("status") != "OK":
        raise AssertionError(f"{name} failed: {out}")
    return out


async def read_everything(client: Client) -> dict[str, dict]:
    """Every live message, by id, through the sessions view and each history."""
    found: dict[str, dict] = {}
    for session in await all_sessions(client):
        cursor = None
        while True:
            args = {"session_id": session["session_id"], "limit": 200}
            if cursor:
                args["cursor"] = cursor
            page = await ok(client, "read_messages", args)
            ids = [m["message_id"] for m in page["history"]]
            if ids != sorted(ids):
                raise AssertionError(f"history of {session['session_id']!r} is not in id order")
            for m in page["history"]:
                if m["message_id"] in found:
                    raise AssertionError(f"message {m['message_id']} listed twice")
                found[m["message_id"]] = m
            cursor = page.get("nextCursor")
            if not cursor:
                break
    return found


async def all_sessions(client: Client) -> list[dict]:
    """Every entry of the sessions view, page after page."""
    out, cursor = [], None
    while True:
        args = {"view": "sessions", "limit": 1000}
        if cursor:
            args["cursor"] = cursor
        page = await ok(client, "read_messages", args)
        out += page["sessions"]
        cursor = page.get("nextCursor")
        if not cursor:
            return out


# ------------------------------------------------------------ over HTTP
class HttpServer:
    """A ``convmem serve --http 127.0.0.1:0`` child: its ``url``, ``token``, ``proc``, and its stderr lines."""

    def __init__(self, proc, url: str, token: str, lines: list[str]) -> None:
        self.proc, self.url, self.token, self.lines = proc, url, token, lines

    @property
    def pid(self) -> int:
        return self.proc.pid

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}


@contextlib.contextmanager
def http_server(store: str, *, token: str | None = None, extra: tuple[str, ...] = (),
                log_level: str = "INFO") -> Iterator[HttpServer]:
    """Start ``convmem serve --http`` on a free loopback port with a known token
    (``CONVMEM_TOKEN``); wait (at most ``CALL_TIMEOUT``) for its "serving … at URL"
    log line; SIGKILL it on leaving.  Its stderr is read by a thread into ``lines``."""
    import re
    import subprocess
    import threading

    from tools._proc import start, stop
    token = token or "test-token-" + os.urandom(16).hex()
    command = [*python("-m", "server.cli"), "--log-level", log_level, "serve", "--store", store,
               "--http", "127.0.0.1:0", *extra]
    proc = start(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                 text=True, env={"CONVMEM_TOKEN": token})
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        for line in proc.stderr:
            lines.append(line)
            match = re.search(r"streamable HTTP at (\S+)", line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()
    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if not ready.wait(CALL_TIMEOUT) or not found:
            raise RuntimeError("convmem serve --http did not start:\n" + "".join(lines))
        yield HttpServer(proc, found[0], token, lines)
    finally:
        stop(proc)
        reader.join(CALL_TIMEOUT)


@contextlib.asynccontextmanager
async def connect_http(url: str, token: str | None, *, mode: str = "legacy",
                       headers: dict[str, str] | None = None, **client_options: Any) -> AsyncIterator[Client]:
    """A connected SDK client over streamable HTTP, with the SDK's default HTTP client
    settings plus the bearer token header."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    all_headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    async with create_mcp_http_client(headers=all_headers) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, **client_options) as client:
            yield client
