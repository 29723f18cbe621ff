"""Crash loop: SIGKILL a real ``convmem serve`` process at random moments and
check that nothing acknowledged is ever lost.

    python -m tools.crashloop [--kills N] [--seed S] [--store DIR] [--lanes K]
                              [--verify-every N] [--seed-messages N]

Each cycle starts the server as a subprocess and talks to it over stdio with
the SDK client, then:

1. reads the whole store back (sessions view, every history, health) and
   checks it against a model of every acknowledged operation.  An operation
   that was in flight when the process died is *pending*: after the restart it
   must be either wholly there or wholly absent, and the model adopts whichever
   it finds.  Counters must be exact: ``last_sequence`` and ``io.write_calls``
   equal the number of applied state-changing commands, ``active_messages``
   the number of live messages;
2. checks the store's files are owner-only, that no leftover ``compact.tmp``
   survived the restart, and (every ``--verify-every`` cycles, and after every
   kill that landed inside a compaction) that ``python -m tools.replay STORE
   --verify`` passes;
3. drives ``--lanes`` concurrent sequences of ``write_message``,
   ``update_message``, ``delete_message`` and ``rebuild_index`` and kills the
   process with SIGKILL: in the middle of an ordinary operation, right after
   sending ``rebuild_index`` (a random delay), inside a running compaction
   (as soon as ``compact.tmp`` appears, plus a random delay), or while idle.

After an acknowledged ``rebuild_index`` no file of the store may contain the
text of a message deleted, or a revision superseded, before it was sent.

Progress goes to stderr; the final report is one JSON object on stdout.  The
exit code is 0 when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from mcp import Client

from tools import _proc
from tools._checks import private_violations, read_models_match_replay, replay_verify
from tools._workdir import workdir as store_workdir
from tools.mcp_client import call, read_everything, served

COMPACT_DIR = "compact.tmp"
TOKEN = re.compile(rb"T\d{5}x\d{6}Q")
SESSIONS = ("s0", "s1", "s2", "s3", "セッション")
TAGS = ("alpha", "beta", "gamma", "delta")
KINDS = ("conversation", "episode", "semantic", "procedure", "preference", "summary")
WORDS = tuple(f"{a}{b}" for a in ("deploy", "billing", "cache", "queue", "kernel", "lmdb", "vector",
                                  "schema") for b in range(64)) + ("日本語", "設定ファイル", "ERR_CONN_RESET")
MODES = ("op", "op", "op", "rebuild", "rebuild-poll", "idle")


# ----------------------------------------------------------------- checks
def tokens_on_disk(store: str) -> set[bytes]:
    """Every message token found in any file of the store."""
    found: set[bytes] = set()
    for root, _dirs, files in os.walk(store):
        for name in files:
            with contextlib.suppress(FileNotFoundError), open(os.path.join(root, name), "rb") as f:
                found.update(TOKEN.findall(f.read()))
    return found


# ------------------------------------------------------------------ model
@dataclass(frozen=True)
class Expect:
    """What a live message must look like when read back."""

    session_id: str
    role: str
    content: str
    revision: int
    tags: tuple[str, ...]
    importance: int
    kind: str
    summary: str | None

    @classmethod
    def of(cls, m: dict) -> Expect:
        md = m["metadata"]
        return cls(m["session_id"], m["role"], m["content"], m["revision"], tuple(md["tags"]),
                   md["importance"], md["memory_kind"], md.get("summary"))


@dataclass
class Pending:
    """An operation sent but never acknowledged: applied wholly or not at all."""

    kind: str                     # write / update / delete / rebuild
    max_id: str = ""              # newest id known when it was sent
    mid: str | None = None
    old: Expect | None = None
    new: Expect | None = None


@dataclass
class Report:
    kills: int = 0
    kills_in_compaction: int = 0
    kills_by_mode: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    ops_sent: int = 0
    ops_acknowledged: int = 0
    pending_applied: int = 0
    pending_absent: int = 0
    rebuilds_acknowledged: int = 0
    leftovers_recovered: int = 0      # restarts that found (and removed) an interrupted compaction's files
    replay_verifies: int = 0
    live_messages: int = 0
    last_sequence: int = 0
    losses: list[str] = field(default_factory=list)        # acknowledged effects missing or altered
    torn: list[str] = field(default_factory=list)          # pending ops half applied
    phantoms: list[str] = field(default_factory=list)      # messages nobody wrote
    failures: list[str] = field(default_factory=list)      # every other failed check
    replay_verify_failures: list[str] = field(default_factory=list)   # the verify tool itself failed
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not (self.losses or self.torn or self.phantoms or self.failures or self.replay_verify_failures)

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["clean"] = self.clean
        return out


class Model:
    def __init__(self) -> None:
        self.live: dict[str, Expect] = {}
        self.gone: set[str] = set()
        self.applied = 0              # state-changing commands applied: last_sequence == write_calls
        self.max_id = ""
        self.busy: set[str] = set()   # ids with an operation in flight
        self.pending: list[Pending] = []
        self.dead_tokens: set[bytes] = set()

    def acked_write(self, sent_max: str, m: dict, report: Report) -> None:
        mid = m["message_id"]
        if not mid > sent_max:
            report.failures.append(f"id {mid} is not after {sent_max}, the newest id before it was sent")
        self.live[mid] = Expect.of(m)
        self.max_id = max(self.max_id, mid)
        self.applied += 1

    def kill_content(self, exp: Expect) -> None:
        self.dead_tokens.update(TOKEN.findall(exp.content.encode("utf-8")))

    def resolve(self, found: dict[str, dict], report: Report) -> None:
        """Compare a full read-back with the model, settling every pending op."""
        seen = {mid: Expect.of(m) for mid, m in found.items()}
        pending_ids = {p.mid for p in self.pending if p.mid}
        for mid, exp in self.live.items():
            if mid in pending_ids:
                continue
            got = seen.get(mid)
            if got is None:
                report.losses.append(f"acknowledged message {mid} is missing")
            elif got != exp:
                report.losses.append(f"acknowledged message {mid} reads back as {got}, expected {exp}")
        for mid in self.gone & set(seen):
            report.losses.append(f"acknowledged delete of {mid} was undone")
        for p in self.pending:
            self._settle(p, seen, report)
        for mid in set(seen) - set(self.live) - {p.mid for p in self.pending if p.kind == "delete"}:
            report.phantoms.append(f"message {mid} was never written: {seen[mid]}")
        self.pending = []
        self.busy = set()

    def _settle(self, p: Pending, seen: dict[str, Expect], report: Report) -> None:
        if p.kind == "rebuild":
            return
        if p.kind == "write":
            matches = [mid for mid, e in seen.items() if mid not in self.live and e.content == p.new.content]
            if not matches:
                report.pending_absent += 1
                return
            if len(matches) > 1 or seen[matches[0]] != p.new:
                report.torn.append(f"unacknowledged write came back as {[seen[m] for m in matches]}")
            mid = matches[0]
            if not mid > p.max_id:
                report.failures.append(f"id {mid} is not after {p.max_id}, the newest id before it was sent")
            self.live[mid] = seen[mid]
            self.max_id = max(self.max_id, mid)
            self.applied += 1
            report.pending_applied += 1
            return
        got = seen.get(p.mid)
        if p.kind == "update":
            if got == p.old:
                report.pending_absent += 1
            elif got == p.new:
                self.kill_content(p.old)
                self.live[p.mid] = p.new
                self.applied += 1
                report.pending_applied += 1
            else:
                report.torn.append(f"unacknowledged update of {p.mid} left {got}, neither {p.old} nor {p.new}")
        else:   # delete
            if got is None:
                self.kill_content(p.old)
                self.live.pop(p.mid, None)
                self.gone.add(p.mid)
                self.applied += 1
                report.pending_applied += 1
            elif got == p.old:
                report.pending_absent += 1
            else:
                report.torn.append(f"unacknowledged delete of {p.mid} left {got}, expected {p.old}")


# ------------------------------------------------------------- operations
class Cycle:
    """One server process's life: operations in several lanes, then SIGKILL."""

    def __init__(self, loop: CrashLoop, client: Client, pid: int, mode: str) -> None:
        self.loop, self.client, self.pid, self.mode = loop, client, pid, mode
        self.rng = loop.rng
        self.model, self.report = loop.model, loop.report
        self.killed = False
        self.trigger = anyio.Event()
        self.trigger_delay = 0.0
        self.poll_compaction = False
        self.rebuild_returned = False

    async def run(self, lanes: int) -> None:
        trigger_at = self.rng.randint(0, 12)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._killer)
            async with anyio.create_task_group() as lanes_tg:
                for lane in range(lanes):
                    lanes_tg.start_soon(self._lane, lane, trigger_at if lane == 0 else None)
            self.trigger.set()    # every lane is done: an idle kill

    async def _killer(self) -> None:
        await self.trigger.wait()
        if self.poll_compaction:
            limit = anyio.current_time() + 30
            while not (os.path.isdir(os.path.join(self.loop.store, COMPACT_DIR)) or self.rebuild_returned
                       or anyio.current_time() > limit):
                await anyio.sleep(0.0005)
        await anyio.sleep(self.trigger_delay)
        in_compaction = os.path.isdir(os.path.join(self.loop.store, COMPACT_DIR))
        self.killed = True
        _proc.kill_pid(self.pid)
        self.report.kills += 1
        self.report.kills_in_compaction += in_compaction
        self.report.kills_by_mode[self.mode] = self.report.kills_by_mode.get(self.mode, 0) + 1

    async def _lane(self, lane: int, trigger_at: int | None) -> None:
        n_ops = self.rng.randint(4, 20) if trigger_at is None else trigger_at + 1 + self.rng.randint(0, 6)
        for i in range(n_ops):
            if self.killed:
                return
            is_trigger = trigger_at is not None and i == trigger_at and self.mode != "idle"
            if is_trigger and self.mode in ("rebuild", "rebuild-poll"):
                await self._rebuild(trigger=True)
            elif not is_trigger and self.rng.random() < 0.02:
                await self._rebuild(trigger=False)
            else:
                await self._random_op(trigger=is_trigger)

    def _arm(self, trigger: bool) -> None:
        if not trigger:
            return
        if self.mode == "op":
            self.trigger_delay = self.rng.uniform(0, 0.010)
        elif self.mode == "rebuild":
            self.trigger_delay = self.rng.uniform(0, 1.5 * self.loop.rebuild_seconds)
        elif self.mode == "rebuild-poll":
            self.poll_compaction = True
            self.trigger_delay = self.rng.uniform(0, 0.8 * self.loop.rebuild_seconds)
        self.trigger.set()

    async def _send(self, name: str, args: dict, pending: Pending, trigger: bool) -> dict | None:
        """Send one command; its body when acknowledged, None when the process died first."""
        self.report.ops_sent += 1
        self.model.pending.append(pending)
        self._arm(trigger)
        try:
            is_error, out = await call(self.client, name, args)
        except Exception:   # the connection died with the process
            if not self.killed:
                raise
            return None
        self.model.pending.remove(pending)
        if is_error:
            self.report.failures.append(f"{name} answered an error: {out}")
            return None
        self.report.ops_acknowledged += 1
        return out

    async def _random_op(self, trigger: bool) -> None:
        free = [mid for mid in self.model.live if mid not in self.model.busy]
        roll = self.rng.random()
        crowded = len(self.model.live) > self.loop.max_live
        if free and roll < (0.45 if crowded else 0.2):
            await self._delete(self.rng.choice(free), trigger)
        elif free and roll < 0.55:
            await self._update(self.rng.choice(free), trigger)
        else:
            await self._write(trigger)

    async def _write(self, trigger: bool) -> None:
        content = self.loop.content()
        meta = {"tags": self.rng.sample(TAGS, self.rng.randint(0, 2)), "importance": self.rng.randint(0, 100),
                "memory_kind": self.rng.choice(KINDS)}
        args = {"session_id": self.rng.choice(SESSIONS), "role": self.rng.choice(("user", "assistant")),
                "content": content, "metadata_json": json.dumps(meta)}
        new = Expect(args["session_id"], args["role"], content, 1, tuple(meta["tags"]), meta["importance"],
                     meta["memory_kind"], None)
        sent_max = self.model.max_id
        out = await self._send("write_message", args, Pending("write", sent_max, new=new), trigger)
        if out is None:
            return
        self.model.acked_write(sent_max, out["message"], self.report)
        if Expect.of(out["message"]) != new:
            self.report.failures.append(f"write_message echoed {out['message']} for {new}")

    async def _update(self, mid: str, trigger: bool) -> None:
        old = self.model.live[mid]
        content = self.loop.content()
        patch: dict[str, Any] = {}
        if self.rng.random() < 0.5:
            patch["importance"] = self.rng.randint(0, 100)
        if self.rng.random() < 0.3:
            patch["summary"] = self.rng.choice(("", "a short summary", "要約です"))
        if self.rng.random() < 0.3:
            patch["tags"] = self.rng.sample(TAGS, self.rng.randint(0, 3))
        new = replace(old, content=content, revision=old.revision + 1,
                      importance=patch.get("importance", old.importance),
                      summary=(patch["summary"] or None) if "summary" in patch else old.summary,
                      tags=tuple(patch.get("tags", old.tags)))
        args = {"message_id": mid, "content": content, "expected_revision": old.revision}
        if patch:
            args["metadata_json"] = json.dumps(patch)
        self.model.busy.add(mid)
        out = await self._send("update_message", args, Pending("update", mid=mid, old=old, new=new), trigger)
        if out is None:
            return
        self.model.busy.discard(mid)
        got = Expect.of(out["message"])
        if got != new or out.get("changed") is not True:
            self.report.failures.append(f"update_message of {mid} answered {out}, expected {new}")
        self.model.kill_content(old)
        self.model.live[mid] = got
        self.model.applied += 1

    async def _delete(self, mid: str, trigger: bool) -> None:
        old = self.model.live[mid]
        self.model.busy.add(mid)
        out = await self._send("delete_message", {"message_id": mid}, Pending("delete", mid=mid, old=old), trigger)
        if out is None:
            return
        self.model.busy.discard(mid)
        if out != {"status": "OK"}:
            self.report.losses.append(f"delete_message of live message {mid} answered {out}")
            return
        self.model.kill_content(old)
        del self.model.live[mid]
        self.model.gone.add(mid)
        self.model.applied += 1

    async def _rebuild(self, trigger: bool) -> None:
        dead = set(self.model.dead_tokens)
        started = time.perf_counter()
        try:
            out = await self._send("rebuild_index", {}, Pending("rebuild"), trigger)
        finally:
            self.rebuild_returned = self.rebuild_returned or trigger
        if out is None:
            return
        took = time.perf_counter() - started
        self.loop.rebuild_seconds = 0.7 * self.loop.rebuild_seconds + 0.3 * took
        self.report.rebuilds_acknowledged += 1
        leaked = tokens_on_disk(self.loop.store) & dead
        if leaked:
            self.report.failures.append(f"after rebuild_index the text of {len(leaked)} deleted or superseded "
                                        f"revisions is still on disk, e.g. {sorted(leaked)[:3]}")


