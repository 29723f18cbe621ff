"""Several ``convmem serve`` processes on one store, writing, updating,
deleting and searching at once.

    python -m tools.concurrency [--processes N] [--ops N] [--seed S] [--store DIR]

Each process is a real server over stdio (SDK client) driven by its own lane
of operations: writes to its own and to a shared session, updates of any
process's messages (no ``expected_revision``, so concurrent updates of one
message all apply), deletes of its own messages, searches for messages other
processes wrote, history reads of the shared session, and ``rebuild_index``
attempts, which must answer ``BUSY`` while the others are attached.
All processes stay attached until every lane is done.  Then:

* no message is lost or duplicated: the histories hold exactly the written
  minus the deleted ids, each once, in its own session, in id order;
* every message's acknowledged update revisions are exactly 2..R with R its
  final revision (no lost update), and its content is that of revision R;
* ``active_messages`` equals the sum of the histories, ``session_count`` the
  sessions; ``last_sequence`` and ``io.write_calls`` equal the number of
  acknowledged state-changing commands;
* in the event log, read directly after the processes exit, message ids are
  strictly increasing in commit (sequence) order, and there is one event per
  acknowledged state-changing command;
* ``python -m tools.replay STORE --verify`` passes, and (separately, through
  a plain copy) every read model equals a replay of the log.

The report is JSON on stdout; the exit code is 0 when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from dataclasses import dataclass, field

import anyio

from tools._checks import read_models_match_replay, replay_verify
from tools._workdir import workdir as store_workdir
from tools.mcp_client import call, read_everything, served

SHARED = "shared"


@dataclass
class Report:
    processes: int = 0
    ops_per_process: int = 0
    writes: int = 0
    updates: int = 0
    updates_not_found: int = 0
    deletes: int = 0
    searches: int = 0
    history_reads: int = 0
    rebuilds_busy: int = 0
    live_messages: int = 0
    last_sequence: int = 0
    events_checked: int = 0
    read_models_match_replay: bool = False
    failures: list[str] = field(default_factory=list)
    replay_verify_failures: list[str] = field(default_factory=list)    # the verify tool itself failed
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return not (self.failures or self.replay_verify_failures)

    def as_dict(self) -> dict:
        return {**self.__dict__, "clean": self.clean}


class Shared:
    """What every lane has had acknowledged so far (one asyncio loop: no locks needed)."""

    def __init__(self) -> None:
        self.written: dict[str, tuple[str, str]] = {}      # id -> (session, original content)
        self.keep: list[tuple[str, str]] = []               # (id, token): never updated or deleted
        self.revisions: dict[str, dict[int, str]] = {}     # id -> {revision: content} of acknowledged updates
        self.deleted: set[str] = set()
        self.deleting: set[str] = set()
        self.state_changes = 0


class Lane:
    def __init__(self, n: int, client, shared: Shared, report: Report, rng: random.Random) -> None:
        self.n, self.client, self.shared, self.report, self.rng = n, client, shared, report, rng
        self.own: list[str] = []
        self.serial = 0

    def fail(self, text: str) -> None:
        self.report.failures.append(f"process {self.n}: {text}")

    async def run(self, ops: int) -> None:
        for _ in range(ops):
            roll = self.rng.random()
            if roll < 0.40:
                await self.write()
            elif roll < 0.60:
                await self.update()
            elif roll < 0.70:
                await self.delete()
            elif roll < 0.85:
                await self.search()
            elif roll < 0.97:
                await self.history()
            else:
                await self.rebuild()

    async def write(self) -> None:
        self.serial += 1
        token = f"P{self.n}w{self.serial:05d}Z"
        keep = self.rng.random() < 0.3
        session = self.rng.choice((SHARED, f"p{self.n}"))
        content = f"{token} written by process {self.n}" + " filler words" * self.rng.randint(0, 40)
        is_error, out = await call(self.client, "write_message",
                                   {"session_id": session, "role": "user", "content": content})
        if is_error:
            return self.fail(f"write_message answered {out}")
        mid = out["message"]["message_id"]
        if mid in self.shared.written:
            return self.fail(f"id {mid} was handed out twice")
        self.shared.written[mid] = (session, content)
        self.shared.state_changes += 1
        self.report.writes += 1
        if keep:
            self.shared.keep.append((mid, token))
        else:
            self.own.append(mid)

    def _mutable(self) -> list[str]:
        kept = {mid for mid, _t in self.shared.keep}
        return [m for m in self.shared.written if m not in kept and m not in self.shared.deleted
                and m not in self.shared.deleting]

    async def update(self) -> None:
        candidates = self._mutable()
        if not candidates:
            return await self.write()
        mid = self.rng.choice(candidates)
        self.serial += 1
        content = f"P{self.n}u{self.serial:05d}Z updated by process {self.n}"
        is_error, out = await call(self.client, "update_message", {"message_id": mid, "content": content})
        if is_error and out["error"]["code"] == "NOT_FOUND" and mid in self.shared.deleted | self.shared.deleting:
            self.report.updates_not_found += 1
            return
        if is_error or out.get("changed") is not True:
            return self.fail(f"update_message of {mid} answered {out}")
        revision = out["message"]["revision"]
        seen = self.shared.revisions.setdefault(mid, {})
        if revision in seen:
            return self.fail(f"revision {revision} of {mid} was acknowledged twice")
        seen[revision] = content
        self.shared.state_changes += 1
        self.report.updates += 1

    async def delete(self) -> None:
        mine = [m for m in self.own if m not in self.shared.deleted]
        if not mine:
            return await self.write()
        mid = self.rng.choice(mine)
        self.shared.deleting.add(mid)
        is_error, out = await call(self.client, "delete_message", {"message_id": mid})
        self.shared.deleting.discard(mid)
        if is_error or out != {"status": "OK"}:
            return self.fail(f"delete_message of live {mid} answered {out}")
        self.shared.deleted.add(mid)
        self.shared.state_changes += 1
        self.report.deletes += 1

    async def search(self) -> None:
        others = [(m, t) for m, t in self.shared.keep if not t.startswith(f"P{self.n}w")] or self.shared.keep
        if not others:
            return await self.write()
        mid, token = self.rng.choice(others)
        is_error, out = await call(self.client, "search_messages", {"query": token, "limit": 5})
        self.report.searches += 1
        if is_error or mid not in [r["message_id"] for r in out["results"]]:
            self.fail(f"search for {token} did not find {mid}, acknowledged before it: {out}")

    async def history(self) -> None:
        before = {m for m, (s, _c) in self.shared.written.items() if s == SHARED}   # acknowledged before sending
        is_error, out = await call(self.client, "read_messages", {"session_id": SHARED, "limit": 1000})
        self.report.history_reads += 1
        if is_error:
            return self.fail(f"history answered {out}")
        ids = [m["message_id"] for m in out["history"]]
        if ids != sorted(set(ids)):
            self.fail("the shared history is not strictly in id order")
        missing = before - set(ids) - self.shared.deleted - self.shared.deleting
        if missing:
            self.fail(f"{len(missing)} acknowledged messages missing from the shared history")

    async def rebuild(self) -> None:
        is_error, out = await call(self.client, "rebuild_index")
        if not is_error or out["error"]["code"] != "BUSY":
            return self.fail(f"rebuild_index with other processes attached answered {out}")
        self.report.rebuilds_busy += 1


async def _drive(store: str, workdir: str, processes: int, ops: int, seed: int, report: Report) -> None:
    shared = Shared()
    rng = random.Random(seed)
    async with contextlib.AsyncExitStack() as stack:
        clients = [(await stack.enter_async_context(served(store, workdir)))[0] for _ in range(processes)]
        lanes = [Lane(n, c, shared, report, random.Random(rng.getrandbits(64))) for n, c in enumerate(clients)]
        async with anyio.create_task_group() as tg:
            for lane in lanes:
                tg.start_soon(lane.run, ops)
        await _final_check(clients[0], shared, report)


async def _final_check(client, shared: Shared, report: Report) -> None:
    found = await read_everything(client)
    live = {m: v for m, v in shared.written.items() if m not in shared.deleted}
    if set(found) != set(live):
        report.failures.append(f"lost: {sorted(set(live) - set(found))[:5]}, "
                               f"unexpected: {sorted(set(found) - set(live))[:5]}")
    for mid, m in found.items():
        if mid not in live:
            continue
        session, original = live[mid]
        revs = shared.revisions.get(mid, {})
        final = max(revs, default=1)
        if sorted(revs) != list(range(2, final + 1)):
            report.failures.append(f"{mid}: acknowledged revisions {sorted(revs)} are not 2..{final}")
        want = revs.get(final, original)
        if (m["session_id"], m["content"], m["revision"]) != (session, want, final):
            report.failures.append(f"{mid} reads back as revision {m['revision']} {m['content'][:40]!r}, "
                                   f"expected revision {final} {want[:40]!r}")
    is_error, health = await call(client, "get_system_health")
    sessions = {s for s, _c in live.values()}
    checks = {"active_messages": (health["active_messages"], len(found)),
              "session_count": (health["session_count"], len(sessions)),
              "last_sequence": (health["last_sequence"], shared.state_changes),
              "io.write_calls": (health["io"]["write_calls"], shared.state_changes),
              "status": (health["status"], "OK")}
    for name, (got, want) in checks.items():
        if got != want:
            report.failures.append(f"health {name} is {got}, expected {want}")
    report.live_messages, report.last_sequence = len(found), health["last_sequence"]


def check_event_log(store: str, report: Report) -> None:
    """Ids strictly increase in commit order; one event per acknowledged command."""
    from eventstore.events import MessageWritten
    from eventstore.store import EventStore
    from projections.registry import Projector
    with EventStore(store, Projector()) as es, es.read() as tx:
        last_id, count = "", 0
        for _seq, event, _size in es.iter_events(tx):
            count += 1
            if isinstance(event, MessageWritten):
                if not event.message.message_id > last_id:
                    report.failures.append(f"id {event.message.message_id} committed after {last_id}")
                last_id = event.message.message_id
        report.events_checked = count
        if count != report.last_sequence:
            report.failures.append(f"the log holds {count} events, last_sequence is {report.last_sequence}")


def run(processes: int = 3, ops: int = 60, seed: int = 1, store: str | None = None) -> Report:
    report = Report(processes=processes, ops_per_process=ops)
    started = time.perf_counter()
    with store_workdir(store, "convmem-concurrency-") as (store_dir, workdir):
        anyio.run(_drive, store_dir, workdir, processes, ops, seed, report)
        rc, err = anyio.run(replay_verify, store_dir)
        if rc != 0:
            report.replay_verify_failures.append(f"exit {rc}: {err}")
        same, detail = anyio.run(read_models_match_replay, store_dir)
        report.read_models_match_replay = same
        if not same:
            report.failures.append(f"read models differ from a replay of the log: {detail}")
        check_event_log(store_dir, report)
    report.seconds = round(time.perf_counter() - started, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.concurrency", description=__doc__.split("\n")[0])
    p.add_argument("--processes", type=int, default=3, help="server processes on the store (default 3)")
    p.add_argument("--ops", type=int, default=2000, help="operations per process (default 2000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--store", default=None, help="store directory (default: a temp dir, removed after)")
    args = p.parse_args(argv)
    report = run(args.processes, args.ops, args.seed, args.store)
    out = report.as_dict()
    out["failures"] = out["failures"][:50]
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
