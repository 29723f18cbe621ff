"""The tokenizer shared by indexing and querying.

Text is NFKC-normalized (full-width Latin and digits become ASCII, half-width
katakana becomes full-width) and case-folded; curly apostrophes become ``'``.
Then it is cut into *spans* — runs of an unsegmented script, and words — and
each span gives terms:

* **words** — letters and digits of spaced scripts, with inner apostrophes
  (``caroline's``); alphabetic words are stemmed with Snowball English, so
  "painting" finds "painted" and "Caroline's" finds "Caroline".
* **identifiers** — words joined by ``. _ - / : \\ @ + #`` or written in
  CamelCase (``ERR_CONN_RESET``, ``snake_case``, ``getUserName``,
  ``os.path.join``, ``/usr/lib/x.so``, ``3.11.7``): one *whole* term plus every
  *part*, so the whole form and each part are findable and a whole match
  outranks a match of its parts.  Wholes and parts are stemmed when they are
  all letters (``getUserProfile`` = the word ``getuserprofile``: index and
  query agree however it is typed); a CamelCase word inside a longer
  identifier is also a whole of its own (``obj.getUserProfile`` gives
  ``getuserprofil``).  A plain hyphenated word
  (``de-stress``, ``e-mail``) has the joined stem as its whole term, so it
  meets its closed spelling (``destress``, ``email``).
* **unsegmented scripts** (Japanese, Chinese, Thai, Korean, …) — no dictionary:
  every character (*unigram*) and every pair of neighbouring characters
  (*bigram*).  A run of digits touching such a run counts as one character of
  it (``第20回`` gives ``第20`` and ``20回``); ``・`` between katakana words is
  dropped; a katakana word of four or more characters loses a final ``ー``
  (``サーバー`` = ``サーバ``, as Lucene's Japanese katakana stemmer does).

A path, URL or namespaced name also gives each segment between ``/ : \\ @ + #``
whole (``Error:ERR_CONN_RESET`` gives ``err_conn_reset``).

Queries use the same cutting, with a weight per term (:func:`query_terms`):
stopwords (the Snowball English list) are dropped unless nothing else is
left; identifier parts and segments weigh ``PART_WEIGHT``; in an unsegmented
run every bigram and every character weighs ``GRAM_WEIGHT`` (neighbouring
bigrams share a character, so a run of n characters counts about like n/2
words), and a run of one character is asked whole.

Terms longer than ``MAX_TERM_BYTES`` are replaced by a hash, keeping LMDB keys
well under 511 bytes.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator
from functools import lru_cache

import Stemmer

from eventstore.memo import Memo

# Bump when the terms a text gives change: the index fingerprint holds it, and a
# store indexed by another version is rebuilt when it is opened.
VERSION = 2
MAX_TERM_BYTES = 160
GRAM_WEIGHT = 0.5
PART_WEIGHT = 0.5

_UNSEGMENTED = (                # (first, last) code point, in order
    (0x0E00, 0x0EFF),           # Thai, Lao
    (0x1000, 0x109F),           # Myanmar
    (0x1780, 0x17FF),           # Khmer
    (0x3005, 0x3007),           # 々 〆 〇
    (0x3040, 0x309F),           # Hiragana
    (0x30A0, 0x30FA), (0x30FC, 0x30FF),     # Katakana (without the middle dot ・)
    (0x31F0, 0x31FF),           # Katakana phonetic extensions
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF),     # CJK ideographs
    (0xAC00, 0xD7AF),           # Hangul syllables
    (0xF900, 0xFAFF),           # CJK compatibility ideographs
)
_FIRSTS = [first for first, _ in _UNSEGMENTED]


class _Marks(Memo[int, str]):
    """The patterns see each character of an unsegmented script as one of two
    of them: 〇 (U+3007) for a letter, ๐ (U+0E50, Thai zero) for a digit
    (``\\d``).  Every class of the patterns holds a character as it holds its
    stand-in, so they match the same spans, and compile at a small part of
    the cost of classes holding the scripts' tens of thousands of characters
    (130 million instructions, paid again by each replay's second process).
    This is the ``str.translate`` table, filled as characters come (the whole
    table would take 60 million to build), and dropped whole when full."""

    def __missing__(self, code: int) -> str:
        char, i = chr(code), bisect_right(_FIRSTS, code) - 1
        if i >= 0 and code <= _UNSEGMENTED[i][1]:
            char = "\u0e50" if char.isdecimal() else "\u3007"
        return self.keep(code, char)


_MARKS = _Marks(65536)                  # characters whose stand-in is kept
_RUN = "\u3007\u0e50"
_WORD = rf"[^\W{_RUN}]+(?:'[^\W{_RUN}]+)*"
_SPAN = re.compile(rf"(?P<run>(?:\d+)?[{_RUN}]+(?:\d+[{_RUN}]+)*\d*)"
                    rf"|(?P<word>{_WORD}(?:[._\-/:\\@+#]+{_WORD})*)")
_UNITS = re.compile(rf"\d+|[{_RUN}]")
_SEPARATORS = re.compile(r"[._\-/:\\@+#]+")
_COARSE = re.compile(r"[/:\\@+#]+")      # between path, URL and namespace segments
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_HYPHENATED = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)+")
_KATAKANA_LONG = re.compile(r"(?<=[\u30a1-\u30fa\u30fc-\u30ff]{3})ー(?![\u30a1-\u30fa\u30fc-\u30ff])")
_STEMMABLE = re.compile(r"[a-z']+")
_TRANSLATE = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})
_MIDDLE_DOT = re.compile(r"(?<=[\u30a1-\u30fa\u30fc-\u30ff])・(?=[\u30a1-\u30fa\u30fc-\u30ff])")
# PyStemmer objects are not thread-safe: the one stemmer is used under its lock
# (only on a miss of _stem's cache, so rarely taken at all).
_STEMMER, _STEMMER_LOCK = Stemmer.Stemmer("english"), threading.Lock()
_CACHED_PIECE_CHARS = 64                # longer pieces are rare: not cached

# The Snowball English stopword list (snowballstem.org), plus can/will/just.
STOPWORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom
this that these those am is are was were be been being have has had having do does did
doing would should could ought i'm you're he's she's it's we're they're i've you've we've
they've i'd you'd he'd she'd we'd they'd i'll you'll he'll she'll we'll they'll isn't
aren't wasn't weren't hasn't haven't hadn't doesn't don't didn't won't wouldn't shan't
shouldn't can't cannot couldn't mustn't let's that's who's what's here's there's when's
where's why's how's a an the and but if or because as until while of at by for with about
against between into through during before after above below to from up down in out on
off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very can will just
""".split())

