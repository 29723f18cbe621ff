"""Every third-party package the product imports is declared in pyproject.toml.

A package that arrives only as another's dependency (anyio, pydantic, uvicorn
… through mcp) can change or vanish with that package's next release; what our
code imports must be declared with the range it was checked against.  The
imports are read with :mod:`ast` (those inside functions too) from the
packages the wheel ships; a module name is mapped to its distribution by the
installed metadata (``importlib.metadata.packages_distributions``)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = {"eventstore", "projections", "server", "tools"} | {p.stem for p in (ROOT / "tests").glob("*.py")}
SERVED = ("eventstore", "projections", "server")     # what `convmem` runs: core dependencies, or its own extra
SERVED_EXTRAS = ("replication", "follow")           # `serve --replicate`, `import … --follow`
TOOLS = ("tools",)                                   # benchmarks and test tools: any extra


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """(core dependencies, each extra's), by normalized distribution name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = lambda requirement: normalized(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))
    extras = {extra: {name(r) for r in group} for extra, group in project.get("optional-dependencies", {}).items()}
    return {name(r) for r in project["dependencies"]}, extras


def imported(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Top-level third-party module names imported by ``packages`` → the files importing each."""
    found: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {n.split(".")[0] for n in names}:
                    if top not in sys.stdlib_module_names and top not in OURS and top != "__future__":
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def distributions(module: str) -> set[str]:
    """The distributions that install top-level ``module`` (its own name when none is installed)."""
    return {normalized(d) for d in importlib.metadata.packages_distributions().get(module, [module])}


def undeclared(packages: tuple[str, ...], allowed: set[str]) -> list[str]:
    return [f"{module} (imported by {', '.join(sorted(files))})"
            for module, files in sorted(imported(packages).items()) if not distributions(module) & allowed]


def test_every_package_the_server_imports_is_a_declared_dependency():
    core, extras = declared()
    assert undeclared(SERVED, core.union(*(extras[e] for e in SERVED_EXTRAS))) == []


def test_every_package_the_tools_import_is_declared_in_some_extra():
    core, extras = declared()
    assert undeclared(TOOLS, core.union(*extras.values())) == []


def test_the_check_sees_imports_inside_functions_and_maps_module_names_to_distributions():
    found = imported(("server",))
    assert "uvicorn" in found                       # imported inside serve_http only
    assert distributions("Stemmer") == {"pystemmer"}
    assert distributions("pydantic_core") == {"pydantic-core"}
