"""A tool's parameters, declared once: its JSON Schema and its argument parsing come from them.

A :class:`Param` says everything about one parameter — JSON type, whether it is
required, its default, its bounds, its description, the value check of
:mod:`server.validation` it needs.  A :class:`ToolSpec` lists its parameters and
derives both the ``inputSchema`` that ``tools/list`` shows and :meth:`ToolSpec.parse`,
which turns raw ``arguments`` into checked values, so the two cannot disagree.

Parsing, in this order (the first failure is the error; docs/tools.md §Common rules):

1. ``arguments`` must be an object (``null`` counts as ``{}``) with no unknown key;
2. a tool with views (``read_messages``) reads its selector parameter first and
   refuses a parameter of another view;
3. every required parameter must be present;
4. required values are checked, then the tool's "at least one of" group, then the
   optional values.  An absent parameter takes its default, checked like a given one.

No ``mcp`` import here: :mod:`server.app` wraps these in MCP types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from eventstore.errors import ValidationError

from . import validation as v
from .principals import LOCAL, Principal

if TYPE_CHECKING:
    from .service import MemoryService

Args = dict[str, Any]
"""Checked argument values by parameter name, every parameter of the call included."""


@dataclass(frozen=True, kw_only=True)
class Param:
    """One tool parameter."""

    name: str
    type: Literal["string", "integer"]          # its JSON type
    description: str
    required: bool = False
    default: Any = None             # the JSON value an absent parameter stands for; None: no default
    minimum: int | None = None      # integers
    maximum: int | None = None
    min_bytes: int = 0              # strings, in UTF-8 bytes (not in the schema: JSON Schema counts characters)
    max_bytes: int | None = None
    no_nul: bool = False
    enum: tuple[str, ...] = ()
    check: Callable[[Any, str], Any] | None = None   # a value check of server.validation, given (value, name)
    json_text: str = ""             # "object"/"array": the string holds JSON of that type, parsed by `check`
    views: tuple[str, ...] = ()     # of a tool with views: the views it belongs to (empty: every view)

    def __post_init__(self) -> None:
        plain = self.type == "string" and self.check is None and not self.enum
        if plain and self.max_bytes is None:
            raise TypeError(f"{self.name}: a plain string parameter needs max_bytes")
        if self.json_text and self.check is None:
            raise TypeError(f"{self.name}: a JSON text parameter needs its check")

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of the parameter.

        The default of a JSON-text parameter is itself a JSON text and is stated in
        the description, not as a schema ``default``.
        """
        out: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.enum:
            out["enum"] = list(self.enum)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.default is not None and not self.json_text:
            out["default"] = self.default
        return out

    def parse(self, value: Any) -> Any:
        """The checked value; ``ValidationError`` naming the parameter when it is not acceptable."""
        if self.check is not None:
            return self.check(value, self.name)
        if self.type == "integer":
            return v.integer(value, self.name, self.minimum, self.maximum)
        if self.enum:
            return v.choice(value, self.name, self.enum)
        assert self.max_bytes is not None                   # __post_init__ saw to it
        return v.text(value, self.name, min_bytes=self.min_bytes, max_bytes=self.max_bytes, no_nul=self.no_nul)

    def value(self, args: Mapping[str, Any]) -> Any:
        """The checked value given in ``args``, else the checked default (None when there is none)."""
        if self.name in args:
            return self.parse(args[self.name])
        return None if self.default is None else self.parse(self.default)

    def belongs(self, view: str) -> bool:
        return not self.views or view in self.views


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """One tool: its parameters, its MCP annotations, and the service call it makes."""

    name: str
    description: str
    params: tuple[Param, ...]
    handler: Callable[[MemoryService, Args, Principal], dict]
    read_only: bool                 # MCP annotations (open_world is always false)
    destructive: bool
    idempotent: bool
    writes: bool                    # runs on the single writer thread
    brief: bool = False             # one message's write: over stdio a lone one runs where it was read
    at_least_one: tuple[str, ...] = ()      # parameters of which at least one must be given
    selector: str | None = None     # the parameter choosing a view; views are its enum
    by_name: Mapping[str, Param] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {p.name: p for p in self.params})

    @cached_property
    def schema(self) -> dict[str, Any]:
        """The ``inputSchema``: a closed object of the parameters, ``required`` listing the required ones.

        A view's required parameters are not listed: they are required only in that view.
        """
        return {"type": "object", "properties": {p.name: p.schema() for p in self.params},
                "required": [p.name for p in self.params if p.required and not p.views],
                "additionalProperties": False}

    def parse(self, arguments: Any) -> Args:
        """Checked values of every parameter of the call (of the chosen view, for a tool with views)."""
        args = v.check_keys(arguments, self.by_name)
        out: Args = {}
        params = self.params
        if self.selector is not None:
            view = out[self.selector] = self.by_name[self.selector].value(args)
            for key in args:
                if not self.by_name[key].belongs(view):
                    raise ValidationError(f"{key}: is not a parameter of the {view} view")
            params = tuple(p for p in params if p.belongs(view))
        for p in params:
            if p.required and p.name not in args:
                raise ValidationError(f"{p.name}: is required")
        for p in params:
            if p.required:
                out[p.name] = p.value(args)
        if self.at_least_one and not any(name in args for name in self.at_least_one):
            raise ValidationError(f"{', '.join(self.at_least_one)}: at least one is required")
        for p in params:
            if p.name not in out:
                out[p.name] = p.value(args)
        return out

    def call(self, service: MemoryService, arguments: Any, principal: Principal = LOCAL) -> dict:
        """Check ``arguments`` and make the tool's one service call as ``principal``; returns the JSON body."""
        return self.handler(service, self.parse(arguments), principal)
