"""Placeholder (filled in below)."""

from __future__ import annotations

from collections.abc import Iterator

from .options import Options
from .turns import Report, Turn

NAME = "codex"
DEFAULTS: tuple[str, ...] = ()
PATTERN = "*.json"


def read(paths: list[str], report: Report, options: Options) -> Iterator[Turn | list[Turn]]:
    return iter(())
