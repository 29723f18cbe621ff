"""The store directory a long-running tool works in."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def workdir(store: str | None, prefix: str) -> Iterator[tuple[str, str]]:
    """(store path, its parent): the given store, kept; or a temp one, removed after."""
    if store is not None:
        parent = os.path.dirname(os.path.abspath(store)) or "."
        os.makedirs(parent, exist_ok=True)
        yield os.path.abspath(store), parent
        return
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield os.path.join(tmp, "store"), tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def add_store_options(parser: argparse.ArgumentParser, data: str, messages: int = 100_000) -> None:
    """``--data``, ``--messages`` and ``--store``: the LoCoMo data a tool builds its
    store from, how many messages, and where (built once and kept, or a temp one)."""
    parser.add_argument("--data", default=data, help="directory with locomo-dev.json")
    parser.add_argument("--messages", type=int, default=messages, help=f"messages in the store (default {messages})")
    parser.add_argument("--store", help="store directory to build (or reuse) and keep")
