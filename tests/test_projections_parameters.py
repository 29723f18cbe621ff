"""The read models' functions take few parameters: state that travels
together (a search's plan, a change to a posting list) is one value."""

from __future__ import annotations

import ast
import pathlib

import projections

MAX_PARAMETERS = 6
ROOT = pathlib.Path(projections.__file__).parent


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def test_no_function_in_projections_takes_more_than_six_parameters():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(_parameters(node)) > MAX_PARAMETERS:
                long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}")
    assert long == []
