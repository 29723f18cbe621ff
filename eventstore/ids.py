"""Message ids: canonical ULIDs, strictly increasing across the whole store.

``python-ulid`` is monotonic only within one process and one clock; the store
persists the last id and every new id is ``max(candidate, last + 1)``, so id
order is creation order across restarts, processes and clock steps back.
Ids are kept as 16 big-endian bytes in keys (they sort like the strings).
The text is the id's 128 bits as 26 Crockford base-32 digits, most significant
first (two leading zero bits).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from .errors import DamagedRecordError

_MAX = (1 << 128) - 1
_MS, _RANDOM = (1 << 48) - 1, (1 << 80) - 1       # an id's time part, its random part
_DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CANONICAL = re.compile("[0-7][0-9A-HJKMNP-TV-Z]{25}")     # 26 Crockford digits, ≤ 2**128 - 1
_AS_INT_DIGITS = str.maketrans(_DIGITS, "0123456789abcdefghijklmnopqrstuv")   # what int(_, 32) reads
_PAIRS = [a + b for a in _DIGITS for b in _DIGITS]      # every 10 bits as two digits
_TRIPLES = [a + b for a in _DIGITS for b in _PAIRS]     # every 15 bits as three digits
_CACHED = 16384                          # conversions remembered (both ways; dropped when full)
_bytes_of: dict[str, bytes] = {}
_text_of: dict[bytes, str] = {}


def next_id(last: bytes | None, now_ms: int, randomness: int) -> bytes:
    """The id to give the next message: after ``last``, stamped ``now_ms``."""
    candidate = ((now_ms & ((1 << 48) - 1)) << 80) | (randomness & ((1 << 80) - 1))
    if last is not None:
        candidate = max(candidate, int.from_bytes(last, "big") + 1)
    if candidate > _MAX:
        raise OverflowError("id space exhausted")
    return candidate.to_bytes(16, "big")


def next_ids(last: bytes | None, times: Sequence[int], randomness: Callable[[int], int]) -> list[bytes]:
    """:func:`next_id` for each of ``times`` in turn, each after the one
    before, each with ``randomness(80)``."""
    out = []
    for now_ms in times:
        last = next_id(last, now_ms, randomness(80))
        out.append(last)
    return out


def next_texts(last: bytes | None, times: Sequence[int], randoms: Iterable[int]) -> tuple[bytes | None, list[str]]:
    """The text of each id :func:`next_ids` gives (``randoms`` in place of its
    calls of ``randomness``), each conversion remembered both ways, and the
    newest id's bytes (``last`` when none is given); the integers are carried
    from one id to the next."""
    prev = int.from_bytes(last, "big") if last is not None else -1
    out = []
    for now_ms, randomness in zip(times, randoms):
        candidate = ((now_ms & _MS) << 80) | (randomness & _RANDOM)
        if candidate <= prev:
            candidate = prev + 1
        if candidate > _MAX:
            raise OverflowError("id space exhausted")
        text = _text(candidate)
        _remember(text, candidate.to_bytes(16, "big"))
        out.append(text)
        prev = candidate
    return prev.to_bytes(16, "big") if out else last, out


def is_canonical(text: object) -> bool:
    """True for a 26-character upper-case Crockford ULID (first char ≤ '7')."""
    return isinstance(text, str) and _CANONICAL.fullmatch(text) is not None


def to_bytes(text: str) -> bytes:
    """The 16 key bytes of a canonical id (``ValueError`` for anything else)."""
    raw = _bytes_of.get(text)
    if raw is None:
        if not is_canonical(text):
            raise ValueError("not a canonical ULID")
        raw = int(text.translate(_AS_INT_DIGITS), 32).to_bytes(16, "big")
        _remember(text, raw)
    return raw


def to_str(raw: bytes) -> str:
    """The canonical text of 16 stored id bytes; any other length is a damaged
    record (:class:`DamagedRecordError`: ``CORRUPT_STORE``, and a ``ValueError``)."""
    text = _text_of.get(raw)
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
    """Cache a conversion both ways: an id read from a record is soon a key again."""
    if len(_bytes_of) >= _CACHED:
        _bytes_of.clear()
        _text_of.clear()
    _bytes_of[text] = raw
    _text_of[raw] = text
