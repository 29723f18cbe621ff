"""Dependencies point one way: server → projections → eventstore; only the MCP layer sees mcp."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = ("eventstore", "projections", "server", "tools")
MCP_ALLOWED = {"server/app.py"}     # the MCP translation layer
# tools/ is outside the layers: its benchmarks and crash loops drive the server
# from the outside as MCP clients, and nothing in the layers imports tools/.


def modules(package: str) -> list[str]:
    out = []
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
        out += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files if f.endswith(".py")]
    return sorted(out)


def imported(path: str) -> set[str]:
    """Top-level names of every module imported anywhere in the file (relative ones resolved)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=path)
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


@pytest.mark.parametrize("path", [p for pkg in ("eventstore", "projections", "server") for p in modules(pkg)])
def test_only_the_mcp_layer_imports_mcp(path):
    if path.replace(os.sep, "/") not in MCP_ALLOWED:
        assert "mcp" not in imported(path)


def test_the_import_walker_sees_relative_and_nested_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "eventstore"
    pkg.mkdir()
    (pkg / "x.py").write_text("from . import codec\ndef f():\n    import mcp.types\n    from server import app\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", str(tmp_path))
    assert imported(os.path.join("eventstore", "x.py")) == {"eventstore", "mcp", "server"}
