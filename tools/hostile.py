"""Hostile disks and hostile callers: long runs of the reliability tests.

    python -m tools.hostile flips  [--trials N] [--seed S] [--max-flips K] [--json]
    python -m tools.hostile inputs [--examples N] [--seed S] [--json]
    python -m tools.hostile probe STORE [--plan FILE]
    python -m tools.hostile lines [--json]
    python -m tools.hostile dribble [--sockets N] [--interval S] [--read-timeout S] [--seconds S]
    python -m tools.hostile terminal [--examples N] [--seed S]

``flips`` builds a deterministic store, then for each trial copies it, flips
1..K random bits of ``data.mdb`` and reads everything back through the MCP
server (the SDK's in-memory client) in a forked child with a timeout.  Each
trial is classified:

* ``same``     — every answer equals the pristine store's (the flip hit slack);
* ``refused``  — some answers are ``CORRUPT_STORE`` / ``IO_ERROR`` and the rest
  are right: the contract;
* ``internal`` — some answer is ``INTERNAL_ERROR`` (a failure not translated);
* ``wrong``    — some successful answer differs from the pristine one, or a
  message that exists answers ``NOT_FOUND``: silently wrong;
* ``signal``   — the process died of a signal (SIGBUS, SIGSEGV);
* ``hang``     — no answer within the timeout.

``inputs`` runs the hypothesis property of tests/test_reliability_hostile.py
with many more examples: generated, hostile tool arguments through the
in-memory MCP client never produce ``INTERNAL_ERROR``, never crash, and an error
never changes state.

``probe`` is the reader ``flips`` forks, as a command: it prints the answers
for one store as JSON.

``lines`` sends ``convmem serve`` (stdio) lines no parser takes whole — JSON
nested 1,000 and 100,000 deep, a number of 5,000 digits, a line of 17 MiB,
bytes that are not UTF-8 — each followed by a valid write: every such line must
be answered with a JSON-RPC error (-32700 or -32600) that repeats nothing of it,
and every write after it must succeed.

``dribble`` starts ``convmem serve --http`` and opens N connections that send
the start of a request one byte every few seconds, while a client with the
token keeps calling tools (on a kept-alive connection and on a new one each
time); it reports the client's HTTP statuses and latencies, and how long each
dribbling connection stayed open.  It passes when every call is answered
``200`` and every dribbler was closed within the read timeout (plus 1 s).

``terminal`` runs the hypothesis property of tests/test_cli_terminal.py with
many more examples: for any stored session id and content, every read command
(``sessions``, ``search``, ``history``, ``show``, ``log``), on a terminal and
piped, prints no control, bidi or separator character but its layout's own,
and its plain output parses back into the documented fields.

Progress goes to stderr; reports are JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from typing import Any

import anyio

from tools import _proc
from tools.mcp_client import body

SPEC_CODES = {"VALIDATION_ERROR", "NOT_FOUND", "CONFLICT", "BUSY", "IO_ERROR", "CORRUPT_STORE", "INTERNAL_ERROR"}
REFUSALS = {"CORRUPT_STORE", "IO_ERROR"}
QUERIES = ("hello", "billing", "設定", "ERR_CONN_RESET", "tag3")
TRIAL_TIMEOUT = 60.0   # seconds a forked probe may take before it counts as a hang


# ------------------------------------------------------------------ probe
def build_store(path: str, messages: int = 48, seed: int = 1) -> None:
    """A deterministic store: fixed clock and id randomness, a few sessions, updates, deletes."""
    from eventstore.events import Metadata
    from server.service import MemoryService
    ticks = iter(range(1_700_000_000_000, 1_700_000_000_000 + 10_000_000, 7))
    svc = MemoryService(path, clock=lambda: next(ticks), rng=random.Random(seed))
    try:
        ids = []
        for i in range(messages):
            words = ("hello billing", "設定ファイルを読む", "ERR_CONN_RESET in the proxy", "plain words")[i % 4]
            meta = Metadata(tags=(f"tag{i % 5}",), importance=i % 101)
            content = f"{words} number {i} " + "lorem ipsum " * (i % 7) * 40
            ids.append(svc.write_message(f"s{i % 3}", ("user", "assistant")[i % 2], content, meta)
                       ["message"]["message_id"])
        for mid in ids[5::9]:
            svc.update_message(mid, "updated hello text", {}, None)
        for mid in ids[7::11]:
            svc.delete_message(mid, None)
    finally:
        svc.close()


def plan_calls(baseline: dict | None) -> list[tuple[str, dict]]:
    """The fixed list of reads a probe makes (from the pristine store's listing)."""
    calls = [("get_system_health", {}), ("read_messages", {"view": "sessions", "limit": 1000})]
    if baseline is None:
        return calls
    for sid in baseline["sessions"]:
        calls.append(("read_messages", {"session_id": sid, "limit": 1000}))
    for mid in baseline["messages"]:
        calls.append(("read_messages", {"view": "content", "message_id": mid, "content_limit": 65536}))
        calls.append(("read_messages", {"view": "context", "message_id": mid}))
    for q in QUERIES:
        calls.append(("search_messages", {"query": q, "limit": 100}))
    return calls


def _comparable(name: str, out: dict) -> Any:
    """The part of an answer that must not change: health counters move with nothing here."""
    if name == "get_system_health":
        return {k: out.get(k) for k in ("active_messages", "session_count", "last_sequence", "format_version")}
    return out


async def _probe_async(store: str, calls: list[tuple[str, dict]]) -> list[dict]:
    from mcp import Client

    from server.app import build_server
    answers = []
    async with Client(build_server(store)) as client:
        for name, args in calls:
            is_error, out = body(await client.call_tool(name, args))
            if is_error:
                err = out.get("error", {})
                answers.append({"error": err.get("code"), "message": err.get("message")})
            else:
                answers.append({"ok": _comparable(name, out)})
    return answers


def probe(store: str, calls: list[tuple[str, dict]]) -> list[dict]:
    return anyio.run(_probe_async, store, calls)


def listing(answers: list[dict]) -> dict:
    """Sessions and message ids of a pristine probe (its second answer is the sessions view)."""
    sessions = [s["session_id"] for s in answers[1]["ok"]["sessions"]]
    return {"sessions": sessions}


# ------------------------------------------------------------ forked runs
# Each read-back runs in a forked child (tools._proc.forked): a SIGBUS, SIGSEGV or
# hang there is an outcome, not the end of the run.
def classify(answers: list[dict], pristine: list[dict]) -> str:
    codes = {a["error"] for a in answers if "error" in a}
    if "INTERNAL_ERROR" in codes or codes - SPEC_CODES:
        return "internal"
    for got, want in zip(answers, pristine):
        if "ok" in got and got != want:
            return "wrong"
        if "error" in got and got["error"] not in REFUSALS and got != want:
            return "wrong"
    return "refused" if codes & REFUSALS else "same"


def _call_kind(call: tuple[str, dict]) -> str:
    name, args = call
    return f"{name}:{args.get('view', 'history')}" if name == "read_messages" else name


def flip_trials(trials: int, seed: int = 1, max_flips: int = 4, workdir: str | None = None,
                progress=None) -> dict:
    """The ``flips`` run: returns the outcome counts and the flips of every bad trial."""
    import mcp  # noqa: F401  — imported once here, before any fork, never with a store open

    import server.app  # noqa: F401
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="convmem-flips-")
    try:
        pristine_dir = os.path.join(workdir, "pristine")
        kind, _ = _proc.forked(build_store, pristine_dir, timeout=TRIAL_TIMEOUT)
        assert kind == "ok", f"building the pristine store failed: {kind}"
        kind, first = _proc.forked(probe, pristine_dir, plan_calls(None), timeout=TRIAL_TIMEOUT)
        assert kind == "ok", kind
        sessions = listing(first)["sessions"]
        histories = [("read_messages", {"session_id": s, "limit": 1000}) for s in sessions]
        kind, hist = _proc.forked(probe, pristine_dir, histories, timeout=TRIAL_TIMEOUT)
        assert kind == "ok", kind
        ids = [m["message_id"] for h in hist for m in h["ok"]["history"]]
        calls = plan_calls({"sessions": sessions, "messages": ids})
        kind, pristine = _proc.forked(probe, pristine_dir, calls, timeout=TRIAL_TIMEOUT)
        assert kind == "ok" and all("ok" in a for a in pristine), pristine
        rng = random.Random(seed)
        data_file = os.path.join(pristine_dir, "data.mdb")
        size = os.path.getsize(data_file)
        outcomes: collections.Counter[str] = collections.Counter()
        bad: list[dict] = []
        trial_dir = os.path.join(workdir, "trial")
        for n in range(trials):
            shutil.rmtree(trial_dir, ignore_errors=True)
            shutil.copytree(pristine_dir, trial_dir)
            flips = [(rng.randrange(size), 1 << rng.randrange(8)) for _ in range(rng.randint(1, max_flips))]
            with open(os.path.join(trial_dir, "data.mdb"), "r+b") as f:
                for offset, bit in flips:
                    f.seek(offset)
                    byte = f.read(1)[0]
                    f.seek(offset)
                    f.write(bytes([byte ^ bit]))
            kind, value = _proc.forked(probe, trial_dir, calls, timeout=TRIAL_TIMEOUT)
            if kind == "ok":
                outcome = classify(value, pristine)
                detail = sorted({f"{a['error']}: {a['message']}" for a in value if "error" in a})[:5]
                if outcome == "wrong":
                    detail.append("wrong answers from: " + ", ".join(sorted(
                        {_call_kind(c) for c, got, want in zip(calls, value, pristine) if got != want})))
            else:
                outcome, detail = (kind if kind in ("hang", "signal") else "crash"), [f"{kind} {value}"]
            outcomes[outcome] += 1
            if outcome not in ("same", "refused"):
                bad.append({"trial": n, "outcome": outcome, "flips": flips, "detail": detail})
            if progress:
                progress(f"trial {n + 1}/{trials}: {outcome}")
        return {"trials": trials, "seed": seed, "data_mdb_bytes": size, "calls_per_trial": len(calls),
                "outcomes": dict(outcomes), "bad": bad}
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


