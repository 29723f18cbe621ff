"""``terms`` cuts text at whitespace and caches each piece's terms; it must give
exactly what the whole-text scan gave (kept below, as it was), for any text."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from projections import tokens
from projections.tokens import (
    _QUERY_WEIGHT,
    _SPAN,
    CHAR,
    STOP,
    UNIGRAM,
    WORD,
    _run,
    _word,
    _word_terms,
    query_terms,
    terms,
)


# ----------------------------------------------- the implementation before the cache
def reference_spans(text: str):
    text = tokens._normalized(text)            # NFKC, apostrophes, katakana middle dots
    for m in _SPAN.finditer(text):
        yield m.group(), m.lastgroup == "run"


def reference_terms(text: str) -> list[str]:
    out: list[str] = []
    for span, is_run in reference_spans(text):
        out.extend(term for term, _ in _run(span)) if is_run else out.extend(_word_terms(span))
    return out


def reference_query_terms(text: str) -> dict[str, float]:
    tagged: list[tuple[str, str]] = []
    for span, is_run in reference_spans(text):
        if not is_run:
            tagged.extend(_word(span))
            continue
        found = list(_run(span))
        if len(found) == 1:
            tagged.extend(found)
        else:
            tagged.extend((t, CHAR if r == UNIGRAM else r) for t, r in found)
    kept = [(t, r) for t, r in tagged if r != STOP] or [(t, WORD) for t, _ in tagged]
    out: dict[str, float] = {}
    for term, role in kept:
        out[term] = out.get(term, 0.0) + _QUERY_WEIGHT[role]
    return out


# ------------------------------------------------------------------ texts
WHITESPACE = [" ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\u0085", "\u00a0", "\u1680",
              "\u2002", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
              "\u200b", "\ufeff", "\u180e"]           # the last three are not whitespace
PIECES = ["Caroline's", "Melanie\u2019s", "it\u02bcs", "don't", "'quoted'", "ERR_CONN_RESET",
          "getUserName", "HTTPServer", "os.path.join", "/usr/lib/x.so", "3.11.7", "de-stress",
          "e-mail", "Error:ERR_CONN_RESET", "user@example.com", "C++", "C#", "a\\b", "x--y", "..",
          "サーバー", "サーバー・クライアント", "第20回", "東京都", "ひらがな", "ｶﾀｶﾅ", "ﾊﾞｰ",
          "ＰＯＳＴＧＲＥＳＱＬ", "１２３", "①", "ﬁle", "Å", "e\u0301", "\u0301", "n\u0303o",
          "ภาษาไทย", "한국어", "ελληνικά", "русский", "٣٤", "१२", "ß", "İstanbul", "ǅ",
          "a" * 70, "word" * 20, "長" * 70, "x_" * 40, ",", "!?", "(paren)", "[1]", "—", "…", "#tag"]
pieces = st.one_of(st.sampled_from(PIECES), st.sampled_from(WHITESPACE),
                   st.text(max_size=6), st.text(st.characters(max_codepoint=0x3100), max_size=6))
texts = st.lists(pieces, max_size=20).map("".join)


@settings(max_examples=1500)
@given(texts)
def test_terms_are_those_of_the_whole_text_scan(text):
    assert terms(text) == reference_terms(text)
    assert terms(text) == reference_terms(text)          # again: now from the cache


@settings(max_examples=500)
@given(texts)
def test_query_terms_are_those_of_the_whole_text_scan(text):
    assert query_terms(text) == reference_query_terms(text)


def test_no_whitespace_character_can_be_inside_a_span():
    for c in (chr(n) for n in range(sys.maxunicode + 1) if chr(n).isspace()):
        assert _SPAN.search(c) is None
        assert [m.group() for m in _SPAN.finditer(f"a{c}b 東{c}京 1{c}2 x.{c}y")] == \
            ["a", "b", "東", "京", "1", "2", "x", "y"]


def test_long_pieces_are_not_cached_and_a_full_cache_starts_again(monkeypatch):
    monkeypatch.setattr(tokens, "_PIECE_TERMS", {})
    monkeypatch.setattr(tokens, "_CACHED_PIECES", 3)
    assert terms("a" * 65 + " one two three four") == reference_terms("a" * 65 + " one two three four")
    assert list(tokens._PIECE_TERMS) == ["four"]
