"""Stored text as HTML that shows it and never obeys it.

Everything stored (content, summaries, tags, session ids) reaches a page only
through Jinja2's autoescaping or through :func:`shown`, which escapes it too
and in addition makes invisible characters visible: C0/C1 controls (other
than newline and tab), bidi embeddings, overrides and isolates, and
zero-width characters become a marked ``U+XXXX`` badge, so a right-to-left
override cannot reorder what a person reads and a zero-width space cannot hide
a difference.  :func:`highlighter` marks the words of a search query
(``<mark>``).  Links built from stored values are path segments, percent-encoded
(:func:`segment`), never URLs taken from the text.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from markupsafe import Markup, escape

from .._terminal import UNSEEN

# C0 (but \t and \n), then what the terminal escapes too: DEL, C1, bidi marks/embeddings/
# overrides/isolates, line/paragraph separators (they break lines where none is seen in the
# source text), zero-width characters and BOM.
_INVISIBLE = re.compile(f"[\x00-\x08\x0b-\x1f{UNSEEN}]")
_WORD = re.compile(r"\w+", re.UNICODE)
ELLIPSIS = "…"


def _badge(ch: str) -> str:
    return f'<span class="cc" title="invisible character U+{ord(ch):04X}">U+{ord(ch):04X}</span>'


def visible(text: str) -> Markup:
    """``text`` escaped, with invisible characters shown as ``U+XXXX`` badges."""
    escaped = str(escape(text))
    return Markup(_INVISIBLE.sub(lambda m: _badge(m.group()), escaped))


def clip(text: str, limit: int | None) -> tuple[str, bool]:
    """The first ``limit`` characters of ``text`` and whether it was cut."""
    if limit is None or len(text) <= limit:
        return text, False
    return text[:limit], True


def highlighter(query: str) -> re.Pattern[str] | None:
    """A pattern for the query's words in stored text: each word, case-insensitive, and what
    follows it within the word ("deploy" marks "deploys" and "deployed"); None without words."""
    words = sorted({w.lower() for w in _WORD.findall(query)}, key=len, reverse=True)
    if not words:
        return None
    return re.compile("(?:" + "|".join(re.escape(w) for w in words) + r")\w*", re.IGNORECASE)


def shown(text: str, pattern: re.Pattern[str] | None = None, limit: int | None = None) -> Markup:
    """``text`` (cut at ``limit`` characters, with an ellipsis) escaped, invisible characters
    made visible and, with ``pattern``, its matches wrapped in ``<mark>``."""
    text, cut = clip(text, limit)
    if pattern is None:
        out = visible(text)
    else:
        parts, at = [], 0
        for m in pattern.finditer(text):
            parts.append(visible(text[at:m.start()]))
            parts.append(Markup("<mark>") + visible(m.group()) + Markup("</mark>"))
            at = m.end()
        parts.append(visible(text[at:]))
        out = Markup("").join(parts)
    return out + ELLIPSIS if cut else out


def segment(value: str) -> str:
    """``value`` as one URL path segment: every reserved character percent-encoded, ``/`` too."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")