# ------------------------------------------------------ hostile arguments
def strategies():
    """Hypothesis strategies for hostile tool arguments (imported lazily: a test dependency)."""
    from hypothesis import strategies as st

    ulid_like = st.one_of(
        st.just("01ARZ3NDEKTSV4RRFFQ69G5FAV"), st.just("01arz3ndektsv4rrffq69g5fav"),
        st.just("81ARZ3NDEKTSV4RRFFQ69G5FAV"), st.just("01ARZ3NDEKTSV4RRFFQ69G5FA"),
        st.just("01ARZ3NDEKTSV4RRFFQ69G5FAVX"), st.just("01ARZ3NDEKTSV4RRFFQ69G5FAI"),
        st.just("01ARZ3NDEKTSV4RRFFQ69G5\x00AV"), st.just("01ARZ3NDEKTSV4RRFFQ69G5\ud800AV"),
        st.just("@LIVE@"), st.just("@LIVE@"), st.just("@DELETED@"),
        st.text(alphabet="0123456789ABCDEFGHJKMNPQRSTVWXYZ", min_size=24, max_size=28))
    huge = st.sampled_from(["x" * (1 << 20), "x" * ((1 << 20) + 1), "あ" * 349526, "a" * 4096, "a" * 4097,
                            "s" * 256, "s" * 257, "é" * 128, "t" * 129, "\x00" * 1000])
    nasty_text = st.one_of(
        st.text(max_size=40), st.sampled_from(["", " ", "\x00", "a\x00b", "\ud800", "ok \udfff",
                                               "\ud83d\ude00", "🙂", "ＡＢＣ", "日本語", "\u200b", "\ufeff"]),
        huge)
    numbers = st.one_of(st.integers(min_value=-3, max_value=4), st.sampled_from(
        [0, 1, 2, 3, 9, 10, 11, 49, 50, 51, 99, 100, 101, 999, 1000, 1001, 4095, 4096, 4097, 65535, 65536,
         65537, 2 ** 31, 2 ** 63, 2 ** 64, -2 ** 63, 10 ** 30]),
        st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none())

    def nested(depth: int) -> str:
        return "[" * depth + "]" * depth
    json_text = st.one_of(
        st.sampled_from(["{}", "[]", "null", "0", '""', "{", "[", "{\"tags\": [\"a\", \"a\"]}",
                         '{"importance": 1e400}', '{"importance": NaN}', '{"importance": true}',
                         '{"importance": 100}', '{"importance": 101}', '{"importance": -1}',
                         '{"kinds": ["episode"]}', '{"tiers": ["long"]}', '{"tags": []}', '["depends_on"]',
                         '["nope"]', '{"relations": [{"type": "supersedes", "message_id": "@LIVE@"}]}',
                         '{"relations": [{"type": "supersedes", "message_id": "@LIVE@", "x": 1}]}',
                         '{"summary": ""}', '{"memory_tier": null}', '{"tags": ["' + "t" * 129 + '"]}',
                         '{"source_message_ids": ["01ARZ3NDEKTSV4RRFFQ69G5FAV"]}', '{"unknown": 1}',
                         '{"importance": ' + "9" * 5000 + "}", "\"\\ud800\"", '{"tags": ["\\u0000"]}']),
        st.integers(min_value=1, max_value=100_000).map(nested),
        st.integers(min_value=1, max_value=3000).map(lambda d: '{"tags": ' + nested(d) + "}"),
        st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                         st.sampled_from(["tags", "kinds", "tiers", "importance", "summary", "relations",
                                          "memory_kind", "memory_tier", "x"]), inner, max_size=4),
                     max_leaves=12).map(json.dumps),
        st.text(max_size=20))
    cursor = st.one_of(st.sampled_from(["@CURSOR@", "@CURSOR@", "@CURSOR_SESSIONS@", "@CURSOR@x", "", "=",
                                        "AAAA", "eyJ2IjoxfQ", "\ud800"]), st.text(max_size=60),
                       st.binary(max_size=60).map(lambda b: __import__("base64").urlsafe_b64encode(b).decode()))
    anything = st.one_of(nasty_text, numbers, json_text, st.lists(st.integers(), max_size=3),
                         st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
    values = {
        "session_id": st.one_of(st.sampled_from(["s0", "s1", "s2"]), nasty_text, numbers),
        "role": st.one_of(st.sampled_from(["user", "assistant", "system", "User", "tool", ""]), numbers),
        "content": st.one_of(nasty_text, numbers), "query": st.one_of(nasty_text, numbers),
        "message_id": st.one_of(ulid_like, numbers),
        "metadata_json": json_text, "filters_json": json_text, "relation_types_json": json_text,
        "expected_revision": numbers, "limit": numbers, "cursor": cursor, "view": st.one_of(
            st.sampled_from(["history", "content", "context", "sessions", "History", ""]), numbers),
        "content_offset": numbers, "content_limit": numbers, "before": numbers, "after": numbers,
        "relation_depth": numbers, "min_importance": numbers, "context_size": numbers,
    }
    tools = {
        "write_message": ["session_id", "role", "content", "metadata_json"],
        "update_message": ["message_id", "content", "metadata_json", "expected_revision"],
        "read_messages": ["view", "session_id", "limit", "cursor", "message_id", "content_offset",
                          "content_limit", "expected_revision", "before", "after", "relation_depth",
                          "relation_types_json"],
        "search_messages": ["query", "session_id", "filters_json", "min_importance", "context_size", "limit"],
        "delete_message": ["message_id", "session_id"],
        "rebuild_index": [], "get_system_health": [], "no_such_tool": ["x"],
    }

    bases = {
        "write_message": [{"session_id": "s0", "role": "user", "content": "hello there"}],
        "update_message": [{"message_id": "@LIVE@", "content": "changed text"},
                           {"message_id": "@LIVE@", "metadata_json": '{"importance": 7}'}],
        "read_messages": [{"session_id": "s0"}, {"session_id": "s0", "cursor": "@CURSOR@"},
                          {"view": "content", "message_id": "@LIVE@"},
                          {"view": "context", "message_id": "@LIVE@"}, {"view": "sessions"},
                          {"view": "sessions", "cursor": "@CURSOR_SESSIONS@"}],
        "search_messages": [{"query": "seed message"}, {"query": "word", "session_id": "s1"}],
        "delete_message": [{"message_id": "@DELETED@"}],
        "rebuild_index": [{}], "get_system_health": [{}], "no_such_tool": [{}],
    }

    @st.composite
    def call(draw):
        name = draw(st.sampled_from(sorted(tools)))
        if draw(st.booleans()):     # a valid call with one or two hostile values
            args: Any = dict(draw(st.sampled_from(bases[name])))
            for _ in range(draw(st.integers(1, 2))):
                key = draw(st.sampled_from(tools[name] + ["extra"]))
                args[key] = draw(values.get(key, anything))
            return name, args
        keys = draw(st.lists(st.sampled_from(tools[name] or ["x"]), unique=True, max_size=6))
        args = {k: draw(values.get(k, anything)) for k in keys if k in values or name == "no_such_tool"}
        if draw(st.integers(0, 9)) == 0:
            args[draw(st.sampled_from(["extra", "__proto__", "", "\x00", "metadata", "sessionId"]))] = draw(anything)
        if draw(st.integers(0, 19)) == 0:
            args = draw(st.sampled_from([None, {}]))
        return name, args
    return call()


class HostileRun:
    """One open in-memory client over a portal, with the placeholders filled in."""

    STATE_KEYS = ("active_messages", "session_count", "deleted_messages", "last_sequence", "update_records",
                  "dead_bytes", "io", "log_size", "snapshot_size", "memory_estimate", "status", "last_error")

    def __init__(self, store: str) -> None:
        self.store = store
        self.calls = collections.Counter()
        self.errors = collections.Counter()

    def __enter__(self) -> HostileRun:
        from anyio.from_thread import start_blocking_portal
        from mcp import Client

        from server.app import build_server
        self._stack = contextlib.ExitStack()
        try:
            self.portal = self._stack.enter_context(start_blocking_portal())
            self.client = self._stack.enter_context(
                self.portal.wrap_async_context_manager(Client(build_server(self.store))))
            self._seed()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)

    def raw(self, name: str, args: Any) -> tuple[bool, dict]:
        return body(self.portal.call(self.client.call_tool, name, args))

    def _seed(self) -> None:
        ids = []
        for i in range(6):
            is_error, out = self.raw("write_message", {"session_id": f"s{i % 3}", "role": "user",
                                                       "content": f"seed message {i} " + "word " * 30})
            assert not is_error, out
            ids.append(out["message"]["message_id"])
        self.raw("delete_message", {"message_id": ids[-1]})
        self.live, self.deleted = ids[0], ids[-1]
        _e, page = self.raw("read_messages", {"session_id": "s0", "limit": 1})
        self.cursor = page["nextCursor"]
        _e, page = self.raw("read_messages", {"view": "sessions", "limit": 1})
        self.sessions_cursor = page["nextCursor"]

    def fill(self, value: Any) -> Any:
        if isinstance(value, str):
            return (value.replace("@LIVE@", self.live).replace("@DELETED@", self.deleted)
                    .replace("@CURSOR_SESSIONS@", self.sessions_cursor).replace("@CURSOR@", self.cursor))
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        return value

    def state(self) -> dict:
        is_error, health = self.raw("get_system_health", {})
        assert not is_error, health
        return {k: health[k] for k in self.STATE_KEYS}

    def check(self, name: str, args: Any) -> None:
        """One hostile call: never INTERNAL_ERROR; an error (or a read) changes nothing."""
        args = self.fill(args)
        before = self.state()
        try:
            is_error, out = self.raw(name, args)
        except Exception as exc:   # a protocol-level refusal (JSON-RPC error) is allowed
            from mcp.shared.exceptions import MCPError
            if not isinstance(exc, MCPError):
                raise
            is_error, out = True, {"status": "ERROR", "error": {"code": "JSON-RPC", "message": str(exc)}}
        self.calls[name] += 1
        if is_error:
            code = out["error"]["code"]
            self.errors[code] += 1
            assert code in SPEC_CODES - {"INTERNAL_ERROR"} or code == "JSON-RPC", out
            assert set(out) == {"status", "error"} and out["status"] == "ERROR", out
            assert isinstance(out["error"]["message"], str) and out["error"]["message"], out
        else:
            assert out.get("status") in ("OK", "NOT_FOUND"), out
        if is_error or name in ("read_messages", "search_messages", "get_system_health") or \
                out.get("status") == "NOT_FOUND" or out.get("changed") is False:
            assert self.state() == before, (name, out)
        elif name in ("write_message", "update_message", "delete_message"):
            assert self.state()["last_sequence"] == before["last_sequence"] + 1, (name, out)
        if name == "delete_message" and not is_error and out.get("status") == "OK" and \
                self.raw("read_messages", {"view": "content", "message_id": self.live})[0]:
            _e, fresh = self.raw("write_message", {"session_id": "s0", "role": "user", "content": "a new live one"})
            self.live = fresh["message"]["message_id"]


