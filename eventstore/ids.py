"""Message ids: canonical ULIDs, strictly increasing across the whole store.

``python-ulid`` is monotonic only within one process and one clock; the store
persists the last id and every new id is ``max(candidate, last + 1)``, so id
order is creation order across restarts, processes and clock steps back.
Ids are kept as 16 big-endian bytes in keys (they sort like the strings).
The text is the id's 128 bits as 26 Crockford base-32 digits, most significant
first (two leading zero bits).
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import DamagedRecordError
from .memo import Memo

_MS = (1 << 48) - 1                      # an id's time part
_DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DIGIT_SET = _DIGITS.encode("ascii")
_AS_INT_DIGITS = bytes.maketrans(_DIGIT_SET, b"0123456789abcdefghijklmnopqrstuv")   # what int(_, 32) reads
_PAIRS = [a + b for a in _DIGITS for b in _DIGITS]      # every 10 bits as two digits
_TRIPLES = [a + b for a in _DIGITS for b in _PAIRS]     # every 15 bits as three digits
_CACHED = 16384                          # conversions remembered (both ways; dropped when full)
_BYTES_OF: Memo[str, bytes] = Memo(_CACHED)
_TEXT_OF: Memo[bytes, str] = Memo(_CACHED)


def next_texts(last: bytes | None, times: Sequence[int], pool: bytes) -> tuple[bytes | None, list[str]]:
    """The ids to give the next messages, stamped with each of ``times`` in
    turn: each is the time's milliseconds over the next 10 bytes (80 bits) of
    ``pool``, or one more than the id before (``last`` for the first) if that
    is not greater.  Returns the newest id's bytes (``last`` when none is
    given) and each id's text, each conversion remembered both ways."""
    prev = int.from_bytes(last, "big") if last is not None else -1
    raws = []
    at = 0
    for now_ms in times:
        candidate = (now_ms & _MS) << 80 | int.from_bytes(pool[at:at + 10], "big")
        prev = candidate if candidate > prev else prev + 1
        raws.append(prev.to_bytes(16, "big"))      # OverflowError: the id space is exhausted
        at += 10
    if not raws:
        return last, []
    return raws[-1], list(map(to_str, raws))


def remember(texts: list[str], raws: list[bytes]) -> None:
    """Cache the conversions of ids made elsewhere (a text and its 16 bytes,
    pair by pair), as :func:`to_str` and :func:`to_bytes` cache theirs: an id
    about to be stored is soon turned into bytes again."""
    _BYTES_OF.keep_all(zip(texts, raws), len(texts))
    _TEXT_OF.keep_all(zip(raws, texts), len(texts))


def is_canonical(text: object) -> bool:
    """True for a 26-character upper-case Crockford ULID (first char ≤ '7')."""
    return (isinstance(text, str) and len(text) == 26 and "0" <= text[0] <= "7" and text.isascii()
            and not text.encode("ascii").translate(None, _DIGIT_SET))     # nothing left: every one a digit


def to_bytes(text: str) -> bytes:
    """The 16 key bytes of a canonical id (``ValueError`` for anything else)."""
    raw = _BYTES_OF.get(text)
    if raw is None:
        if not is_canonical(text):
            raise ValueError("not a canonical ULID")
        raw = int(text.encode("ascii").translate(_AS_INT_DIGITS), 32).to_bytes(16, "big")
        _remember(text, raw)
    return raw


def to_str(raw: bytes) -> str:
    """The canonical text of 16 stored id bytes; any other length is a damaged
    record (:class:`DamagedRecordError`: ``CORRUPT_STORE``, and a ``ValueError``)."""
    text = _TEXT_OF.get(raw)
    if text is None:
        if len(raw) != 16:
            raise DamagedRecordError("a stored message id is not 16 bytes")
        text = _text(int.from_bytes(raw, "big"))
        _remember(text, bytes(raw))       # to_bytes returns bytes, whatever came in
    return text


def _text(n: int) -> str:
    """The 26 digits of a 128-bit id."""
    t = _TRIPLES
    return (_PAIRS[n >> 120] + t[n >> 105 & 32767] + t[n >> 90 & 32767] + t[n >> 75 & 32767]
            + t[n >> 60 & 32767] + t[n >> 45 & 32767] + t[n >> 30 & 32767] + t[n >> 15 & 32767]
            + t[n & 32767])



def _remember(text: str, raw: bytes) -> None:
    """Keep a conversion both ways: an id read from a record is soon a key again."""
    _BYTES_OF.keep(text, raw)
    _TEXT_OF.keep(raw, text)
