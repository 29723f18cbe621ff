"""The tokenizer shared by indexing and querying.

Text is NFKC-normalized and case-folded.  Three kinds of token come out:

* **words** — runs of letters and digits in spaced scripts; plain
  alphabetic words are stemmed (Snowball English), so "deploys" finds "deploy";
* **identifiers** — ``ERR_CONN_RESET``, ``snake_case``, ``CamelCase``,
  ``os.path.join``, ``/usr/lib/x.so``, ``3.11.7``: indexed whole (unstemmed) and
  by every part, so the whole form and each part are findable and a whole
  match outranks a match of its parts;
* **unsegmented scripts** (Japanese, Chinese, Thai, …) — every character and
  every pair of neighbouring characters, so 1- and 2-character queries match
  with no dictionary.  ``・`` between katakana words is dropped first.

Terms longer than ``MAX_TERM_BYTES`` are replaced by a hash, keeping LMDB keys
well under 511 bytes.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from functools import lru_cache

import Stemmer

MAX_TERM_BYTES = 160

_UNSEGMENTED = (
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
_CHUNK = re.compile(
    rf"(?P<cjk>[{_UNSEGMENTED}]+)"
    rf"|(?P<word>[^\W{_UNSEGMENTED}]+(?:[._\-/:\\@+#]+[^\W{_UNSEGMENTED}]+)*)"
)
_SEPARATORS = re.compile(r"[._\-/:\\@+#]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_ASCII_ALPHA = re.compile(r"[a-z]+")
_STEMMER = Stemmer.Stemmer("english")

STOPWORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her his "
    "how i if in into is it its me my of on or our she so than that the their them "
    "then there they this to was we were what when where which who whom why will "
    "with you your".split())


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
    if _ASCII_ALPHA.fullmatch(word):
        return _STEMMER.stemWord(word)
    return word


def _parts(chunk: str) -> list[str]:
    parts: list[str] = []
    for piece in _SEPARATORS.split(chunk):
        if piece.isascii():
            parts.extend(_CAMEL.findall(piece) or [piece])
        elif piece:
            parts.append(piece)
    return parts


def _word_terms(chunk: str, out: list[str]) -> None:
    parts = _parts(chunk)
    if len(parts) <= 1:
        out.append(bounded(_stem(chunk.casefold())))
        return
    out.append(bounded(chunk.casefold()))
    out.extend(_stem(p.casefold()) for p in parts)


def _cjk_terms(run: str, out: list[str], unigrams: bool) -> None:
    if unigrams or len(run) == 1:
        out.extend(run)
    out.extend(run[i:i + 2] for i in range(len(run) - 1))


def terms(text: str, *, unigrams: bool = True) -> list[str]:
    """Every indexable term of ``text``, in order, with repeats."""
    text = unicodedata.normalize("NFKC", text).replace("・", "")
    out: list[str] = []
    for m in _CHUNK.finditer(text):
        if m.lastgroup == "cjk":
            _cjk_terms(m.group().casefold(), out, unigrams)
        else:
            _word_terms(m.group(), out)
    return out


def query_terms(text: str) -> Counter:
    """Terms of a query with their counts; very common words are dropped
    unless the query has nothing else."""
    found = Counter(terms(text, unigrams=False))
    content = Counter({t: n for t, n in found.items() if t not in STOPWORDS})
    return content or found