# Roles of a term within a query (the index treats every term alike).
WORD, STOP, WHOLE, PART, GRAM, UNIGRAM, CHAR = "word", "stop", "whole", "part", "gram", "unigram", "char"
CHAR_WEIGHT = GRAM_WEIGHT     # a character of a longer run: the usual unigram + bigram mixture
_QUERY_WEIGHT = {WORD: 1.0, WHOLE: 1.0, PART: PART_WEIGHT, GRAM: GRAM_WEIGHT, UNIGRAM: 1.0, CHAR: CHAR_WEIGHT}


def normalize(text: str) -> str:
    """NFKC + case folding: the form every comparison uses."""
    return unicodedata.normalize("NFKC", text).casefold()


def bounded(term: str) -> str:
    """The term itself, or a short stable hash when its key would be too long."""
    if len(term.encode("utf-8")) <= MAX_TERM_BYTES:
        return term
    return "#" + hashlib.blake2b(term.encode("utf-8"), digest_size=12).hexdigest()


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    if not _STEMMABLE.fullmatch(word):
        return bounded(word)
    with _STEMMER_LOCK:
        stem = _STEMMER.stemWord(word)
    return bounded(stem)


def _parts(span: str) -> list[str]:
    """An identifier's parts: split at separators, then at CamelCase humps."""
    parts: list[str] = []
    for piece in _SEPARATORS.split(span):
        if piece.isascii() and "'" not in piece:
            parts.extend(_CAMEL.findall(piece) or ([piece] if piece else []))
        elif piece:
            parts.append(piece)
    return parts


def _whole(span: str) -> str:
    """An identifier (or a part of one) as one term: folded and, when it is all
    letters, stemmed — so that ``getUserProfile`` and the plain word
    ``getuserprofile`` give the same term, as query and as text."""
    folded = span.casefold()
    if _HYPHENATED.fullmatch(span):
        return _stem(folded.replace("-", ""))
    return _stem(folded)


def _word(span: str) -> Iterator[tuple[str, str]]:
    """A word, or an identifier's whole, its coarse segments and its parts."""
    parts = _parts(span)
    if not parts or parts == [span]:
        folded = span.casefold()
        yield _stem(folded), STOP if folded in STOPWORDS else WORD
        return
    whole = _whole(span)
    yield whole, WHOLE
    inner = dict.fromkeys(_whole(seg) for seg in _inner_wholes(span))
    inner.pop(whole, None)
    yield from ((term, PART) for term in inner)
    for part in parts:
        yield _stem(part.casefold()), PART


