"""Stored text made safe to show on a terminal or in a pipe.

Everything a read command prints came from an agent, a transcript or an
attacker: the CLI must show it, never obey it.  :func:`visible` replaces each
character that a terminal or a line-based reader would act on by a visible
escape, so that the text is shown, not executed:

* C0 controls, DEL and C1 controls (ESC starts colour, title and hyperlink
  sequences; CR overwrites a line; tab and newline split the fields and
  records of plain output): ``\\x1b``, ``\\t``, ``\\n``, ``\\r``, ``\\x00``, ``\\x9b``;
* the bidirectional overrides, embeddings, isolates and marks (U+202A–U+202E,
  U+2066–U+2069, U+200E, U+200F, U+061C), which reorder what the eye reads:
  ``\\u202e``;
* the Unicode line and paragraph separators (U+2028, U+2029), which some
  readers take for line breaks: ``\\u2028``;
* the zero-width characters (U+200B–U+200D, U+2060–U+2065, U+FEFF), which
  make two texts that read the same differ: ``\\u200b``.

These are also the characters the browser pages show as a badge
(:mod:`server.ui.text`), which takes :data:`UNSEEN` from here: one rule for
both surfaces (the pages keep tab and newline, which HTML shows as space).

Every other character, a backslash included, is kept as is: an escape is
always ASCII, so escaping twice changes nothing.

JSON output keeps its exact values: :func:`json_visible` writes the
characters that ``json.dumps`` leaves raw (DEL, C1, bidi, separators, zero-width) as
``\\uXXXX`` escapes, which a JSON reader turns back into the same string.
"""

from __future__ import annotations

import re

# Character classes' bodies.  Bidi marks, embeddings, overrides and isolates, and the
# line/paragraph separators; the zero-width characters; and every character past C0 that
# the terminal and the browser pages (server/ui/text.py) both escape.
REORDERING = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
ZERO_WIDTH = "\u200b-\u200d\u2060-\u2065\ufeff"
UNSEEN = f"\x7f-\x9f{REORDERING}{ZERO_WIDTH}"
UNSAFE = re.compile(f"[\x00-\x1f{UNSEEN}]")
RAW_IN_JSON = re.compile(f"[{UNSEEN}]")
UNSAFE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{UNSEEN}]")


def escape(char: str) -> str:
    """One character's visible form: ``\\t``, ``\\n``, ``\\r``, ``\\xNN`` or ``\\uNNNN``."""
    if char in "\t\n\r":
        return {"\t": "\\t", "\n": "\\n", "\r": "\\r"}[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, newlines: bool = False) -> str:
    """``text`` with every control, bidi, separator and zero-width character escaped;
    with ``newlines``, a newline stays a line break (a message body on a
    terminal)."""
    pattern = UNSAFE_BUT_NEWLINE if newlines else UNSAFE
    return pattern.sub(lambda m: escape(m.group()), text)


def json_visible(text: str) -> str:
    """JSON text (``json.dumps(…, ensure_ascii=False)``) with the characters it
    leaves raw escaped as ``\\uXXXX``: the same JSON value, nothing a terminal acts on."""
    return RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
