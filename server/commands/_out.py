"""Output for a person: rich tables and highlights on a terminal, plain text
when piped, JSON with ``--json``.  Dates are local times.

Stored text is shown, never obeyed.  Every string a command hands to
:class:`Out` is escaped by :func:`server._terminal.visible` (control, bidi and
separator characters become ``\\x1b``, ``\\t``, ``\\u202e``…) and reaches rich
only as a :class:`rich.text.Text`, never as markup, so ``[/bold]`` or
``[link=…]`` in a message is printed as written.  Plain output is one record
per line: a header line naming the fields, then one tab-separated line per
record with exactly those fields (a tab or newline inside a field is escaped).
``--json`` is the tools' JSON with its exact values (DEL, C1 and bidi
characters written as ``\\uXXXX``, as JSON allows).

Nothing here reads the store: the commands pass what the service returned.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
from collections.abc import Collection, Sequence
from typing import TextIO

from rich.cells import cell_len
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from .._terminal import json_visible, visible

Cell = str | Text
# A column that is not an id narrows to this many cells before a table gives
# way to labelled lines (ids are never cut).
NARROWEST = 10


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
    """stdout (or ``file``), as a terminal (rich) or a pipe (plain text)."""

    def __init__(self, file: TextIO | None = None) -> None:
        self.file = file or sys.stdout
        self.terminal = self.file.isatty()
        self.console = Console(file=self.file, highlight=False, markup=False, emoji=False) \
            if self.terminal else None

    def json(self, value: object) -> None:
        self.file.write(json_visible(json.dumps(value, ensure_ascii=False, indent=2)) + "\n")

    def text(self, text: str, style: str = "", *, newlines: bool = False) -> Text:
        """``text`` escaped, as a rich Text; with ``newlines``, line breaks are
        kept on a terminal (a message body), escaped when piped."""
        return Text(visible(text, newlines=newlines and self.terminal), style=style)

    def line(self, text: str | Text = "", style: str = "", *, prose: bool = False) -> None:
        """One line (a message body may span several on a terminal: pass ``out.text(…, newlines=True)``).
        On a terminal the terminal wraps it, so an id in it is never split; ``prose`` is
        wrapped between words instead."""
        shown = text if isinstance(text, Text) else self.text(text, style)
        if self.console is not None:
            self.console.print(shown, soft_wrap=not prose)
        else:
            self.file.write(shown.plain + "\n")

    def highlighted(self, text: str, words: Sequence[str]) -> Text:
        """``text`` escaped, with ``words`` highlighted on a terminal."""
        out = self.text(text)
        if self.console is not None:
            for word in words:
                if word:
                    out.highlight_regex(re.compile(re.escape(visible(word)), re.IGNORECASE), style="bold yellow")
        return out

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Cell]], title: str | None = None,
              whole: Collection[int] = (), wide: int | None = None) -> None:
        """A table on a terminal.  Its columns ``whole`` (ids) are never cut: the
        ``wide`` one (free text) gives way first, then the others narrow to
        :data:`NARROWEST`; when even that is too wide, each row is printed as
        labelled lines instead.  Piped: a header line (when there are headers),
        then one tab-separated line a row; no title."""
        cells = [[c if isinstance(c, Text) else self.text(c) for c in row] for row in rows]
        if self.console is None:
            lines = [list(headers)] if any(headers) else []
            for line in [*lines, *([c.plain for c in row] for row in cells)]:
                self.file.write("\t".join(visible(c) for c in line) + "\n")
            return
        if title:
            self.console.print(self.text(title), soft_wrap=True)
        widths = [max([cell_len(h), *(row[i].cell_len for row in cells)]) for i, h in enumerate(headers)]
        overhead = 1 + 3 * len(headers)             # the default box: a border and two padding cells a column
        if overhead + sum(w if i in whole else min(w, NARROWEST) for i, w in enumerate(widths)) > self.console.width:
            self._labelled(headers, cells, whole, wide)
            return
        narrow = overhead + sum(widths) > self.console.width
        columns = [Column(Text(h), width=widths[i], no_wrap=True) if i in whole else
                   Column(Text(h), overflow="fold", max_width=NARROWEST if narrow and i != wide else None)
                   for i, h in enumerate(headers)]
        table = Table(*columns, show_header=any(headers))
        for row in cells:
            table.add_row(*row)
        self.console.print(table)

    def fields(self, rows: Sequence[tuple[str, Cell]]) -> None:
        """(label, value) rows: ``label: value`` lines on a terminal, ``label<TAB>value`` when piped."""
        if self.console is None:
            self.table(("", ""), rows)
            return
        for label, value in rows:
            self.console.print(Text.assemble((f"{label}: ", "bold"), self.text(value) if isinstance(value, str)
                                             else value), soft_wrap=True)

    def _labelled(self, headers: Sequence[str], cells: list[list[Text]], whole: Collection[int],
                  wide: int | None) -> None:
        """Each row as lines, left to the terminal to wrap (an id stays one line):
        the short fields together, then each id, then the free text."""
        assert self.console is not None
        short = [i for i in range(len(headers)) if i not in whole and i != wide]
        for row in cells:
            self.console.print(Text("  ").join(Text.assemble((f"{headers[i]} ", "bold"), row[i]) for i in short),
                               soft_wrap=True)
            for i in [*sorted(whole), *([] if wide is None else [wide])]:
                self.console.print(Text.assemble((f"{headers[i]}: ", "bold"), row[i]), soft_wrap=True)
            self.console.print()
