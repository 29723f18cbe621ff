"""OpenAI Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Lines ``{timestamp, type, payload}``.  The mapping (docs/import.md has an example):

* ``session_meta`` names the session: ``codex:<payload.id>`` (before it, or
  without one, the id in the file name ``rollout-<time>-<id>.jsonl``);
* ``response_item`` ``message``: a message of its role (``developer`` →
  system), the text of its ``input_text``/``output_text`` parts (an image a
  placeholder), key ``item:<id>`` when the item carries its own ``id``, else
  ``line:<n>`` (for rollouts that leave item ids out; a rollout is only
  ever appended to, so a line keeps its number);
* ``function_call``/``custom_tool_call``: an assistant message ``[tool_use
  NAME] <arguments>``, ``tool_call_id`` = ``call_id``, key ``tool_use:<call_id>``;
* ``function_call_output``/``custom_tool_call_output``: a user message with
  the output, ``tool_call_id``, ``depends_on`` its call, key ``tool_result:<call_id>``;
* ``reasoning``: its summary text, only with ``--thinking`` (see claude-code);
* ``compacted``: a ``summary`` message with the compaction's text;
* ``turn_context`` (model, cwd, policies): no message; its model tags the
  messages after it (``model:<name>``);
* ``event_msg``: no message (user and agent messages are repeated there from
  the response items; the rest is progress and token counts): ignored.

Older rollouts (before ``session_meta``) hold a first line ``{id, timestamp,
instructions}`` and the items themselves as lines: read the same way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from .options import Options
from .reading import file_time, jsonl, restored, saved
from .turns import Report, Turn, as_text, parse_time, text_of

NAME = "codex"
DEFAULTS = ("~/.codex/sessions/**/rollout-*.jsonl",)
PATTERN = "rollout-*.jsonl"
FLAGS = ("thinking",)                    # the options of `convmem import` that apply
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_ITEM_TYPES = {"message", "function_call", "function_call_output", "custom_tool_call",
               "custom_tool_call_output", "reasoning", "local_shell_call", "web_search_call"}


def read(files: list[str], report: Report, options: Options) -> Iterator[Turn | list[Turn]]:
    for path in files:
        yield from _Rollout(path, report, options).turns()


def parser(path: str, report: Report, options: Options) -> _Rollout:
    """The reader of one rollout, to feed it lines part by part (``lines``,
    then ``end``) and carry its ``state`` from one part to the next."""
    return _Rollout(path, report, options)


class _Rollout:
    # what the reader remembers from the lines read, carried from one part to the next
    STATE: dict[str, type | tuple[type, ...]] = {
        "session": str, "last_time": int, "model": (str, type(None)), "tool_names": dict}

    def __init__(self, path: str, report: Report, options: Options) -> None:
        self.path, self.report, self.options = path, report, options
        found = _UUID.findall(os.path.basename(path))
        self.session = f"{NAME}:{found[-1] if found else os.path.splitext(os.path.basename(path))[0]}"
        self.last_time = 0
        self.model: str | None = None
        self.tool_names: dict[str, str] = {}

    def turns(self) -> Iterator[Turn]:
        yield from self.lines(jsonl(self.path, self.report))

    def end(self, final: bool = False) -> Iterator[Turn]:
        """Nothing waits for the end of a rollout."""
        return iter(())

    def state(self) -> dict[str, Any]:
        return saved(self, self.STATE)

    def restore(self, state: dict[str, Any]) -> None:
        """Take up the ``state`` of an earlier part (ValueError: not one)."""
        restored(self, self.STATE, state, "codex")

    def lines(self, numbered: Iterable[tuple[int, dict[str, Any]]]) -> Iterator[Turn]:
        """The turns of lines read."""
        for number, line in numbered:
            kind, payload = line.get("type"), line.get("payload")
            ts = parse_time(line.get("timestamp"))
            self.last_time = ts or self.last_time or file_time(self.path)
            if kind == "session_meta" and isinstance(payload, dict):
                self._meta(payload)
            elif kind == "response_item" and isinstance(payload, dict):
                yield from self._item(number, payload)
            elif kind == "compacted" and isinstance(payload, dict):
                yield from self._compacted(number, payload)
            elif kind == "turn_context" and isinstance(payload, dict):
                model = payload.get("model")
                self.model = model if isinstance(model, str) and model else self.model
            elif kind in ("event_msg", "session_meta", "response_item", "turn_context", "compacted"):
                self.report.ignored += 1           # event_msg, or one without a payload object
            elif kind in _ITEM_TYPES:
                yield from self._item(number, line)      # an older rollout: the item is the line
            elif kind is None and number == 1 and "id" in line:
                self._meta(line)
            elif line.get("record_type") is not None:
                self.report.ignored += 1
            else:
                self.report.skip(f"{self.path}:{number}", "unknown line type")

    def _meta(self, payload: dict[str, Any]) -> None:
        sid = payload.get("id")
        if isinstance(sid, str) and sid:
            self.session = f"{NAME}:{sid}"
        self.report.ignored += 1

    def _tags(self, *more: str) -> tuple[str, ...]:
        return (NAME, *((f"model:{self.model}",) if self.model else ()), *more)

    def _item(self, number: int, item: dict[str, Any]) -> Iterator[Turn]:
        kind, key = item.get("type"), _key(item, number)
        if kind == "message":
            role = _ROLES.get(text_of(item, "role") or "")
            if role is None:
                self.report.skip(f"{self.path}:{number}", "a message without a known role")
                return
            text = _content_text(item.get("content"))
            if text.strip():
                yield Turn(self.session, key, role, text, self.last_time, self._tags())
            else:
                self.report.ignored += 1
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            yield from self._call(number, item)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            yield from self._output(number, item)
        elif kind == "reasoning":
            text = "\n\n".join(_texts(item.get("summary")) or _texts(item.get("content")))
            if self.options.thinking and text.strip():
                yield Turn(self.session, key, "assistant", "[thinking]\n" + text, self.last_time,
                           self._tags("thinking"))
            else:
                self.report.ignored += 1
        else:
            self.report.ignored += 1            # web searches, and item types added later

    def _call(self, number: int, item: dict[str, Any]) -> Iterator[Turn]:
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str) or not call_id:
            self.report.skip(f"{self.path}:{number}", "a tool call without a call_id")
            return
        name = item.get("name") if isinstance(item.get("name"), str) else item.get("type", "tool")
        name = str(name) or "tool"
        self.tool_names[call_id] = name
        args = item.get("arguments", item.get("input", item.get("action", "")))
        yield Turn(self.session, f"tool_use:{call_id}", "assistant", f"[tool_use {name}]\n{as_text(args)}",
                   self.last_time, self._tags("tool_use", f"tool:{name}"), tool_call_id=call_id)

    def _output(self, number: int, item: dict[str, Any]) -> Iterator[Turn]:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            self.report.skip(f"{self.path}:{number}", "a tool output without a call_id")
            return
        output = item.get("output")
        if isinstance(output, dict) and "content" in output:
            output = output["content"]
        name = self.tool_names.get(call_id)
        yield Turn(self.session, f"tool_result:{call_id}", "user", as_text(output if output is not None else ""),
                   self.last_time, self._tags("tool_result", *((f"tool:{name}",) if name else ())),
                   tool_call_id=call_id, relations=(("depends_on", f"tool_use:{call_id}"),))

    def _compacted(self, number: int, payload: dict[str, Any]) -> Iterator[Turn]:
        text = payload.get("message")
        if isinstance(text, str) and text.strip():
            yield Turn(self.session, f"line:{number}", "system", text, self.last_time,
                       self._tags("compacted"), kind="summary", summary=text)
        else:
            self.report.ignored += 1


def _key(item: dict[str, Any], number: int) -> str:
    """A message's or reasoning's import key: the item's own ``id`` when the
    rollout has one (a resumed session that copies items keeps it), else
    its line."""
    own = item.get("id")
    return f"item:{own}" if isinstance(own, str) and own else f"line:{number}"


def _texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif part.get("type") in ("input_image", "image"):
            parts.append("[image]")
    return "\n\n".join(parts)
