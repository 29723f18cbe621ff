"""What a user can ask of an import (flags of ``convmem import``)."""

from __future__ import annotations

from dataclasses import dataclass

from .writer import BATCH


@dataclass(frozen=True)
class Options:
    thinking: bool = False        # claude-code, claude-ai: keep thinking blocks (skipped by default)
    branches: bool = False        # chatgpt: also import regenerated side branches
    dry_run: bool = False         # read and count, write nothing
    batch: int = BATCH            # turns per durable transaction
    bulk: bool = True             # index work held to each commit, as a replay does (same bytes)
    progress: bool | None = None  # a progress line on stderr; None: when stderr is a terminal
    apart: bool | None = None     # read the source in a second process; None: a large import, several CPUs
    replicate: str | None = None  # a replicated node's store: its NATS URLs (None: those the node recorded)
    stream: str | None = None     # … and its stream's name (None: the one the node recorded)
