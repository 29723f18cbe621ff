"""``convmem-hook`` (and ``convmem hook``): a Claude Code hook.

Reads the hook's JSON payload on stdin (``hook_event_name``, ``session_id``,
``transcript_path``, ``cwd``) and:

* on ``Stop``, ``SubagentStop``, ``PreCompact`` and ``SessionEnd``: imports
  what is new in the session's transcript and its subagents' (what
  ``import claude-code --follow`` would: the same positions, the same
  mapping; on ``SessionEnd`` the file is complete, so summaries still
  waiting for their leaf are written too);
* on ``SessionStart``: prints exactly one JSON object,
  ``{"hookSpecificOutput": {"hookEventName": "SessionStart",
  "additionalContext": …}}``, the project's briefing (:mod:`server.briefing`;
  the project is the payload's ``cwd``), empty when there is none;
* on any other event: nothing.

It never stops the agent: whatever goes wrong (no payload, a store that is
busy or damaged, the time limit) is a warning on stderr and exit 0, and a
watchdog ends the process at the time limit (``--timeout``, default
:data:`TIMEOUT` seconds) — LMDB keeps the store whole whenever a process
ends, and an import cut short is taken up by the next hook.  This module
imports only the standard library at start; the store and the importer are
loaded when needed, never the MCP SDK (``convmem-hook`` starts in a fraction
of ``convmem``'s time).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import threading

TIMEOUT = 5.0
PART = 1 << 20          # bytes of transcript read (and committed) at a time: a first import cut short keeps its parts
IMPORTING = ("Stop", "SubagentStop", "PreCompact", "SessionEnd")
PROG = "convmem hook"
DESCRIPTION = ("a Claude Code hook (JSON payload on stdin): imports the session's transcript as it grows, and "
               "hands the project's memories to a new session (docs/import.md)")


def parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The hook's options (on ``p``, ``convmem hook``'s parser, when given)."""
    if p is None:               # convmem-hook; ``convmem hook`` has the global --store
        p = argparse.ArgumentParser(prog="convmem-hook", description=DESCRIPTION)
        p.add_argument("--store", default=None, help="store directory (default: $CONVMEM_STORE, else "
                       "$XDG_DATA_HOME/convmem or ~/.local/share/convmem)")
    p.add_argument("--timeout", type=float, default=TIMEOUT,
                   help=f"seconds after which the hook gives up, exit 0 (default {TIMEOUT:g})")
    p.add_argument("--budget", type=int, default=8192, help="bytes of the SessionStart context (default 8192)")
    add_node_options(p)
    return p


def add_node_options(p: argparse.ArgumentParser) -> None:
    """``--replicate`` and ``--stream``: where an import into a replicated node's store publishes."""
    p.add_argument("--replicate", metavar="nats://HOST:PORT[,…]", default=None,
                   help="a replicated node's store is written through its stream at these NATS servers "
                        "(default: those its node was last served with; docs/replication.md)")
    p.add_argument("--stream", default=None, metavar="NAME",
                   help="with a replicated node's store: its stream's name (default: the one its node was "
                        "last served with)")


def main(argv: list[str] | None = None) -> int:
    return run(parser().parse_args(argv))


class Hook:
    """One run: the payload, the answer printed at most once, and the watchdog."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.event = ""
        self.answered = threading.Lock()

    def answer(self, context: str) -> None:
        """Print the SessionStart answer (once: the watchdog may print an empty one)."""
        if self.answered.acquire(blocking=False):
            out = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context}}
            sys.stdout.write(json.dumps(out, ensure_ascii=False) + "\n")
            sys.stdout.flush()

    def expire(self) -> None:
        warn(f"gave up after {self.args.timeout:g} s (the store busy, or a long import: the next hook takes it up)")
        if self.event == "SessionStart":
            self.answer("")
        sys.stderr.flush()
        os._exit(0)


def run(args: argparse.Namespace) -> int:
    hook = Hook(args)
    watchdog = threading.Timer(max(0.0, args.timeout), hook.expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        payload = _payload(hook)
        if payload is None:
            if hook.event == "SessionStart":
                hook.answer("")
            return 0
        if hook.event == "SessionStart":
            hook.answer(_briefing(args, payload))
        elif hook.event in IMPORTING:
            _import(args, payload)
    except Exception as exc:       # never break the agent: a warning, exit 0
        warn(_why(exc))
        if hook.event == "SessionStart":
            hook.answer("")
    finally:
        watchdog.cancel()
    return 0


def warn(text: str) -> None:
    print(f"{PROG}: warning: {text}", file=sys.stderr)


def _why(exc: Exception) -> str:
    message = getattr(exc, "message", None)
    return f"{type(exc).__name__}: {message or exc}"


def _payload(hook: Hook) -> dict | None:
    """The payload, checked (its event kept in ``hook``); None (warned) when it is not one."""
    try:
        payload = json.loads(sys.stdin.buffer.read())
    except (ValueError, OSError):
        warn("stdin: must be the hook's JSON object")
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("hook_event_name"), str):
        warn("hook_event_name: must be a string")
        return None
    event = hook.event = payload["hook_event_name"]
    for field in ("transcript_path", "cwd", "agent_transcript_path", "session_id"):
        if field in payload and not isinstance(payload[field], str):
            warn(f"{field}: must be a string")
            return None
    if event in IMPORTING and not payload.get("transcript_path"):
        warn("transcript_path: required for " + event)
        return None
    if event == "SessionStart" and not payload.get("cwd"):
        warn("cwd: required for SessionStart")
        return None
    return payload


def _store_path(args: argparse.Namespace) -> str:
    from .paths import default_store_path
    return os.path.abspath(os.path.expanduser(args.store or default_store_path()))


def transcripts(payload: dict) -> list[str]:
    """The session's transcript, its subagents' and the payload's agent transcript."""
    main = os.path.abspath(os.path.expanduser(payload["transcript_path"]))
    stem = os.path.splitext(main)[0]
    found = [main, *sorted(glob.glob(os.path.join(glob.escape(stem), "subagents", "*.jsonl")))]
    agent = payload.get("agent_transcript_path")
    if agent:
        found.append(os.path.abspath(os.path.expanduser(agent)))
    return list(dict.fromkeys(found))


def _import(args: argparse.Namespace, payload: dict) -> None:
    from .importers.follow import Follower
    from .importers.options import Options
    from .importers.target import opened
    from .importers.turns import Report

    final = payload["hook_event_name"] == "SessionEnd"
    files = [path for path in transcripts(payload) if os.path.isfile(path)]
    if not files:
        return
    options = Options(progress=False, replicate=args.replicate, stream=args.stream)
    with opened(_store_path(args), options) as (store, committer):     # a replicated node's: through its stream
        follower = Follower(store, "claude-code", files, options, Report("claude-code"), chunk=PART,
                            committer=committer)
        for path in files:
            while follower.read(path, final=final):
                pass


def _briefing(args: argparse.Namespace, payload: dict) -> str:
    path = _store_path(args)
    if not os.path.isfile(os.path.join(path, "data.mdb")):
        return ""                  # no store yet: nothing remembered (and none created)
    from eventstore.store import EventStore
    from projections.registry import Projector

    from .briefing import briefing

    with EventStore(path, Projector()) as store, store.read() as tx:
        return briefing(tx, payload["cwd"], max(0, args.budget))


if __name__ == "__main__":
    sys.exit(main())