# ------------------------------------------------------------------- loop
class CrashLoop:
    def __init__(self, store: str, workdir: str, seed: int, lanes: int = 2, verify_every: int = 1,
                 max_live: int = 250, large_share: float = 0.25, progress=None) -> None:
        self.store, self.workdir = store, workdir
        self.rng = random.Random(seed)
        self.lanes, self.verify_every, self.max_live = lanes, verify_every, max_live
        self.large_share = large_share
        self.model, self.report = Model(), Report()
        self.rebuild_seconds = 0.05
        self.serial = 0
        self._compaction_kills_seen = 0
        self.progress = progress or (lambda _line: None)

    def content(self) -> str:
        self.serial += 1
        token = f"T{self.report.restarts % 100000:05d}x{self.serial % 1000000:06d}Q"
        n = self.rng.randint(300, 2500) if self.rng.random() < self.large_share else self.rng.randint(3, 30)
        return token + " " + " ".join(self.rng.choice(WORDS) for _ in range(n))

    async def seed_store(self, messages: int) -> None:
        """Fill the store first so that a compaction takes long enough to be hit."""
        async with served(self.store, self.workdir) as (client, _pid):
            cycle = Cycle(self, client, 0, "seed")
            for _ in range(messages):
                await cycle._write(trigger=False)

    async def run(self, kills: int, modes: tuple[str, ...] | None = None,
                  until_compaction_kill: int = 0) -> Report:
        """``kills`` cycles; then up to ``until_compaction_kill`` more rebuild-poll
        cycles until at least one kill landed inside a compaction."""
        started = time.perf_counter()
        plan = [(modes[i % len(modes)] if modes else self.rng.choice(MODES)) for i in range(kills)]
        extra = 0
        while plan or (extra < until_compaction_kill and not self.report.kills_in_compaction):
            if plan:
                mode = plan.pop(0)
            else:
                mode, extra = "rebuild-poll", extra + 1
            await self._cycle(mode)
            if self.report.losses or self.report.torn or self.report.phantoms:
                break
        await self._final_check()
        self.report.seconds = round(time.perf_counter() - started, 1)
        return self.report

    async def _cycle(self, mode: str) -> None:
        killed_in_compaction = self.report.kills_in_compaction
        leftover = os.path.isdir(os.path.join(self.store, COMPACT_DIR))
        async with served(self.store, self.workdir) as (client, pid):
            self.report.restarts += 1
            await self._check_after_restart(client, verify=self._verify_due(), leftover=leftover)
            cycle = Cycle(self, client, pid, mode)
            await cycle.run(self.lanes)
        where = ", in compaction" if self.report.kills_in_compaction > killed_in_compaction else ""
        self.progress(f"kill {self.report.kills} ({mode}{where}): {self.report.ops_acknowledged} acknowledged, "
                      f"{len(self.model.live)} live, {len(self.report.losses)} losses")

    def _verify_due(self) -> bool:
        """Every ``verify_every`` restarts, and after every kill inside a compaction."""
        after_compaction = self._compaction_kills_seen != self.report.kills_in_compaction
        return self.verify_every > 0 and (self.report.restarts % self.verify_every == 0 or after_compaction)

    async def _check_after_restart(self, client: Client, verify: bool, leftover: bool = False) -> None:
        is_error, health = await call(client, "get_system_health")
        if is_error:
            self.report.failures.append(f"the store did not open after kill {self.report.kills}: {health}")
            raise AssertionError(health)
        found = await read_everything(client)
        self.model.resolve(found, self.report)
        expect_sessions = {e.session_id for e in self.model.live.values()}
        checks = {"last_sequence": (health["last_sequence"], self.model.applied),
                  "io.write_calls": (health["io"]["write_calls"], self.model.applied),
                  "active_messages": (health["active_messages"], len(self.model.live)),
                  "session_count": (health["session_count"], len(expect_sessions)),
                  "status": (health["status"], "OK"), "snapshot_valid": (health["snapshot_valid"], True),
                  "recovered_tail": (health["recovered_tail"], leftover)}
        for name, (got, want) in checks.items():
            if got != want:
                self.report.failures.append(f"after kill {self.report.kills}: health {name} is {got}, expected {want}")
        self.report.live_messages, self.report.last_sequence = len(self.model.live), health["last_sequence"]
        self.report.leftovers_recovered += leftover
        if os.path.exists(os.path.join(self.store, COMPACT_DIR)):
            self.report.failures.append(f"after kill {self.report.kills}: {COMPACT_DIR} survived the restart")
        for bad in private_violations(self.store):
            self.report.failures.append(f"after kill {self.report.kills}: {bad}")
        if verify:
            rc, err = await replay_verify(self.store)
            self.report.replay_verifies += 1
            if rc != 0:
                self.report.replay_verify_failures.append(f"after kill {self.report.kills}: exit {rc}: {err}")
            same, detail = await read_models_match_replay(self.store)
            if not same:
                self.report.failures.append(f"after kill {self.report.kills}: read models differ from a "
                                            f"replay of the log: {detail}")
        self._compaction_kills_seen = self.report.kills_in_compaction

    async def _final_check(self) -> None:
        leftover = os.path.isdir(os.path.join(self.store, COMPACT_DIR))
        async with served(self.store, self.workdir) as (client, _pid):
            self.report.restarts += 1
            await self._check_after_restart(client, verify=True, leftover=leftover)


