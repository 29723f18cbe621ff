"""A ChatGPT data export: ``conversations.json``, or the export zip holding it.

A list of conversations ``{id|conversation_id, title, create_time, mapping,
current_node}``; ``mapping`` is a tree of nodes ``{id, message, parent,
children}``.  The mapping (docs/import.md has an example):

* session ``chatgpt:<conversation id>``; the title is the ``summary`` of the
  conversation's first message;
* the visible thread: from ``current_node`` up through ``parent`` to the
  root, then read oldest first; a regenerated answer or an edited question
  left on a side branch is skipped (``--branches`` imports every node, in
  time order, side branches tagged ``branch``);
* each node with a message: key ``<node id>``, role from ``author.role``
  (``tool`` → user, tagged ``tool_result`` and ``tool:<author.name>``: tool
  output is the model's input), the text of ``content`` (``parts`` strings;
  ``text`` of code and execution output; an image or file pointer a
  placeholder; ``thoughts`` — with ``--thinking`` only); hidden or empty
  messages (the blank system root) are left out;
* time: the message's ``create_time`` (seconds); missing, the previous
  message's, else the conversation's ``create_time``, else the file's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from .options import Options
from .reading import conversations
from .turns import Report, Turn, as_text, dict_of, list_of, parse_time, text_of

NAME = "chatgpt"
DEFAULTS: tuple[str, ...] = ()           # no default place: an export is wherever it was saved
PATTERN = "conversations.json"
FLAGS = ("thinking", "branches")         # the options of `convmem import` that apply
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "user"}


def read(files: list[str], report: Report, options: Options) -> Iterator[Turn | list[Turn]]:
    for where, conv, fallback in conversations(files, report):
        yield from _conversation(where, conv, report, options, fallback)


def _conversation(where: str, conv: dict[str, Any], report: Report, options: Options,
                  fallback: int) -> Iterator[Turn]:
    cid = conv.get("conversation_id") or conv.get("id")
    mapping = conv.get("mapping")
    if not isinstance(cid, str) or not cid or not isinstance(mapping, dict):
        report.skip(where, "a conversation without an id or a mapping")
        return
    visible = _thread(mapping, conv.get("current_node"))
    if options.branches:
        order = sorted((n for n in mapping if isinstance(mapping[n], dict)),
                       key=lambda n: (_time(mapping[n]) or 0, n not in visible))
    else:
        order = [n for n in reversed(visible) if n in mapping]
    title = conv.get("title") if isinstance(conv.get("title"), str) else None
    last = parse_time(conv.get("create_time")) or fallback
    first = True
    for node_id in order:
        node = mapping[node_id]
        msg = node.get("message") if isinstance(node, dict) else None
        if not isinstance(msg, dict):
            continue
        last = _time(node) or last
        turn = _turn(f"{where}:{node_id}", f"{NAME}:{cid}", node_id, msg, last, report, options)
        if turn is None:
            continue
        branch = ("branch",) if node_id not in visible else ()
        yield replace(turn, tags=turn.tags + branch, summary=title if first and title else None)
        first = False


def _thread(mapping: dict[str, Any], current: Any) -> list[str]:
    """Node ids from ``current`` up to the root (newest first); a cycle ends it."""
    if not isinstance(current, str) or current not in mapping:
        leaves = [n for n, v in mapping.items() if isinstance(v, dict) and not v.get("children")]
        current = max(leaves, key=lambda n: _time(mapping[n]) or 0, default=None)
    out: list[str] = []
    seen: set[str] = set()
    while isinstance(current, str) and current in mapping and current not in seen:
        seen.add(current)
        out.append(current)
        node = mapping[current]
        current = node.get("parent") if isinstance(node, dict) else None
    return out


def _time(node: Any) -> int | None:
    msg = node.get("message") if isinstance(node, dict) else None
    return parse_time(msg.get("create_time")) if isinstance(msg, dict) else None


def _turn(where: str, session: str, node_id: str, msg: dict[str, Any], ts: int, report: Report,
          options: Options) -> Turn | None:
    author, meta = dict_of(msg, "author"), dict_of(msg, "metadata")
    role = _ROLES.get(text_of(author, "role") or "")
    if role is None:
        report.skip(where, "a message whose author role is unknown")
        return None
    if meta.get("is_visually_hidden_from_conversation"):
        return None
    text, tags = _content(msg.get("content"), options)
    if not text.strip():
        return None
    if author.get("role") == "tool":
        name = author.get("name")
        tags += ("tool_result",) + ((f"tool:{name}",) if isinstance(name, str) and name else ())
    model = text_of(meta, "model_slug")
    if model:
        tags += (f"model:{model}",)
    return Turn(session, node_id, role, text, ts, (NAME, *tags))


def _content(content: Any, options: Options) -> tuple[str, tuple[str, ...]]:
    """(text, extra tags) of a message's content, whatever its content_type."""
    if not isinstance(content, dict):
        return "", ()
    kind = content.get("content_type")
    if kind == "thoughts":
        texts = [t.get("content", "") for t in list_of(content, "thoughts") if isinstance(t, dict)]
        text = "\n\n".join(t for t in texts if isinstance(t, str))
        return ("[thinking]\n" + text, ("thinking",)) if options.thinking and text.strip() else ("", ())
    if kind == "reasoning_recap":
        return "", ()
    parts = content.get("parts")
    if isinstance(parts, list):
        return "\n\n".join(_part(p) for p in parts if p not in (None, "")), ()
    for field in ("text", "result"):
        if isinstance(content.get(field), str):
            return content[field], ()
    if kind == "user_editable_context":
        texts = [content.get(k) for k in ("user_profile", "user_instructions")]
        return "\n\n".join(t for t in texts if isinstance(t, str) and t), ()
    return as_text({k: v for k, v in content.items() if k != "content_type"}), ()


def _part(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        kind = part.get("content_type")
        if kind == "image_asset_pointer":
            return f"[image: {part.get('width', '?')}x{part.get('height', '?')}]"
        if isinstance(part.get("text"), str):
            return part["text"]
        return f"[{kind or 'attachment'}]"
    return as_text(part)
