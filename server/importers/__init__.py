"""Importers: the transcripts people already have, as sessions and messages.

``run_import(store_path, source, paths, options)`` is the whole entry point
(the CLI's ``convmem import SOURCE [PATH…]`` calls it, see :mod:`.command`).
One module per source turns files into :class:`~.turns.Turn` values;
:mod:`.writer` writes them in bulk, skipping what the store already holds.
The mapping of each source is documented in ``docs/import.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .options import Options

if TYPE_CHECKING:
    from .run import SOURCES, run_import

__all__ = ["SOURCES", "Options", "run_import"]


def __getattr__(name: str) -> Any:
    """``SOURCES`` and ``run_import`` loaded when first asked for: the hook
    reads Claude Code transcripts alone and loads no other source."""
    if name in ("SOURCES", "run_import"):
        from . import run
        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