def run(kills: int, seed: int, store: str | None = None, lanes: int = 2, verify_every: int = 1,
        seed_messages: int = 120, modes: tuple[str, ...] | None = None, until_compaction_kill: int = 0,
        large_share: float = 0.25, progress=None) -> Report:
    """Run a crash loop (in a temporary directory unless ``store`` is given)."""
    with store_workdir(store, "convmem-crashloop-") as (store_dir, workdir):
        loop = CrashLoop(store_dir, workdir, seed, lanes=lanes, verify_every=verify_every,
                         large_share=large_share, progress=progress)

        async def main() -> Report:
            await loop.seed_store(seed_messages)
            return await loop.run(kills, modes, until_compaction_kill)
        return anyio.run(main)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.crashloop", description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=500, help="SIGKILLs to deliver (default 500)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--store", default=None, help="store directory to use and keep (default: a temp dir)")
    p.add_argument("--lanes", type=int, default=2, help="concurrent operation sequences per process (default 2)")
    p.add_argument("--verify-every", type=int, default=10,
                   help="run `tools.replay --verify` every N restarts and after every kill inside a "
                        "compaction (default 10; 0 = only at the end)")
    p.add_argument("--seed-messages", type=int, default=150, help="messages written before the first kill")
    args = p.parse_args(argv)
    report = run(args.kills, args.seed, store=args.store, lanes=args.lanes, verify_every=args.verify_every,
                 seed_messages=args.seed_messages, progress=lambda line: print(line, file=sys.stderr, flush=True))
    out = report.as_dict()
    for key in ("losses", "torn", "phantoms", "failures", "replay_verify_failures"):
        out[key] = out[key][:50]
    json.dump(out, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