def hostile_inputs(examples: int, seed: int = 0, workdir: str | None = None) -> dict:
    """The ``inputs`` run: the hypothesis property with ``examples`` examples."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="convmem-hostile-")
    try:
        with HostileRun(os.path.join(workdir, "store")) as run:
            @hseed(seed)
            @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                      suppress_health_check=list(HealthCheck))
            @given(strategies())
            def prop(call):
                run.check(*call)
            started = time.perf_counter()
            prop()
            return {"examples": examples, "calls": dict(run.calls), "errors": dict(run.errors),
                    "seconds": round(time.perf_counter() - started, 1)}
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


# ------------------------------------------------------ hostile stdio lines
def hostile_lines() -> dict[str, bytes]:
    """Lines no parser here takes whole (name → line, without its newline)."""
    deep = 1000                 # past Python's json recursion and pydantic's 200 levels
    nested = '{"a":' * deep + "1" + "}" * deep

    def call(rid: int, arguments: str) -> str:
        return (f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call",'
                f'"params":{{"name":"write_message","arguments":{arguments}}}}}')
    lines = {
        "1,000 nested arrays": "[" * deep + "]" * deep,
        "100,000 nested arrays": "[" * 100_000 + "]" * 100_000,
        "1,000 nested objects": nested,
        "unclosed, 4 MiB": "[" * (4 << 20),
        "nested arguments": call(90, "[" * deep + "]" * deep),
        "nested params": '{"jsonrpc":"2.0","id":91,"method":"tools/list","params":' + nested + "}",
        "5,000 digits": call(92, '{"session_id":"s","content":"x","n":' + "9" * 5000 + "}"),
        "17 MiB": call(93, '{"session_id":"s","role":"user","content":"' + "x" * (17 << 20) + '"}'),
        "not JSON": "this line is not JSON",
    }
    return {**{name: line.encode() for name, line in lines.items()},
            "not UTF-8": b'{"jsonrpc":"2.0",\xff\xfe"id":94,"method":"tools/list"}'}


def stdio_lines(store: str, stderr_path: str) -> dict:
    """``convmem serve`` on ``store`` (its stderr to ``stderr_path``) given each of
    :func:`hostile_lines`, each followed by a write: what each got, and whether the write after it did."""
    import queue
    import subprocess
    import threading

    from tools.mcp_client import serve_command
    answers: queue.Queue[bytes | None] = queue.Queue()
    with open(stderr_path, "wb") as stderr:
        proc = _proc.start(serve_command(store), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)

    def read_answers() -> None:
        for line in proc.stdout:
            answers.put(line)
        answers.put(None)
    pump = threading.Thread(target=read_answers, daemon=True)
    pump.start()

    def ask(line: bytes) -> dict:
        proc.stdin.write(line + b"\n")
        proc.stdin.flush()
        answer = answers.get(timeout=TRIAL_TIMEOUT)
        if answer is None:
            raise RuntimeError("convmem serve closed stdout")
        return json.loads(answer)
    report: dict[str, Any] = {"lines": {}, "writes_after": {}}
    try:
        ask(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "0"}}
        }).encode())
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        for i, (name, line) in enumerate(hostile_lines().items(), start=1):
            answer = ask(line)
            error = answer.get("error", {})
            report["lines"][name] = {"code": error.get("code"), "message": error.get("message"), "id": answer.get("id")}
            written = ask(json.dumps(_call(1000 + i, "write_message", {"session_id": "s", "role": "user",
                                                                        "content": name})).encode())
            report["writes_after"][name] = not written["result"]["isError"]
        proc.stdin.close()
        report["exit"] = proc.wait(timeout=TRIAL_TIMEOUT)
    finally:
        _proc.kill(proc)
        pump.join(TRIAL_TIMEOUT)
        for stream in (proc.stdin, proc.stdout):
            stream.close()
    return report


# ------------------------------------------------------ dribbling HTTP clients
DRIBBLED = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Pad: " + b"x" * 4096


def dribble(url: str, token: str, *, sockets: int = 1000, interval: float = 2.0, seconds: float = 10.0,
            spread: float = 1.0) -> dict:
    """``sockets`` connections to the server at ``url`` (opened over ``spread`` seconds),
    each sending :data:`DRIBBLED` one byte every ``interval`` seconds, while a client
    with ``token`` calls read-only tools in turn for ``seconds``: the report of both sides."""
    import threading

    import httpx2

    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    opened: list[float] = []
    closed: list[float] = []
    failed: list[str] = []
    stop = threading.Event()

    async def one(delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            reader, writer = await asyncio.open_connection(host, int(port))
        except OSError as exc:
            failed.append(type(exc).__name__)
            return
        began = time.perf_counter()
        opened.append(began)
        try:
            for byte in DRIBBLED:
                if stop.is_set():
                    return
                writer.write(bytes((byte,)))
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), interval) == b"":
                        break
                except TimeoutError:
                    continue
        except OSError:
            pass                                # reset by the server: closed
        else:
            if stop.is_set():
                return
        finally:
            writer.close()
        closed.append(time.perf_counter() - began)

    async def dribblers() -> None:
        tasks = [asyncio.ensure_future(one(spread * i / sockets)) for i in range(sockets)]
        while not stop.is_set():
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    thread = threading.Thread(target=lambda: asyncio.run(dribblers()), daemon=True)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "Authorization": f"Bearer {token}"}
    calls = [("write_message", {"session_id": "s", "role": "user", "content": "hello dribblers"}),
             ("search_messages", {"query": "hello"}), ("read_messages", {"session_id": "s", "limit": 10}),
             ("read_messages", {"view": "sessions"}), ("get_system_health", {})]
    statuses: collections.Counter[int] = collections.Counter()
    latencies: list[float] = []
    # "Connection: close": the server closes after each answer, so each call of ``fresh`` is a new connection
    with httpx2.Client(timeout=60, headers=headers) as kept, \
            httpx2.Client(timeout=60, headers={**headers, "Connection": "close"}) as fresh:
        for name, arguments in calls:          # warm up: a tool's first call pays for its imports and caches
            kept.post(url, json=_call(0, name, arguments)).raise_for_status()
        thread.start()
        end = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < end:
            n += 1
            name, arguments = calls[1 + n % (len(calls) - 1)]
            began = time.perf_counter()
            answer = (kept if n % 2 else fresh).post(url, json=_call(n, name, arguments))
            latencies.append((time.perf_counter() - began) * 1000)
            statuses[answer.status_code] += 1
    stop.set()
    thread.join(60)
    latencies.sort()
    return {"sockets": sockets, "interval_s": interval, "seconds": seconds, "calls": len(latencies),
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "p50_ms": round(latencies[len(latencies) // 2], 2),
            "p99_ms": round(latencies[len(latencies) * 99 // 100], 2),
            "max_ms": round(latencies[-1], 2), "dribblers_opened": len(opened), "connect_failures": len(failed),
            "dribblers_closed": len(closed), "dribblers_open_at_end": len(opened) - len(closed),
            "longest_open_s": round(max(closed, default=0.0), 2)}


def _call(rid: int, name: str, arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def dribble_run(sockets: int, interval: float, read_timeout: float, seconds: float) -> dict:
    """The ``dribble`` command: a fresh server on a temporary store, then :func:`dribble`."""
    from tools.mcp_client import http_server
    workdir = tempfile.mkdtemp(prefix="convmem-dribble-")
    try:
        with http_server(os.path.join(workdir, "store"), extra=("--read-timeout", str(read_timeout)),
                         log_level="WARNING") as server:
            report = dribble(server.url, server.token, sockets=sockets, interval=interval, seconds=seconds)
        return {"read_timeout_s": read_timeout, **report}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def terminal_property(examples: int, seed: int = 0) -> dict:
    """The ``terminal`` run: tests/test_cli_terminal.py's property with ``examples`` examples."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import test_cli_terminal as t
    prop = t.test_any_stored_session_id_and_content_is_shown_escaped_and_parses_back_into_its_fields
    run = hseed(seed)(settings(max_examples=examples, deadline=None, database=None,
                               suppress_health_check=list(HealthCheck))(
        given(session=t.session_ids, before=t.contents, after=t.contents)(prop.hypothesis.inner_test)))
    started = time.perf_counter()
    run()
    return {"examples": examples, "seed": seed, "seconds": round(time.perf_counter() - started, 1)}


