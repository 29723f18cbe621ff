"""``terms`` cuts text at whitespace and caches each piece's terms, and its
patterns see unsegmented characters through stand-ins; it must give exactly
what the whole-text scan with the scripts' own character classes gave (kept
below, as it was), for any text."""

from __future__ import annotations

import re
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from projections import tokens
from projections.tokens import (
    _KATAKANA_LONG,
    _QUERY_WEIGHT,
    CHAR,
    GRAM,
    STOP,
    UNIGRAM,
    WORD,
    _spans,
    _word,
    _word_terms,
    bounded,
    query_terms,
    terms,
)

# ------------------------ the implementation before the cache and the stand-ins
UNSEGMENTED = (
    "\u0e00-\u0eff"            # Thai, Lao
    "\u1000-\u109f"            # Myanmar
    "\u1780-\u17ff"            # Khmer
    "\u3005\u3006\u3007"       # 々 〆 〇
    "\u3040-\u309f"            # Hiragana
    "\u30a0-\u30fa\u30fc-\u30ff"  # Katakana (without the middle dot ・)
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\u31f0-\u31ff"            # Katakana phonetic extensions
    "\uac00-\ud7af"            # Hangul syllables
)
WORD_PATTERN = rf"[^\W{UNSEGMENTED}]+(?:'[^\W{UNSEGMENTED}]+)*"
SPAN = re.compile(rf"(?P<run>(?:\d+)?[{UNSEGMENTED}]+(?:\d+[{UNSEGMENTED}]+)*\d*)"
                  rf"|(?P<word>{WORD_PATTERN}(?:[._\-/:\\@+#]+{WORD_PATTERN})*)")
UNITS = re.compile(rf"\d+|[{UNSEGMENTED}]")


def reference_spans(text: str):
    text = tokens._normalized(text)            # NFKC, apostrophes, katakana middle dots
    for m in SPAN.finditer(text):
        yield m.group(), m.lastgroup == "run"


def reference_run(span: str):
    units = UNITS.findall(_KATAKANA_LONG.sub("", span.casefold()))
    if len(units) == 1:
        yield bounded(units[0]), UNIGRAM
        return
    for unit in units:
        yield bounded(unit), UNIGRAM
    for a, b in zip(units, units[1:]):
        yield bounded(a + b), GRAM


def reference_terms(text: str) -> list[str]:
    out: list[str] = []
    for span, is_run in reference_spans(text):
        out.extend(term for term, _ in reference_run(span)) if is_run else out.extend(_word_terms(span))
    return out


def reference_query_terms(text: str) -> dict[str, float]:
    tagged: list[tuple[str, str]] = []
    for span, is_run in reference_spans(text):
        if not is_run:
            tagged.extend(_word(span))
            continue
        found = list(reference_run(span))
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
          "a" * 70, "word" * 20, "長" * 70, "x_" * 40, ",", "!?", "(paren)", "[1]", "—", "…", "#tag",
          "〇", "๐", "๒๕๖๗", "ปี๒๕๖๗", "໑໒ລາວ", "၁၂မြန်", "១២ខ្មែរ", "๓a", "a๓", "x.๓", "ก-ข", "ー", "ヽヾ", "ㇰ",
          "東京123abc", "〆切", "々", "가나다", "豈", "\U00020000", "\u0e3f", "\u0e4f",
          "Caroline,", "you.", "Why?", "ABC!", "A", "a;", "McDonald:", "iPhone.", "AbC,", "x,,", "Ok.", "'s,", "é."]
SCRIPTS = st.characters(min_codepoint=0x0E00, max_codepoint=0x1800) | st.characters(min_codepoint=0x3000,
                                                                                   max_codepoint=0x3100)
pieces = st.one_of(st.sampled_from(PIECES), st.sampled_from(WHITESPACE),
                   st.text(max_size=6), st.text(st.characters(max_codepoint=0x3100), max_size=6),
                   st.text(SCRIPTS | st.sampled_from("09a_.-'"), max_size=8))
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
        assert list(_spans(c)) == []
        assert list(_spans(f"a{c}b 東{c}京 1{c}2 x.{c}y")) == \
            [("a", False), ("b", False), ("東", True), ("京", True), ("1", False), ("2", False), ("x", False),
             ("y", False)]


def test_every_character_is_seen_as_the_scripts_classes_see_it(monkeypatch):
    """Each character alone, and between others, gives the spans the
    scripts' own classes give (the stand-ins are faithful character by
    character): every one of the BMP, which holds the scripts, and a sample
    of the planes above."""
    monkeypatch.setattr(tokens, "_MARKS", tokens._Marks(1000))      # (and a full table starts again)
    for c in map(chr, [*range(0x10000), *range(0x10000, sys.maxunicode + 1, 97)]):
        text = f"{c} a{c}1 東{c} {c}'{c}"
        assert list(_spans(text)) == [(m.group(), m.lastgroup == "run") for m in SPAN.finditer(text)]


def test_long_pieces_are_not_cached_and_a_full_cache_starts_again(monkeypatch):
    monkeypatch.setattr(tokens, "_PIECE_TERMS", tokens._Pieces(3))
    assert terms("a" * 65 + " one two three four") == reference_terms("a" * 65 + " one two three four")
    assert list(tokens._PIECE_TERMS) == ["four"]
