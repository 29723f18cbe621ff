"""Progress of long work (replay, export, import, backup) on stderr — as a bar
when stderr is a terminal, and not at all otherwise: a log file gets the
result line its command prints, never carriage returns.

    with progress("export", total) as step:
        for item in items:
            ...
            step(1)

:func:`replay_bar` adapts it to ``rebuild_projections(progress=…)``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


def on_terminal() -> bool:
    """Whether stderr is a terminal a person watches."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def progress(what: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A function advancing a bar by ``n`` items out of ``total`` (None: unknown)."""
    if not on_terminal():
        yield lambda n: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


@contextlib.contextmanager
def replay_bar(what: str = "replay") -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback for :meth:`EventStore.rebuild_projections`."""
    if not on_terminal():
        yield lambda done, total: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("events"))
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
