"""The product uses its dependencies through their public API only: no
module of ``eventstore/``, ``projections/`` or ``server/`` imports a
``_private`` name of a module that is not ours (a third-party package or the
standard library), reads one as an attribute of such a module, or reaches a
``_private`` attribute that none of our own code defines — which can only be
a dependency's (``client._process_msg``, ``sub._id``): a patch release could
rename it without a test failing first.

Found with ``ast`` alone (no import runs): a module is *foreign* when its top
name is not one of our packages; names bound by importing one are followed
through ``import x as y`` and ``from x import y``.
"""

from __future__ import annotations

import ast
import os

import pytest
from helpers import ROOT, modules, parsed

OURS = ("eventstore", "projections", "server", "tools", "tests")
PRODUCT = ("eventstore", "projections", "server")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign(module: str | None, level: int) -> bool:
    return not level and module is not None and module.split(".")[0] not in OURS


def _ours_defined() -> set[str]:
    """Every ``_name`` our own code defines: functions, classes, attributes
    assigned (``self._name = …``), class-body and module names, slots."""
    names: set[str] = set()
    for package in PRODUCT:
        for path in modules(package):
            for node in ast.walk(parsed(path)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                      and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    names.add(node.attr)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
                elif (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                           for t in node.targets)):
                    names.update(c.value for c in ast.walk(node.value)
                                 if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return {n for n in names if _private(n)} | NAMEDTUPLE


NAMEDTUPLE = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}   # public, named so to keep clear of fields
DOCUMENTED = {"os._exit"}        # underscored, and documented as the public way to do it


OURS_DEFINED = _ours_defined()


def internals(source: str) -> list[str]:
    """What a module's ``source`` reaches of its dependencies' private names, each as ``line: what``."""
    tree = ast.parse(source)
    found: list[str] = []
    foreign: set[str] = set()           # local names bound to a foreign module (or one of its names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _foreign(alias.name, 0):
                    if any(map(_private, alias.name.split("."))):
                        found.append(f"{node.lineno}: import {alias.name}")
                    foreign.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and _foreign(node.module, node.level):
            assert node.module is not None
            for alias in node.names:
                if _private(alias.name) or any(map(_private, node.module.split("."))):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                foreign.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in foreign:
            if f"{base.id}.{node.attr}" not in DOCUMENTED:
                found.append(f"{node.lineno}: {base.id}.{node.attr}")
        elif node.attr not in OURS_DEFINED:
            found.append(f"{node.lineno}: ….{node.attr} (defined by none of our modules)")
    return sorted(set(found))


PATHS = [p for package in PRODUCT for p in modules(package)]


def test_there_are_modules_to_check():
    assert len(PATHS) > 50


@pytest.mark.parametrize("path", PATHS)
def test_a_module_uses_only_public_names_of_its_dependencies(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        assert internals(fh.read()) == []


def test_the_check_sees_each_way_of_reaching_an_internal():
    sample = ("import lmdb\nimport nats as n\nfrom collections import _count_elements\nimport a._b\n"
              "def f(db: lmdb._Database, client):\n    client._process_msg = None\n    return n._x\n")
    assert internals(sample) == ["3: from collections import _count_elements", "4: import a._b",
                                 "5: lmdb._Database", "6: …._process_msg (defined by none of our modules)",
                                 "7: n._x"]
