"""The Claude Code hook's wall time, start-up included, as Claude Code runs it.

A synthetic Claude Code transcript of ``--lines`` lines (user prompts,
assistant answers, tool calls and their results, about 1 KiB a line) is
imported once by a ``Stop`` hook; then, ``--runs`` times, ``--append`` new
lines are appended and ``convmem-hook`` is run on a ``Stop`` payload (a new
process each time, as Claude Code starts it), and the wall time from start
to exit is taken.  The same for ``SessionStart`` (the briefing).  Prints
p50/p95/max per transcript size, and the targets.  Python's bytecode cache is
on (as in an installed package; in a directory of the run's own), whatever
``PYTHONDONTWRITEBYTECODE`` says.

    python -m tools.bench_hook --lines 600 3000 --runs 40

``--idle SECONDS`` measures instead the CPU time an idle ``import
claude-code --follow`` takes over that many seconds, watching (``watchfiles``)
and polling, on ``--files`` empty transcripts in 100 project directories.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SID = "5b0c7a52-9a8f-4f25-8c1e-3a1d2b4c5d6e"
CWD = "/home/ada/shop"
TARGET_P50, TARGET_P95 = 0.150, 0.300


def line(n: int) -> dict:
    """The ``n``-th line of a transcript: a cycle of prompt, tool call, tool result, answer."""
    ts = f"2026-01-20T{10 + n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
    base = {"parentUuid": f"u{n - 1}" if n else None, "isSidechain": False, "userType": "external", "cwd": CWD,
            "sessionId": SID, "version": "2.0.61", "gitBranch": "main", "uuid": f"u{n}", "timestamp": ts}
    words = " ".join(f"word{(n * 7 + i) % 997}" for i in range(120))
    step = n % 4
    if step == 0:
        return {**base, "type": "user", "message": {"role": "user", "content": f"Please look at step {n}: {words}"}}
    if step == 1:
        return {**base, "type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": f"Running the tests for {n}."},
            {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"pytest -k t{n}"}}]}}
    if step == 2:
        return {**base, "type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n - 1}", "content": f"{n} passed\n{words}"}]}}
    return {**base, "type": "assistant", "message": {"role": "assistant", "content": f"Done with {n}. {words}"}}


def hook_command() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "convmem-hook")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-c", "import sys; from server.hook import main; sys.exit(main())"]


def run_hook(store: str, payload: dict, *more: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one hook process."""
    # as installed: bytecode cached (here in a directory of the run's own, written by the first hook)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(os.path.dirname(store), "pycache")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*hook_command(), "--store", store, *more], input=json.dumps(payload).encode(),
                          capture_output=True, timeout=60, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or b"warning" in done.stderr:
        raise SystemExit(f"the hook failed: {done.stderr.decode(errors='replace')}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(lines: int, runs: int, append: int) -> dict:
    work = tempfile.mkdtemp(prefix="convmem-bench-hook-")
    try:
        store = os.path.join(work, "store")
        path = os.path.join(work, "projects", "-home-ada-shop", f"{SID}.jsonl")
        os.makedirs(os.path.dirname(path))
        with open(path, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(line(n)) + "\n" for n in range(lines))
        stop = {"hook_event_name": "Stop", "session_id": SID, "transcript_path": path, "cwd": CWD}
        first, _ = run_hook(store, stop, "--timeout", "600")      # the whole transcript, once (not timed)
        times, cpu = [], []
        n = lines
        for _ in range(runs):
            with open(path, "a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(line(n + i)) + "\n" for i in range(append))
            n += append
            wall, used = run_hook(store, stop)
            times.append(wall)
            cpu.append(used)
        start = {"hook_event_name": "SessionStart", "session_id": "new", "cwd": CWD, "source": "startup"}
        briefs = [run_hook(store, start)[0] for _ in range(max(5, runs // 4))]
        return {"lines": lines, "first_import_s": round(first, 3), "runs": runs, "append": append,
                "stop_p50_ms": round(1000 * statistics.median(times), 1),
                "stop_p95_ms": round(1000 * _p95(times), 1), "stop_max_ms": round(1000 * max(times), 1),
                "stop_cpu_p50_ms": round(1000 * statistics.median(cpu), 1),
                "python_start_p50_ms": round(1000 * statistics.median(_bare() for _ in range(10)), 1),
                "session_start_p50_ms": round(1000 * statistics.median(briefs), 1)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


_FOLLOW = """
import signal, sys, threading
from eventstore.store import EventStore
from projections.registry import Projector
from server.importers.follow import Follower, follow
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
with EventStore(sys.argv[1], Projector()) as store:
    follow(Follower(store, "claude-code", [sys.argv[2]]), stop, notify=sys.argv[3] == "watch")
"""


def idle(seconds: float, files: int) -> dict:
    """CPU seconds of an idle follower over ``seconds``, watching and polling."""
    work = tempfile.mkdtemp(prefix="convmem-bench-idle-")
    try:
        root = os.path.join(work, "projects")
        for n in range(files):
            os.makedirs(os.path.join(root, f"p{n % 100}"), exist_ok=True)
            open(os.path.join(root, f"p{n % 100}", f"s{n}.jsonl"), "wb").close()
        found = {}
        for mode in ("watch", "poll"):
            proc = subprocess.Popen([sys.executable, "-c", _FOLLOW, os.path.join(work, f"store-{mode}"), root, mode])
            time.sleep(10)                      # started, first sweep done
            before = _cpu(proc.pid)
            time.sleep(seconds)
            found[f"{mode}_cpu_s"] = round(_cpu(proc.pid) - before, 3)
            proc.terminate()
            proc.wait(60)
        return {"files": files, "seconds": seconds, **found}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bare() -> float:
    """The wall time of ``python -c pass`` now (what the machine gives any start-up)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, nargs="+", default=[600, 3000], help="lines of existing transcript")
    p.add_argument("--runs", type=int, default=40, help="Stop hooks timed per size")
    p.add_argument("--append", type=int, default=4, help="lines appended before each Stop")
    p.add_argument("--json", action="store_true", help="print the results as JSON lines")
    p.add_argument("--idle", type=float, default=None, metavar="SECONDS",
                   help="measure an idle --follow's CPU time over SECONDS instead")
    p.add_argument("--files", type=int, default=2000, help="transcripts an idle follower watches (--idle)")
    args = p.parse_args(argv)
    if args.idle is not None:
        result = idle(args.idle, args.files)
        print(json.dumps(result) if args.json else
              f"idle --follow over {args.idle:g} s, {args.files} files: watching {result['watch_cpu_s']} s CPU, "
              f"polling every second {result['poll_cpu_s']} s CPU")
        return 0
    for lines in args.lines:
        result = measure(lines, args.runs, args.append)
        if args.json:
            print(json.dumps(result))
        else:
            ok = result["stop_p50_ms"] <= 1000 * TARGET_P50 and result["stop_p95_ms"] <= 1000 * TARGET_P95
            print(f"{lines:>6} lines: Stop (+{args.append} lines) p50 {result['stop_p50_ms']} ms, "
                  f"p95 {result['stop_p95_ms']} ms, max {result['stop_max_ms']} ms, "
                  f"CPU p50 {result['stop_cpu_p50_ms']} ms (python -c pass: {result['python_start_p50_ms']} ms) "
                  f"({'within' if ok else 'over'} the targets {TARGET_P50 * 1000:.0f}/{TARGET_P95 * 1000:.0f} ms); "
                  f"SessionStart p50 {result['session_start_p50_ms']} ms; first import {result['first_import_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
