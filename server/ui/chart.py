"""The health page's chart: messages written per day as SVG bars, drawn on the server.

No chart library and no script: :func:`bars` turns per-day counts into the
geometry of ``<rect>`` elements the template writes out (each with a
``<title>`` naming the day and its count).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

DAYS = 90                   # bars: the DAYS days up to the newest day with messages
WIDTH, HEIGHT = 900, 180    # the plot area, in SVG user units


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    day: str
    count: int


@dataclass(frozen=True)
class Chart:
    bars: tuple[Bar, ...]
    first: str                  # the first and last day shown
    last: str
    peak: int                   # the tallest bar's count
    shown: int                  # messages in the days shown
    older: int                  # messages on days before them
    width: int = WIDTH
    height: int = HEIGHT


def day_name(day: int) -> str:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat()


def bars(per_day: dict[int, int], older: int = 0, days: int = DAYS) -> Chart | None:
    """The chart of ``per_day`` (UTC day number → count) over the ``days`` days up to the last
    one in it (always that many bars: one day's bar is as wide in a new store as in an old one);
    ``older``: messages on days before those (added to any left out here).  None when there
    is nothing to draw."""
    if not per_day:
        return None
    last = max(per_day)
    first = last - days + 1
    span = last - first + 1
    peak = max(per_day.get(d, 0) for d in range(first, last + 1))
    step = WIDTH / span
    out = []
    for i, day in enumerate(range(first, last + 1)):
        count = per_day.get(day, 0)
        h = HEIGHT * count / peak if peak else 0.0
        out.append(Bar(round(i * step + step * 0.1, 2), round(HEIGHT - h, 2), round(step * 0.8, 2), round(h, 2),
                       day_name(day), count))
    shown = sum(b.count for b in out)
    return Chart(tuple(out), day_name(first), day_name(last), peak, shown, older + sum(per_day.values()) - shown)