def _inner_wholes(span: str) -> Iterator[str]:
    """The pieces of an identifier that are identifiers themselves: each
    path, URL or namespace segment, and each CamelCase word between
    separators (``getUserProfile`` in ``obj.getUserProfile`` or ``getUserProfile_``)."""
    segments = [seg for seg in _COARSE.split(span) if seg]
    if len(segments) > 1:
        yield from (seg for seg in segments if len(_parts(seg)) > 1)
    yield from (piece for piece in _SEPARATORS.split(span) if piece != span and len(_parts(piece)) > 1)


def _run(span: str) -> Iterator[tuple[str, str]]:
    units = _found(_UNITS, _KATAKANA_LONG.sub("", span.casefold()))
    if len(units) == 1:
        yield bounded(units[0]), UNIGRAM
        return
    for unit in units:
        yield bounded(unit), UNIGRAM
    for a, b in zip(units, units[1:]):
        yield bounded(a + b), GRAM


def _normalized(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    if text.isascii():
        return text                     # what follows only maps non-ASCII
    if "・" in text:                    # dropped between katakana words; elsewhere it separates
        text = _MIDDLE_DOT.sub("", text)
    return text.translate(_TRANSLATE)


def _spans(text: str) -> Iterator[tuple[str, bool]]:
    """(span, is an unsegmented run) for each span of ``text`` (normalized)."""
    if text.isascii():                  # no unsegmented script: nothing stands in
        return ((m.group(), False) for m in _SPAN.finditer(text))
    return ((text[m.start():m.end()], m.lastgroup == "run") for m in _SPAN.finditer(text.translate(_MARKS)))


def _found(pattern: re.Pattern, text: str) -> list[str]:
    """``pattern.findall(text)``, each unsegmented character standing in as its mark."""
    if text.isascii():
        return pattern.findall(text)
    return [text[m.start():m.end()] for m in pattern.finditer(text.translate(_MARKS))]


@lru_cache(maxsize=65536)
def _word_terms(span: str) -> tuple[str, ...]:
    """The index terms of one word span (spans repeat a lot: cached)."""
    return tuple(term for term, _ in _word(span))


def _piece_terms(piece: str) -> tuple[str, ...]:
    word = piece[:-1] if piece[-1] in ",.!?;:" else piece
    if word.isalpha() and word.isascii() and (word.islower() or word.istitle() or word.isupper()):
        # the usual piece: one plain word (no hump, separator or apostrophe
        # inside), perhaps with a stop after it — its one span's stem
        return (_stem(word.lower()),)
    out: list[str] = []
    for span, is_run in _spans(piece):
        out.extend(term for term, _ in _run(span)) if is_run else out.extend(_word_terms(span))
    return tuple(out)


class _Pieces(Memo[str, tuple[str, ...]]):
    """Whitespace-free piece → its terms.  A piece looked up and not found
    gets its terms computed (:meth:`__missing__`), so that :func:`terms` finds
    every piece's in one C loop (``map`` over ``__getitem__``), and a hit — the
    usual case — runs no Python code at all."""

    def __missing__(self, piece: str) -> tuple[str, ...]:
        found = _piece_terms(piece)
        return self.keep(piece, found) if len(piece) <= _CACHED_PIECE_CHARS else found


_PIECE_TERMS = _Pieces(16384)           # (a few MB) dropped whole when full


def terms(text: str) -> list[str]:
    """Every indexable term of ``text``, in order, with repeats.

    No span holds whitespace (no character class of ``_SPAN`` matches a
    character for which ``str.isspace()`` is true), so the text is cut at
    whitespace first and the terms of each piece are cached: pieces repeat a
    lot, and one dictionary lookup is far cheaper than the regular expression.
    """
    out: list[str] = []
    any(map(out.extend, map(_PIECE_TERMS.__getitem__, _normalized(text).split())))   # (extend gives None)
    return out


def query_terms(text: str) -> dict[str, float]:
    """The query's terms with their weights (repeats add up).

    Stopwords are dropped unless the query has nothing else; an unsegmented
    run is asked by its bigrams and characters, a one-character run whole.
    """
    tagged: list[tuple[str, str]] = []
    for span, is_run in _spans(_normalized(text)):
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
