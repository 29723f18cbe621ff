"""No module of ``eventstore/``, ``projections/`` or ``server/`` keeps state
of its own: what depends on the open store lives in the object owning it
(:class:`eventstore.caches.Caches`), never in a module.

Found with ``ast`` alone, so that a module gaining any other module-level
state fails here:

* a ``global`` statement, anywhere;
* a thread-local (``threading.local``);
* a module-level container (a dict, list, set, ``OrderedDict``, deque, …)
  that a function changes (``x[k] = …``, ``x.append(…)``, ``x.clear()``, …);
* a module-level instance of one of our classes other than an immutable one
  (a ``NamedTuple``, a frozen dataclass) or the bounded memo
  (:class:`eventstore.memo.Memo` and its subclasses);
* a memo whose values are mutable (``Memo[K, list[…]]``): what it hands out
  is shared by every caller.

Pure memoization stays allowed: ``functools`` caches on pure functions, and
memos keyed by what they decode.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRODUCT = ("eventstore", "projections", "server")
CONTAINERS = {"dict", "list", "set", "bytearray", "OrderedDict", "defaultdict", "deque", "Counter",
              "ChainMap", "WeakValueDictionary", "WeakKeyDictionary", "WeakSet"}
MUTATORS = {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault", "add",
            "discard", "move_to_end", "appendleft", "popleft", "extendleft", "rotate", "sort", "reverse",
            "difference_update", "intersection_update", "symmetric_difference_update", "keep"}
MUTABLE_VALUES = {"list", "dict", "set", "bytearray", "List", "Dict", "Set"}


def modules(package: str) -> list[str]:
    out = []
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
        out += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files if f.endswith(".py")]
    return sorted(out)


PATHS = [p for package in PRODUCT for p in modules(package)]


def _read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        return fh.read()


def _called(node: ast.expr) -> str | None:
    """The name a call calls (``OrderedDict()`` and ``collections.OrderedDict()`` alike)."""
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Subscript):          # Memo[bytes, str](16)
            f = f.value
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _base_names(cls: ast.ClassDef) -> set[str]:
    out = set()
    for base in cls.bases:
        b = base.value if isinstance(base, ast.Subscript) else base
        out.add(b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "")
    return out


def _frozen(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        if isinstance(deco, ast.Call) and any(k.arg == "frozen" and isinstance(k.value, ast.Constant)
                                              and k.value.value is True for k in deco.keywords):
            return True
    return False


def _classes() -> tuple[set[str], set[str]]:
    """Our classes by name: (every one, the immutable ones and the memos)."""
    defs: dict[str, list[ast.ClassDef]] = {}
    for path in PATHS:
        for node in ast.walk(ast.parse(_read(path))):
            if isinstance(node, ast.ClassDef):
                defs.setdefault(node.name, []).append(node)
    allowed = {"Memo"}
    changed = True
    while changed:                   # subclasses of allowed ones, to any depth (every class of the name)
        changed = False
        for name, classes in defs.items():
            if name not in allowed and all(_frozen(c) or _base_names(c) & (allowed | {"NamedTuple"})
                                           for c in classes):
                allowed.add(name)
                changed = True
    return set(defs), allowed


OUR_CLASSES, ALLOWED_CLASSES = _classes()


def _mutable_memo_value(annotation: ast.expr | None) -> bool:
    """``Memo[K, V]`` (or a subclass's ``X[K, V]``) with a list, dict or set ``V``."""
    if not (isinstance(annotation, ast.Subscript) and isinstance(annotation.slice, ast.Tuple)):
        return False
    value = annotation.slice.elts[-1]
    head = value.value if isinstance(value, ast.Subscript) else value
    name = head.id if isinstance(head, ast.Name) else head.attr if isinstance(head, ast.Attribute) else ""
    return name in MUTABLE_VALUES or (name in OUR_CLASSES and name not in ALLOWED_CLASSES)


def state(source: str) -> list[str]:
    """The module-level state ``source`` keeps, each as ``line: what``."""
    tree = ast.parse(source)
    found: list[str] = []
    containers: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            value, called = node.value, _called(node.value)
            if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) \
                    or called in CONTAINERS:
                containers.update((n, node.lineno) for n in names)
            elif called in OUR_CLASSES and called not in ALLOWED_CLASSES:
                found.append(f"{node.lineno}: {', '.join(names)} = {called}(…) at module level")
            if isinstance(node, ast.AnnAssign) and called in ALLOWED_CLASSES and _mutable_memo_value(node.annotation):
                found.append(f"{node.lineno}: {', '.join(names)} hands out mutable values")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.append(f"{node.lineno}: global {', '.join(node.names)}")
        elif isinstance(node, ast.Attribute) and node.attr == "local" and isinstance(node.value, ast.Name) \
                and node.value.id == "threading":
            found.append(f"{node.lineno}: threading.local")
        elif isinstance(node, ast.ImportFrom) and node.module == "threading" \
                and any(a.name == "local" for a in node.names):
            found.append(f"{node.lineno}: from threading import local")
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [f"{line}: {name} (a module-level container) changed in {fn.name}()"
                      for name, line in _changed(fn, containers)]
    return sorted(set(found))


def _changed(fn: ast.AST, containers: dict[str, int]) -> list[tuple[str, int]]:
    """The module-level containers ``fn`` changes, each with its line."""
    out = []
    for node in ast.walk(fn):
        target = None
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            for t in (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]):
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    target = t.value.id
                elif isinstance(node, ast.AugAssign) and isinstance(t, ast.Name):
                    target = t.id
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name):
            target = node.func.value.id
        if target in containers:
            out.append((target, node.lineno))
    return out


def test_there_are_modules_to_check():
    assert len(PATHS) > 50 and "Memo" in ALLOWED_CLASSES and "Environment" in OUR_CLASSES


@pytest.mark.parametrize("path", PATHS)
def test_a_module_keeps_no_state_of_its_own(path):
    assert state(_read(path)) == []


def test_the_check_sees_each_kind_of_module_state():
    sample = ("import threading\nfrom collections import OrderedDict\n"
              "_seen = {}\n_kept = OrderedDict()\n_TABLE = {'a': 1}\n_local = threading.local()\n"
              "_env = Environment('x', {})\n_memo: Memo[bytes, list[int]] = Memo(4)\n_ok: Memo[bytes, str] = Memo(4)\n"
              "_n = 0\n"
              "def f(k):\n    global _n\n    _seen[k] = 1\n    _kept.move_to_end(k)\n    return _TABLE[k]\n")
    assert state(sample) == ["12: global _n", "13: _seen (a module-level container) changed in f()",
                             "14: _kept (a module-level container) changed in f()", "6: threading.local",
                             "7: _env = Environment(…) at module level", "8: _memo hands out mutable values"]


# Where the collector may be switched off: a process's own start-up, before it
# serves (the server's imports, then settle_heap freezes them and turns it back
# on), and the replay's second process, which only gathers batches.
GC_OFF_ALLOWED = {"server/commands/_common.py", "projections/index/worker.py"}


def gc_switched_off(source: str) -> list[int]:
    """The lines of ``source`` that turn the cyclic collector off (``gc.disable()``)."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "disable"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "gc"]


@pytest.mark.parametrize("path", [p for p in PATHS if p not in GC_OFF_ALLOWED])
def test_no_module_turns_the_collector_off_for_the_whole_process(path):
    assert gc_switched_off(_read(path)) == []


def test_the_collector_check_sees_a_switch():
    assert gc_switched_off("import gc\ndef f():\n    gc.disable()\n") == [3]
