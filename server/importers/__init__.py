"""Importers: the transcripts people already have, as sessions and messages.

``run_import(store_path, source, paths, options)`` is the whole entry point
(the CLI's ``convmem import SOURCE [PATH…]`` calls it, see :mod:`.command`).
One module per source turns files into :class:`~.turns.Turn` values;
:mod:`.writer` writes them in bulk, skipping what the store already holds.
The mapping of each source is documented in ``docs/import.md``.
"""

from __future__ import annotations

from .options import Options
from .run import SOURCES, run_import

__all__ = ["SOURCES", "Options", "run_import"]
