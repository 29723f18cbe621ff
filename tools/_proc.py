"""Child processes for the tools and the tests: one way to start one, bound it in
time, SIGKILL it and wait for it.

* :func:`run` — a command to completion, output captured as text; past its
  timeout it is SIGKILLed, waited for, and ``TimeoutExpired`` raised
  (:func:`run_async` is the same from inside an event loop);
* :func:`start` / :func:`kill` / :func:`stop` — a long-running child with
  pipes, stderr to a file or captured; ``kill`` is SIGKILL then wait;
* :func:`kill_pid` — SIGKILL a process started by someone else (the server
  behind an SDK client);
* :func:`forked` — a function in a forked child, its result sent back as JSON,
  classified as ``ok`` / ``exit`` / ``signal`` / ``hang``.

Every command runs in the repository root, so ``-m tools.…`` and
``-m server.cli`` import this tree's code.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import anyio.to_thread

REPO = str(Path(__file__).resolve().parent.parent)
TIMEOUT = 120.0


def python(*args: str) -> list[str]:
    """A command line for this interpreter: ``python(-m, tools.replay, STORE)``."""
    return [sys.executable, *args]


def describe(returncode: int) -> str:
    """``exit 1``, or ``killed by signal 11 (SIGSEGV)``."""
    if returncode < 0:
        return f"killed by signal {-returncode} ({signal.Signals(-returncode).name})"
    return f"exit {returncode}"


def run(args: Sequence[str], *, timeout: float | None = TIMEOUT,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``args`` to completion; stdout and stderr captured as text (UTF-8, undecodable bytes replaced).

    Past ``timeout`` seconds the child is SIGKILLed and waited for, then
    ``subprocess.TimeoutExpired`` is raised.
    """
    return subprocess.run(list(args), cwd=REPO, capture_output=True, encoding="utf-8", errors="replace",
                          timeout=timeout, input=input)


async def run_async(args: Sequence[str], *, timeout: float | None = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """:func:`run` from inside an event loop (in a worker thread, so the loop keeps running)."""
    return await anyio.to_thread.run_sync(functools.partial(run, args, timeout=timeout))


def start(args: Sequence[str], *, stdin: int | IO | None = None, stdout: int | IO | None = None,
          stderr: int | IO | None = None, text: bool = False, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``args``; each stream is ``subprocess.PIPE``, an open file, or None (inherited);
    ``env``: variables added to this process's environment."""
    return subprocess.Popen(list(args), cwd=REPO, stdin=stdin, stdout=stdout, stderr=stderr, text=text,
                            env={**os.environ, **env} if env else None)


def kill(proc: subprocess.Popen, timeout: float = TIMEOUT) -> int:
    """SIGKILL ``proc`` (unless it already exited) and wait for it; its return code."""
    proc.kill()
    return proc.wait(timeout=timeout)


def close(proc: subprocess.Popen) -> None:
    """Close the pipes to and from ``proc``."""
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def stop(proc: subprocess.Popen, timeout: float = TIMEOUT) -> int:
    """:func:`kill`, then :func:`close`; the return code."""
    try:
        return kill(proc, timeout)
    finally:
        close(proc)


def kill_pid(pid: int) -> None:
    """SIGKILL a process this one did not start itself (e.g. a server behind an SDK client)."""
    os.kill(pid, signal.SIGKILL)


def forked(fn: Callable[..., Any], *args: Any, timeout: float = TIMEOUT) -> tuple[str, Any]:
    """Run ``fn(*args)`` in a forked child; ``("ok", its JSON result)``, ``("exit", code)``,
    ``("signal", number)``, or ``("hang", None)`` after SIGKILL past ``timeout``.

    The caller must hold no LMDB environment (or anything else) open across the fork.
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(rfd, wfd, fn, args)
    os.close(wfd)
    try:
        chunks, status = _collect(rfd, pid, time.monotonic() + timeout)
    finally:
        os.close(rfd)
    if status is None:
        return "hang", None
    if os.WIFSIGNALED(status):
        return "signal", os.WTERMSIG(status)
    if os.WEXITSTATUS(status) != 0:
        return "exit", os.WEXITSTATUS(status)
    return "ok", json.loads(b"".join(chunks))


def _child(rfd: int, wfd: int, fn: Callable[..., Any], args: tuple) -> None:
    """The forked side: write the JSON result to ``wfd`` and leave without cleanup handlers."""
    os.close(rfd)
    code = 0
    try:
        data = json.dumps(fn(*args)).encode("utf-8")
        with os.fdopen(wfd, "wb") as w:
            w.write(data)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _collect(rfd: int, pid: int, deadline: float) -> tuple[list[bytes], int | None]:
    """Everything the child writes, and its wait status (None: killed at the deadline)."""
    chunks: list[bytes] = []
    os.set_blocking(rfd, False)
    while True:
        chunks += _drain(rfd)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return chunks + _drain(rfd), status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return chunks, None
        time.sleep(0.002)


def _drain(fd: int) -> list[bytes]:
    """What can be read from the non-blocking ``fd`` now."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return chunks
        if not chunk:
            return chunks
        chunks.append(chunk)