# ------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.hostile", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("flips", help="random bit flips in data.mdb, read back in a forked child")
    f.add_argument("--trials", type=int, default=500)
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--max-flips", type=int, default=4)
    i = sub.add_parser("inputs", help="hypothesis-generated hostile tool arguments")
    i.add_argument("--examples", type=int, default=5000)
    i.add_argument("--seed", type=int, default=0)
    pr = sub.add_parser("probe", help="read one store back; answers as JSON")
    pr.add_argument("store")
    pr.add_argument("--calls", default=None,
                    help='JSON list of [tool, arguments] to make instead of health and the sessions view')
    sub.add_parser("lines", help="lines no parser takes whole, to convmem serve over stdio")
    d = sub.add_parser("dribble", help="slow HTTP clients without the token beside one with it")
    d.add_argument("--sockets", type=int, default=1000)
    d.add_argument("--interval", type=float, default=2.0, help="seconds between two bytes of a dribbler")
    d.add_argument("--read-timeout", type=float, default=5.0, help="the server's --read-timeout")
    d.add_argument("--seconds", type=float, default=15.0, help="how long the client with the token calls")
    t = sub.add_parser("terminal", help="hypothesis-generated stored text through every read command")
    t.add_argument("--examples", type=int, default=500)
    t.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    say = lambda line: print(line, file=sys.stderr, flush=True)
    if args.command == "flips":
        report = flip_trials(args.trials, args.seed, args.max_flips, progress=say)
        ok = not (set(report["outcomes"]) - {"same", "refused"})
    elif args.command == "inputs":
        report = hostile_inputs(args.examples, args.seed)
        ok = True
    elif args.command == "terminal":
        report = terminal_property(args.examples, args.seed)      # a failing example raises, with its text
        ok = True
    elif args.command == "lines":
        workdir = tempfile.mkdtemp(prefix="convmem-lines-")
        try:
            report = stdio_lines(os.path.join(workdir, "store"), os.path.join(workdir, "stderr.log"))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        ok = (report["exit"] == 0 and all(report["writes_after"].values())
              and all(a["code"] in (-32700, -32600) for a in report["lines"].values()))
    elif args.command == "dribble":
        report = dribble_run(args.sockets, args.interval, args.read_timeout, args.seconds)
        ok = (report["statuses"] == {"200": report["calls"]} and report["dribblers_open_at_end"] == 0
              and report["longest_open_s"] <= args.read_timeout + 1)
    else:
        calls = [tuple(c) for c in json.loads(args.calls)] if args.calls else plan_calls(None)
        first = probe(os.path.abspath(args.store), calls)
        report = {"answers": first}
        ok = all("ok" in a for a in first)
    json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
