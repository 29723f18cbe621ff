"""Claude Code session transcripts (``~/.claude/projects/<project>/<sessionId>.jsonl``,
subagents in ``<project>/<sessionId>/subagents/agent-<agentId>.jsonl``).

One line per event: ``type`` user/assistant/system/summary (others — file
snapshots, queue operations, progress — carry no message and are counted as
ignored), ``uuid``, ``parentUuid``, ``sessionId``, ``timestamp``,
``isSidechain``/``agentId``, and ``message.content`` as a string or a list of
blocks.  The mapping (docs/import.md has an example):

* session ``claude-code:<sessionId>``; a sidechain (subagent) session
  ``claude-code:<sessionId>/agent-<agentId>`` (``/sidechain`` when the line
  names no agent), each of its messages tagged ``parent-session:<parent>``;
* a line's ``text``, ``image``/``document`` (a placeholder) and — with
  ``--thinking`` — ``thinking`` blocks: one message, key ``<uuid>``;
* each ``tool_use`` block: an assistant message ``[tool_use NAME] <input as
  JSON>``, ``tool_call_id`` = its id, key ``tool_use:<id>``;
* each ``tool_result`` block: a user message (tool results are the model's
  input, as in the API) with the result text (``[error]`` first when
  ``is_error``), ``tool_call_id``, a ``depends_on`` relation to its call, key
  ``tool_result:<id>``;
* a ``summary`` line: a ``summary`` message of the file's session, key
  ``summary:<leafUuid>``, written after the file's other turns;
* every message of a file is tagged ``project:<cwd>``, the first ``cwd`` its
  lines carry (the directory Claude Code ran in: the session's project).

Read in parts (:func:`parser`: ``import --follow`` and the hook), a summary
is written at the end of the part in which its leaf's line was read (at the
same time as a whole-file import gives it); one whose leaf has not been read
waits in the reader's state (:meth:`_File.state`) until it is, or until
:meth:`_File.end` is called with ``final=True``.

Thinking is skipped by default: it is the model's scratch work, often longer
than everything else in a session and repeated turn after turn, so it would
crowd the answers and tool calls (which carry the decisions) out of search
results; ``--thinking`` keeps it, tagged ``thinking``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from .options import Options
from .reading import file_time, jsonl, restored, saved
from .turns import Report, Turn, as_text, parse_time

NAME = "claude-code"
DEFAULTS = ("~/.claude/projects/*/*.jsonl", "~/.claude/projects/*/*/subagents/*.jsonl")
PATTERN = "*.jsonl"
FLAGS = ("thinking",)                    # the options of `convmem import` that apply
_MESSAGE_TYPES = {"user": "user", "assistant": "assistant", "system": "system"}
_ROLES = {"user", "assistant", "system"}


def read(files: list[str], report: Report, options: Options) -> Iterator[Turn | list[Turn]]:
    for path in files:
        yield from _File(path, report, options).turns()


def parser(path: str, report: Report, options: Options) -> _File:
    """The reader of one file, to feed it lines part by part (``lines``, then
    ``end``) and carry its ``state`` from one part to the next."""
    return _File(path, report, options)


class _File:
    # what the reader remembers from the lines read, carried from one part to the next
    STATE: dict[str, type | tuple[type, ...]] = {
        "last_time": int, "times": dict, "tool_names": dict, "session": (str, type(None)),
        "project": (str, type(None)), "summaries": list}

    def __init__(self, path: str, report: Report, options: Options) -> None:
        self.path, self.report, self.options = path, report, options
        self.last_time = 0
        self.times: dict[str, int] = {}          # uuid → timestamp (for summaries)
        self.tool_names: dict[str, str] = {}     # tool_use id → tool name
        self.session: str | None = None
        self.summaries: list[tuple[int, dict[str, Any]]] = []
        self.project: str | None = None          # the first cwd of the file

    def turns(self) -> Iterator[Turn]:
        yield from self.lines(jsonl(self.path, self.report))
        yield from self.end(final=True)

    def lines(self, numbered: Iterable[tuple[int, dict[str, Any]]]) -> Iterator[Turn]:
        """The turns of lines read (summaries wait for :meth:`end`)."""
        for number, line in numbered:
            kind = line.get("type")
            if kind == "summary":
                self.summaries.append((number, line))
            elif kind in _MESSAGE_TYPES:
                yield from self._line(number, line)
            else:
                self.report.ignored += 1

    def end(self, final: bool = False) -> Iterator[Turn]:
        """The summaries read so far: all of them when ``final`` (the whole
        file was read), else those whose leaf's line has been read."""
        ready = [(n, line) for n, line in self.summaries if final or line.get("leafUuid") in self.times]
        self.summaries = [] if final else [s for s in self.summaries if s not in ready]
        yield from self._summaries(ready)

    def state(self) -> dict[str, Any]:
        return saved(self, self.STATE)

    def restore(self, state: dict[str, Any]) -> None:
        """Take up the ``state`` of an earlier part (ValueError: not one)."""
        restored(self, self.STATE, state, "claude-code")
        self.summaries = [(n, line) for n, line in self.summaries]

    def _where(self, number: int) -> str:
        return f"{self.path}:{number}"

    def _line(self, number: int, line: dict[str, Any]) -> Iterator[Turn]:
        uuid, sid = line.get("uuid"), line.get("sessionId")
        if not isinstance(uuid, str) or not uuid:
            self.report.skip(self._where(number), "a message line without a uuid")
            return
        if not isinstance(sid, str) or not sid:
            sid = os.path.splitext(os.path.basename(self.path))[0]
        cwd = line.get("cwd")
        if self.project is None and isinstance(cwd, str) and cwd:
            self.project = cwd
        session, tags = self._session(sid, line)
        ts = parse_time(line.get("timestamp")) or self.last_time or file_time(self.path)
        self.last_time = self.times[uuid] = ts
        message = line.get("message")
        if line["type"] == "system" or not isinstance(message, dict):
            content = line.get("content") if not isinstance(message, dict) else None
            if isinstance(content, str) and content.strip():
                yield Turn(session, uuid, "system", content, ts, tags + ("system",))
            else:
                self.report.ignored += 1
            return
        given = message.get("role")
        role = given if isinstance(given, str) and given in _ROLES else _MESSAGE_TYPES[line["type"]]
        content = message.get("content")
        if isinstance(content, str):
            blocks: list[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = content
        else:
            self.report.skip(self._where(number), "message.content is neither a string nor a list of blocks")
            return
        yield from self._blocks(number, session, uuid, role, ts, tags, blocks)

    def _session(self, sid: str, line: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
        parent = f"{NAME}:{sid}"
        if line.get("isSidechain") is True:
            agent = line.get("agentId")
            name = f"agent-{agent}" if isinstance(agent, str) and agent else "sidechain"
            return f"{parent}/{name}", (NAME, *self._project(), "sidechain", f"parent-session:{parent}")
        if self.session is None:
            self.session = parent
        return parent, (NAME, *self._project())

    def _project(self) -> tuple[str, ...]:
        return (f"project:{self.project}",) if self.project else ()

    def _blocks(self, number: int, session: str, uuid: str, role: str, ts: int, tags: tuple[str, ...],
                blocks: list[Any]) -> Iterator[Turn]:
        parts: list[str] = []
        extra: list[str] = []
        tools: list[Turn | None] = []            # after the line's text, which comes first
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif kind == "thinking":
                if self.options.thinking and isinstance(block.get("thinking"), str) and block["thinking"]:
                    parts.append("[thinking]\n" + block["thinking"])
                    extra.append("thinking")
            elif kind == "redacted_thinking":
                pass
            elif kind in ("image", "document"):
                parts.append(_placeholder(kind, block))
                extra.append(kind)
            elif kind == "tool_use":
                tools.append(self._tool_use(number, session, ts, tags, block))
            elif kind == "tool_result":
                tools.append(self._tool_result(number, session, ts, tags, block))
            else:
                self.report.skip(self._where(number), f"unknown content block type {_name(kind)}")
        text = "\n\n".join(p for p in parts if p)
        if text.strip():
            yield Turn(session, uuid, role, text, ts, tags + tuple(extra))
        yield from (turn for turn in tools if turn is not None)

    def _tool_use(self, number: int, session: str, ts: int, tags: tuple[str, ...],
                  block: dict[str, Any]) -> Turn | None:
        call_id, name = block.get("id"), block.get("name")
        if not isinstance(call_id, str) or not call_id:
            self.report.skip(self._where(number), "a tool_use block without an id")
            return None
        name = name if isinstance(name, str) and name else "unknown"
        self.tool_names[call_id] = name
        content = f"[tool_use {name}]\n{as_text(block.get('input', {}))}"
        return Turn(session, f"tool_use:{call_id}", "assistant", content, ts,
                    tags + ("tool_use", f"tool:{name}"), tool_call_id=call_id)

    def _tool_result(self, number: int, session: str, ts: int, tags: tuple[str, ...],
                     block: dict[str, Any]) -> Turn | None:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            self.report.skip(self._where(number), "a tool_result block without a tool_use_id")
            return None
        text = _result_text(block.get("content"))
        error = block.get("is_error") is True
        name = self.tool_names.get(call_id)
        more = ("tool_result",) + ((f"tool:{name}",) if name else ()) + (("error",) if error else ())
        return Turn(session, f"tool_result:{call_id}", "user", ("[error] " if error else "") + text, ts,
                    tags + more, tool_call_id=call_id, relations=(("depends_on", f"tool_use:{call_id}"),))

    def _summaries(self, lines: list[tuple[int, dict[str, Any]]]) -> Iterator[Turn]:
        session = self.session or f"{NAME}:{os.path.splitext(os.path.basename(self.path))[0]}"
        for number, line in lines:
            text, leaf = line.get("summary"), line.get("leafUuid")
            if not isinstance(text, str) or not text.strip():
                self.report.skip(self._where(number), "a summary line without a summary")
                continue
            leaf = leaf if isinstance(leaf, str) and leaf else f"line-{number}"
            ts = self.times.get(leaf) or self.last_time or file_time(self.path)
            yield Turn(session, f"summary:{leaf}", "system", text, ts, (NAME, *self._project(), "summary"),
                       kind="summary", summary=text)


def _placeholder(kind: str, block: dict[str, Any]) -> str:
    source = block.get("source")
    if not isinstance(source, dict):
        source = {}
    media = source.get("media_type") or source.get("type") or "unknown type"
    size = len(source.get("data") or "") * 3 // 4
    title = block.get("title")
    named = f" '{title}'" if isinstance(title, str) and title else ""
    return f"[{kind}{named}: {media}" + (f", about {size} bytes]" if size else "]")


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
                parts.append(item["text"])
            elif isinstance(item, dict) and item.get("type") in ("image", "document"):
                parts.append(_placeholder(item["type"], item))
            else:
                parts.append(as_text(item))
        return "\n".join(parts)
    return "" if content is None else as_text(content)


def _name(kind: Any) -> str:
    return f"'{kind[:40]}'" if isinstance(kind, str) else "(none)"
