"""docs/tools.md is the contract: its parameter tables must equal what the server lists.

Every table headed ``| parameter | type | required | default | bounds | meaning |``
is read under the tool (``## name``) and view (``### view=…``) it belongs to.
For every tool the test compares the tables with the ``inputSchema`` the
server lists through a real MCP client — parameter names and their order,
JSON types, the required set, defaults, ``minimum``/``maximum``, ``enum`` —
and, for what a JSON Schema cannot say, with the declaration in
:mod:`server.tools`: byte bounds of strings, "no NUL", JSON-text parameters
and their defaults, the views a parameter belongs to.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client

from eventstore import errors
from server.app import build_server
from server.schema import Param
from server.tools import BY_NAME

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "tools.md")
HEADER = ["parameter", "type", "required", "default", "bounds", "meaning"]
NO_DEFAULT = "—"


@dataclass(frozen=True)
class Row:
    tool: str
    view: str | None
    cells: dict[str, str]
    line: int

    @property
    def name(self) -> str:
        return self.cells["parameter"].strip("`")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_doc() -> str:
    with open(DOC, encoding="utf-8") as fh:
        return fh.read()


def parameter_rows(text: str) -> list[Row]:
    """Every row of every parameter table, with the tool and view sections it sits in."""
    rows: list[Row] = []
    tool: str | None = None
    view: str | None = None
    in_code, in_table = False, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        if line.startswith("## "):
            tool, view = line[3:].strip(), None
        elif line.startswith("### "):
            heading = line[4:].strip()
            view = heading.removeprefix("view=") if heading.startswith("view=") else None
        if not line.startswith("|"):
            in_table = False
        elif cells(line) == HEADER:
            in_table = True
        elif in_table and not set(line) <= set("|-: "):
            assert tool is not None, f"line {number}: a parameter table outside a tool section"
            rows.append(Row(tool, view, dict(zip(HEADER, cells(line), strict=True)), number))
    return rows


# ------------------------------------------------------------- the facts
def doc_facts(row: Row) -> dict[str, Any]:
    """What one row of the doc says about its parameter."""
    c = row.cells
    type_cell = c["type"]
    kind = re.fullmatch(r"(string|integer)(?: \((.+)\))?", type_cell)
    assert kind, f"line {row.line}: type {type_cell!r} is not 'string' or 'integer' (with a note)"
    json_text = kind.group(2).removeprefix("JSON ") if (kind.group(2) or "").startswith("JSON ") else None
    assert c["required"] in ("yes", "no"), f"line {row.line}: required must be yes or no"
    facts: dict[str, Any] = {"type": kind.group(1), "json_text": json_text, "required": c["required"] == "yes",
                             "default": None, "minimum": None, "maximum": None, "enum": None,
                             "min_bytes": None, "max_bytes": None, "no_nul": False}
    if c["default"] != NO_DEFAULT:
        literal = re.fullmatch(r"`([^`]+)`", c["default"])
        assert literal, f"line {row.line}: default must be {NO_DEFAULT} or one `literal`"
        facts["default"] = json.loads(literal.group(1))
    bounds = c["bounds"]
    if m := re.fullmatch(r"(\d+)–(\d+)", bounds):
        facts["minimum"], facts["maximum"] = int(m.group(1)), int(m.group(2))
    elif m := re.fullmatch(r"≥ (\d+)", bounds):
        facts["minimum"] = int(m.group(1))
    elif m := re.fullmatch(r"(\d+)–(\d+) bytes(, no NUL)?", bounds):
        facts["min_bytes"], facts["max_bytes"] = int(m.group(1)), int(m.group(2))
        facts["no_nul"] = bool(m.group(3))
    elif re.fullmatch(r"`[^`]+`( / `[^`]+`)+", bounds):
        facts["enum"] = re.findall(r"`([^`]+)`", bounds)
    return facts


def code_facts(schema: dict, param: Param) -> dict[str, Any]:
    """The same facts from the listed inputSchema, and from the declaration where the schema is silent."""
    prop = schema["properties"][param.name]
    required = param.required if param.views else param.name in schema["required"]
    default = prop.get("default")
    if param.json_text:
        assert "default" not in prop, f"{param.name}: a JSON-text default is stated in the description"
        default = None if param.default is None else json.loads(param.default)
    plain_string = prop["type"] == "string" and param.max_bytes is not None
    return {"type": prop["type"], "json_text": param.json_text or None, "required": required,
            "default": default, "minimum": prop.get("minimum"), "maximum": prop.get("maximum"),
            "enum": prop.get("enum"),
            "min_bytes": param.min_bytes if plain_string else None,
            "max_bytes": param.max_bytes if plain_string else None, "no_nul": param.no_nul}


@pytest.fixture(scope="module")
def listed_schemas(tmp_path_factory) -> dict[str, dict]:
    """The inputSchema of every tool, as a real MCP client sees it in tools/list."""
    import anyio

    async def list_tools() -> dict[str, dict]:
        store = str(tmp_path_factory.mktemp("docs") / "store")
        async with Client(build_server(store)) as client:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}
    return anyio.run(list_tools)


# ------------------------------------------------------------------ tests
def test_the_doc_has_a_section_for_every_tool_and_no_other_tool_section():
    headings = re.findall(r"^## (\S+)$", read_doc(), flags=re.M)
    tool_like = {h for h in headings if "_" in h}
    assert tool_like == set(BY_NAME)


def test_every_parameter_table_row_belongs_to_a_tool_section():
    for row in parameter_rows(read_doc()):
        assert row.tool in BY_NAME, f"line {row.line}: parameter table under '## {row.tool}'"


@pytest.mark.parametrize("tool", sorted(BY_NAME))
def test_the_doc_lists_exactly_the_listed_parameters_in_schema_order(tool, listed_schemas):
    rows = [r for r in parameter_rows(read_doc()) if r.tool == tool]
    documented = list(dict.fromkeys(r.name for r in rows))
    assert documented == list(listed_schemas[tool]["properties"])


@pytest.mark.parametrize("tool", sorted(BY_NAME))
def test_each_documented_parameter_has_the_type_required_flag_default_and_bounds_of_the_schema(
        tool, listed_schemas):
    schema = listed_schemas[tool]
    spec = BY_NAME[tool]
    rows = [r for r in parameter_rows(read_doc()) if r.tool == tool]
    for row in rows:
        param = spec.by_name.get(row.name)
        assert param is not None, f"line {row.line}: {tool} has no parameter {row.name}"
        assert doc_facts(row) == code_facts(schema, param), f"docs/tools.md line {row.line}: {tool}.{row.name}"
    required = sorted(r.name for r in rows if r.view is None and doc_facts(r)["required"])
    assert required == sorted(schema["required"])


@pytest.mark.parametrize("tool", sorted(BY_NAME))
def test_each_parameter_is_documented_under_exactly_the_views_it_belongs_to(tool):
    spec = BY_NAME[tool]
    rows = [r for r in parameter_rows(read_doc()) if r.tool == tool]
    views: dict[str, list[str | None]] = {}
    for row in rows:
        views.setdefault(row.name, []).append(row.view)
    for name, where in views.items():
        assert len(where) == len(set(where)), f"{tool}.{name} is documented twice in one section"
        expected: set[str | None] = set(spec.by_name[name].views) or {None}
        assert set(where) == expected, f"{tool}.{name}"
    if spec.selector is not None:
        sections = set(re.findall(r"^### view=(\S+)$", read_doc(), flags=re.M))
        assert sections == set(spec.by_name[spec.selector].enum)


def test_the_error_code_table_lists_every_error_code_of_the_server():
    text = read_doc()
    section = text.split("\n## Error codes\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", section, flags=re.M))
    codes = {cls.code for cls in vars(errors).values()
             if isinstance(cls, type) and issubclass(cls, errors.ConvMemError)}
    assert documented == codes


def test_every_json_example_in_the_doc_is_valid_json():
    blocks = re.findall(r"^```json\n(.*?)^```$", read_doc(), flags=re.M | re.S)
    assert len(blocks) >= 10
    for block in blocks:
        json.loads(block)


def test_the_doc_reader_sees_every_kind_of_bound():
    """Guards the parser itself: a table it silently skipped would check nothing."""
    rows = parameter_rows(read_doc())
    facts = [doc_facts(r) for r in rows]
    assert any(f["maximum"] is not None for f in facts)
    assert any(f["minimum"] is not None and f["maximum"] is None for f in facts)
    assert any(f["max_bytes"] is not None and f["no_nul"] for f in facts)
    assert any(f["enum"] for f in facts)
    assert any(f["json_text"] == "array" for f in facts)
    assert len(rows) >= sum(len(s.params) for s in BY_NAME.values())
