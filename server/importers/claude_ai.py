"""A Claude.ai data export: ``conversations.json``, or the export zip holding it.

A list of conversations ``{uuid, name, summary, created_at, chat_messages}``,
each message ``{uuid, sender, text, content[], created_at, attachments,
files}``.  The mapping (docs/import.md has an example):

* session ``claude-ai:<conversation uuid>``; the conversation's ``name``
  (or its ``summary``) is the ``summary`` of its first message;
* each chat message: key ``<message uuid>``, ``human`` → user, ``assistant``
  → assistant; its text from the ``content`` blocks (``text``; ``thinking``
  only with ``--thinking``; ``tool_use`` as ``[tool_use NAME] <input>``;
  ``tool_result`` as ``[tool_result NAME] <text>``; others as a placeholder),
  or ``text`` when there are no blocks; each attachment appended as
  ``[attachment NAME]`` and its extracted text, each file as ``[file NAME]``;
* time: the message's ``created_at``; missing, the previous message's, else
  the conversation's, else the file's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .options import Options
from .reading import conversations
from .turns import Report, Turn, as_text, parse_time, text_of

NAME = "claude-ai"
DEFAULTS: tuple[str, ...] = ()           # no default place: an export is wherever it was saved
PATTERN = "conversations.json"
FLAGS = ("thinking",)                    # the options of `convmem import` that apply
_ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def read(files: list[str], report: Report, options: Options) -> Iterator[Turn | list[Turn]]:
    for where, conv, fallback in conversations(files, report):
        if not isinstance(conv.get("uuid"), str) or not conv["uuid"]:
            report.skip(where, "a conversation without a uuid")
            continue
        yield from _conversation(where, conv, report, options, fallback)


def _conversation(where: str, conv: dict[str, Any], report: Report, options: Options,
                  fallback: int) -> Iterator[Turn]:
    messages = conv.get("chat_messages")
    if not isinstance(messages, list):
        report.skip(where, "a conversation without chat_messages")
        return
    title = next((conv[k] for k in ("name", "summary") if isinstance(conv.get(k), str) and conv[k]), None)
    last = parse_time(conv.get("created_at")) or fallback
    first = True
    for number, msg in enumerate(messages, 1):
        here = f"{where}:message {number}"
        if not isinstance(msg, dict) or not isinstance(msg.get("uuid"), str) or not msg["uuid"]:
            report.skip(here, "a message without a uuid")
            continue
        role = _ROLES.get(text_of(msg, "sender") or "")
        if role is None:
            report.skip(here, "a message whose sender is neither human nor assistant")
            continue
        last = parse_time(msg.get("created_at")) or last
        text, tags = _text(msg, options)
        if not text.strip():
            report.ignored += 1
            continue
        yield Turn(f"{NAME}:{conv['uuid']}", msg["uuid"], role, text, last, (NAME, *tags),
                   summary=title if first else None)
        first = False


def _text(msg: dict[str, Any], options: Options) -> tuple[str, tuple[str, ...]]:
    parts: list[str] = []
    tags: list[str] = []
    blocks = msg.get("content")
    if isinstance(blocks, list) and blocks:
        for block in blocks:
            text, tag = _block(block, options)
            parts.append(text)
            tags += tag
    elif isinstance(msg.get("text"), str):
        parts.append(msg["text"])
    for item in msg.get("attachments") or ():
        if isinstance(item, dict):
            name = item.get("file_name") or "unnamed"
            body = item.get("extracted_content")
            parts.append(f"[attachment {name}]" + (f"\n{body}" if isinstance(body, str) and body else ""))
            tags.append("attachment")
    for item in msg.get("files") or ():
        if isinstance(item, dict):
            parts.append(f"[file {item.get('file_name') or 'unnamed'}]")
    return "\n\n".join(p for p in parts if p), tuple(dict.fromkeys(tags))


def _block(block: Any, options: Options) -> tuple[str, tuple[str, ...]]:
    if not isinstance(block, dict):
        return "", ()
    kind = block.get("type")
    if kind == "text":
        return (block["text"], ()) if isinstance(block.get("text"), str) else ("", ())
    if kind == "thinking":
        text = block.get("thinking")
        if options.thinking and isinstance(text, str) and text:
            return "[thinking]\n" + text, ("thinking",)
        return "", ()
    name = block.get("name") if isinstance(block.get("name"), str) and block.get("name") else "tool"
    if kind == "tool_use":
        return f"[tool_use {name}]\n{as_text(block.get('input', {}))}", ("tool_use", f"tool:{name}")
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            content = "\n".join(c["text"] if isinstance(c, dict) and isinstance(c.get("text"), str)
                                else as_text(c) for c in content)
        return f"[tool_result {name}]\n{as_text(content or '')}", ("tool_result", f"tool:{name}")
    return f"[{kind if isinstance(kind, str) else 'unknown'} block]", ()
