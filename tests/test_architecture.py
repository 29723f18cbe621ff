"""Dependencies point one way: server → projections → eventstore; only the MCP layer sees mcp;
nothing in the layers imports tools/, and no module of the layers imports itself through others."""

from __future__ import annotations

import ast
import os

import helpers
import pytest
from helpers import ROOT, modules, parsed

OURS = ("eventstore", "projections", "server", "tools")
LAYERS = ("eventstore", "projections", "server")
# the MCP layer and its HTTP transport
MCP_ALLOWED = {"server/app.py", "server/auth.py", "server/bearer.py", "server/http_transport.py"}
# tools/ is outside the layers: its benchmarks and crash loops drive the server
# from the outside as MCP clients, and nothing in the layers imports tools/
# (what the CLI needs of maintenance lives in server/maintenance.py).


def imported(path: str) -> set[str]:
    """Top-level names of every module imported anywhere in the file (relative ones resolved)."""
    tree = parsed(path)
    package = path.split(os.sep)[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(package if node.level else (node.module or "").split(".")[0])
    return names


def test_every_package_has_modules_to_check():
    for package in OURS:
        assert modules(package), package


@pytest.mark.parametrize("path", modules("eventstore"))
def test_the_event_store_imports_nothing_of_ours(path):
    assert imported(path) & set(OURS) <= {"eventstore"}


@pytest.mark.parametrize("path", modules("projections"))
def test_projections_import_only_the_event_store(path):
    assert imported(path) & set(OURS) <= {"eventstore", "projections"}


@pytest.mark.parametrize("path", modules("eventstore") + modules("projections"))
def test_nothing_below_the_server_imports_the_server(path):
    assert "server" not in imported(path)


@pytest.mark.parametrize("path", [p for pkg in LAYERS for p in modules(pkg)])
def test_nothing_in_the_layers_imports_tools(path):
    assert "tools" not in imported(path)


@pytest.mark.parametrize("path", [p for pkg in LAYERS for p in modules(pkg)])
def test_only_the_mcp_layer_imports_mcp(path):
    if path.replace(os.sep, "/") not in MCP_ALLOWED:
        assert "mcp" not in imported(path)


def test_the_import_walker_sees_relative_and_nested_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "eventstore"
    pkg.mkdir()
    (pkg / "x.py").write_text("from . import codec\ndef f():\n    import mcp.types\n    from server import app\n")
    monkeypatch.setattr(helpers, "ROOT", str(tmp_path))
    assert imported(os.path.join("eventstore", "x.py")) == {"eventstore", "mcp", "server"}


# ------------------------------------------------------------------ cycles
def module_name(path: str) -> str:
    parts = path[:-len(".py")].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: str, known: set[str]) -> set[str]:
    """The modules among ``known`` that the file imports anywhere, by full name
    (``from pkg import mod`` is the module ``pkg.mod``; relative imports resolved)."""
    name = module_name(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()

    def ours(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in ast.walk(parsed(path)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            base = ".".join(p for p in (base, node.module or "") if p)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        found |= {m for m in map(ours, targets) if m is not None}
    return found - {name}


def import_cycles(packages=LAYERS) -> list[list[str]]:
    """Every set of modules that import one another in a circle (Tarjan's strongly
    connected components of more than one module)."""
    paths = [p for pkg in packages for p in modules(pkg)]
    known = {module_name(p) for p in paths}
    graph = {module_name(p): module_imports(p, known) for p in paths}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_module_of_the_layers_imports_itself_through_others():
    assert import_cycles() == []


def test_the_cycle_finder_sees_a_cycle_through_relative_and_nested_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "eventstore"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import thing\n")
    (pkg / "c.py").write_text("import eventstore.a\n")
    (pkg / "d.py").write_text("from eventstore import a, c\n")
    monkeypatch.setattr(helpers, "ROOT", str(tmp_path))
    assert import_cycles(("eventstore",)) == [["eventstore.a", "eventstore.b", "eventstore.c"]]


@pytest.mark.parametrize("path", [m for layer in LAYERS for m in modules(layer)])
def test_every_module_of_the_layers_is_short_enough_to_read_in_one_sitting(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        assert sum(1 for _ in fh) <= 450, f"{path} holds more than one concept: split it"


@pytest.mark.parametrize("path", [p for pkg in LAYERS for p in modules(pkg)])
def test_only_the_replication_package_imports_nats(path):
    # nats-py is an optional extra: the rest of the server never needs it
    if not path.replace(os.sep, "/").startswith("server/replication/"):
        assert "nats" not in imported(path)


def test_the_write_path_and_the_index_worker_do_not_load_numpy():
    # numpy is the ranker's (and a bulk build's, when it asks): importing it costs ~0.1 s,
    # which the replay's second process and a plain write must not pay
    import subprocess
    import sys
    code = ("import sys, eventstore.store, projections.index, projections.index.worker, projections.index.live; "
            "print('numpy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
