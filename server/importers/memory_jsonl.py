"""The official MCP memory server's knowledge graph (``memory.jsonl``; its
location is ``$MEMORY_FILE_PATH`` when set).

Lines ``{"type":"entity","name","entityType","observations"}`` and
``{"type":"relation","from","to","relationType"}``.  The mapping
(docs/import.md has an example):

* session ``memory-jsonl:<file name without extension>``;
* each entity: one ``semantic`` message (tier ``long``), role ``system``, key
  ``entity:<name>``, content ``NAME (TYPE)`` then one ``- observation`` line
  each and one ``→ relationType: TARGET`` line per relation from it (the
  original relation type is kept there word for word), tags
  ``entity-type:<type>`` and ``relation-type:<type>`` for each of its
  relation types;
* each relation: a typed relation from its ``from`` entity's message to its
  ``to`` entity's: ``relationType`` mapped onto our four types by its words
  (depends/requires/uses/needs → ``depends_on``; derived/based/created
  from/part of → ``derived_from``; supersedes/replaces → ``supersedes``;
  anything else → ``related_to``); an entity a relation names that the file
  does not hold (the memory server does not require it to exist) gets a
  message of its own, ``NAME`` and a line saying so, tagged
  ``created-by-import`` (a note on stderr, not a skip: nothing is lost);
* time: none in the format: the file's modification time.

The graph is written in one transaction (relations may point forward).  An
entity already imported whose message the graph now gives differently (it
gained observations or relations, or lost some) is updated in place (an
update event: content, tags and relations as the graph has them now; its
importance and tier as they are); an entity no longer in the graph is left
alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from .options import Options
from .reading import file_time, jsonl
from .turns import Report, Turn, text_of

NAME = "memory-jsonl"
CREATED_TAG = "created-by-import"        # an entity named by a relation only
DEFAULTS = ("$MEMORY_FILE_PATH",)
PATTERN = "*.jsonl"
FLAGS: tuple[str, ...] = ()              # the options of `convmem import` that apply
_WORDS = (("depends_on", ("depend", "require", "use", "need", "call", "import")),
          ("derived_from", ("derive", "based", "created_from", "part_of", "child_of", "instance_of",
                            "fork", "copy", "extend")),
          ("supersedes", ("supersede", "replace", "obsolete", "deprecate")))


def relation_type(name: str) -> str:
    """Our relation type for a memory-graph ``relationType``."""
    words = re.sub(r"[^a-z]+", "_", re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower())
    for ours, stems in _WORDS:
        if any(stem in words for stem in stems):
            return ours
    return "related_to"


def read(files: list[str], report: Report, options: Options) -> Iterator[Turn | list[Turn]]:
    for path in files:
        yield _graph(path, report)


def _graph(path: str, report: Report) -> list[Turn]:
    entities: dict[str, dict[str, Any]] = {}
    relations: list[tuple[int, str, str, str]] = []
    for number, line in jsonl(path, report):
        where, kind = f"{path}:{number}", line.get("type")
        if kind == "entity":
            name = line.get("name")
            if not isinstance(name, str) or not name:
                report.skip(where, "an entity without a name")
                continue
            found = entities.setdefault(name, {"type": None, "observations": []})
            etype = line.get("entityType")
            found["type"] = etype if isinstance(etype, str) and etype else found["type"]
            obs = line.get("observations")
            found["observations"] += [o for o in obs if isinstance(o, str)] if isinstance(obs, list) else []
        elif kind == "relation":
            src, dst, rtype = (text_of(line, k) for k in ("from", "to", "relationType"))
            if src is None or dst is None or rtype is None:
                report.skip(where, "a relation without from, to and relationType")
                continue
            relations.append((number, src, dst, rtype))
        else:
            report.skip(where, "neither an entity nor a relation")
    out: dict[str, list[tuple[str, str]]] = {name: [] for name in entities}
    for number, src, dst, rtype in relations:
        for name in (src, dst):
            if name not in entities:
                entities[name] = {"type": None, "observations": [], "implied": True}
                out[name] = []
                report.note(f"{path}:{number}", "a relation names an entity the file does not hold: "
                                                f"an entity message created for it, tagged {CREATED_TAG}")
        out[src].append((rtype, dst))
    session = f"{NAME}:{os.path.splitext(os.path.basename(path))[0]}"
    when = file_time(path)
    return [_entity(session, name, entity, out[name], when) for name, entity in entities.items()]


def _entity(session: str, name: str, entity: dict[str, Any], rels: list[tuple[str, str]], when: int) -> Turn:
    etype = entity["type"] or "unknown"
    if entity.get("implied"):
        lines = [name, "(named by a relation; the graph holds no entity of this name)"]
        kinds: tuple[str, ...] = (CREATED_TAG,)
    else:
        lines = [f"{name} ({etype})"] + [f"- {o}" for o in entity["observations"]]
        kinds = (f"entity-type:{etype}",)
    lines += [f"→ {rtype}: {dst}" for rtype, dst in rels]
    tags = (NAME, *kinds, *(f"relation-type:{rtype}" for rtype, _ in rels))
    return Turn(session, f"entity:{name}", "system", "\n".join(lines), when, tags, kind="semantic",
                relations=tuple((relation_type(rtype), f"entity:{dst}") for rtype, dst in rels), updatable=True)
