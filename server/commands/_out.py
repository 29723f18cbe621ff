"""Output for a person: rich tables and highlights on a terminal, plain text
when piped, JSON with ``--json``.  Dates are local times.

Nothing here reads the store: the commands pass what the service returned.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text


def local_time(ms: int) -> str:
    """Unix milliseconds as local time, to the second."""
    return datetime.datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def one_line(text: str, width: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


class Out:
    """stdout, as a terminal (rich) or a pipe (plain text)."""

    def __init__(self) -> None:
        self.terminal = sys.stdout.isatty()
        self.console = Console(highlight=False, soft_wrap=not self.terminal) if self.terminal else None

    def json(self, value: object) -> None:
        sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")

    def line(self, text: str = "", style: str | None = None) -> None:
        if self.console is not None:
            self.console.print(Text(text, style=style or ""))
        else:
            sys.stdout.write(text + "\n")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str | Text]], title: str | None = None) -> None:
        """A table on a terminal; tab-separated lines (a header line first) when piped."""
        if self.console is not None:
            table = Table(*headers, title=title, title_justify="left", show_header=any(headers))
            for row in rows:
                table.add_row(*row)
            self.console.print(table)
            return
        if title:
            sys.stdout.write(f"# {title}\n")
        for row in [list(headers), *rows] if any(headers) else rows:
            sys.stdout.write("\t".join(str(c) for c in row) + "\n")

    def highlighted(self, text: str, words: Sequence[str]) -> Text | str:
        """``text`` with ``words`` highlighted (on a terminal; as is when piped)."""
        if self.console is None:
            return text
        out = Text(text)
        for word in words:
            if word:
                out.highlight_regex(re.compile(re.escape(word), re.IGNORECASE), style="bold yellow")
        return out
