"""Read model: the full-text index over content, summary and tags.

Sub-databases (document number ``docno`` = 6-byte sequence of the event that
created the message in this log):

* ``postings`` (dupsort, dupfixed 10 bytes): field byte + term →
  ``255 - impact`` (1) + ``~docno`` (6) + tf (1) + field length (2).
  Duplicates sort by value, so each posting list is **impact-ordered**
  (best first, newest first among equals): the ranker reads only the head of a
  common term's list.  ``impact`` is the BM25 term-frequency factor quantized
  with a fixed reference length, so it depends on nothing but the message.
* ``exact`` (dupsort, dupfixed 6): field byte + hash of the whole normalized
  field text (each tag on its own) → docno, for SPEC §6.10's whole-field match.
* ``docs``: docno → id (16) + kind, tier, importance (1 each) + timestamp (8) +
  session id: what filters and tie-breaks need without decoding messages.
* ``tag_index`` (dupsort, dupfixed 6): tag → docno, for selective tag filters.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from dataclasses import dataclass

from eventstore.events import KINDS, TIERS, Message
from eventstore.ids import to_bytes, to_str
from eventstore.store import Tx

from . import stats
from .tokens import normalize, terms

POSTINGS, EXACT, DOCS, TAGS = "postings", "exact", "docs", "tag_index"
SPECS = {POSTINGS: {"dupsort": True, "dupfixed": True}, EXACT: {"dupsort": True, "dupfixed": True},
         DOCS: {}, TAGS: {"dupsort": True, "dupfixed": True}}
FIELDS = ("content", "summary", "tags")
K1, B = 1.2, 0.75
REFERENCE_LENGTH = {"content": 24.0, "summary": 16.0, "tags": 3.0}
_DOC = struct.Struct(">16sBBBQ")
_MASK48 = (1 << 48) - 1


def docno_key(docno: int) -> bytes:
    return docno.to_bytes(6, "big")


def field_texts(msg: Message) -> dict[str, list[str]]:
    meta = msg.metadata
    return {"content": [msg.content], "summary": [meta.summary] if meta.summary else [],
            "tags": list(meta.tags)}


def tf_factor(tf: int, length: int, avg: float) -> float:
    """BM25's saturating term-frequency factor, in [0, 1)."""
    return tf / (tf + K1 * (1 - B + B * length / avg))


def exact_key(field: int, text: str) -> bytes:
    digest = hashlib.blake2b(normalize(text).strip().encode("utf-8"), digest_size=16).digest()
    return bytes([field]) + digest


def _postings(docno: int, texts: dict[str, list[str]]):
    inv = (_MASK48 - docno).to_bytes(6, "big")
    for f, name in enumerate(FIELDS):
        toks = [t for text in texts[name] for t in terms(text)]
        length = min(len(toks), 65535)
        for term, tf in Counter(toks).items():
            impact = int(255 * tf_factor(tf, length, REFERENCE_LENGTH[name]))
            value = bytes([255 - impact]) + inv + bytes([min(tf, 255)]) + length.to_bytes(2, "big")
            yield bytes([f]) + term.encode("utf-8"), value
        yield name, length


@dataclass(frozen=True)
class Doc:
    message_id: str
    kind: str
    tier: str
    importance: int
    timestamp: int
    session_id: str


def _doc_value(msg: Message) -> bytes:
    m = msg.metadata
    return _DOC.pack(to_bytes(msg.message_id), KINDS.index(m.memory_kind), TIERS.index(m.memory_tier),
                     m.importance, msg.timestamp) + msg.session_id.encode("utf-8")


def doc(tx: Tx, docno: int) -> Doc | None:
    raw = tx.txn.get(docno_key(docno), db=tx.db(DOCS))
    if raw is None:
        return None
    mid, kind, tier, imp, ts = _DOC.unpack_from(raw)
    return Doc(to_str(mid), KINDS[kind], TIERS[tier], imp, ts, raw[_DOC.size:].decode("utf-8"))


def _apply(tx: Tx, docno: int, msg: Message, sign: int) -> None:
    """Index (sign=+1) or unindex (sign=-1) one message version."""
    texts = field_texts(msg)
    dk = docno_key(docno)
    put = tx.txn.put if sign > 0 else tx.txn.delete
    lengths = {}
    for key, value in _postings(docno, texts):
        if isinstance(key, str):
            lengths[key] = value
        elif sign > 0:
            tx.txn.put(key, value, db=tx.db(POSTINGS), dupdata=True)
        else:
            tx.txn.delete(key, value, db=tx.db(POSTINGS))
    for f, name in enumerate(FIELDS):
        for text in dict.fromkeys(texts[name]):
            put(exact_key(f, text), dk, db=tx.db(EXACT))
    for tag in msg.metadata.tags:
        put(tag.encode("utf-8"), dk, db=tx.db(TAGS))
    if sign > 0:
        tx.txn.put(dk, _doc_value(msg), db=tx.db(DOCS))
    else:
        tx.txn.delete(dk, db=tx.db(DOCS))
    deltas = {}
    for name in FIELDS:
        deltas[f"len_{name}"] = sign * lengths[name]
        deltas[f"n_{name}"] = sign * (1 if texts[name] else 0)
    stats.add(tx, **deltas)


def index(tx: Tx, docno: int, msg: Message) -> None:
    _apply(tx, docno, msg, +1)


def unindex(tx: Tx, docno: int, msg: Message) -> None:
    _apply(tx, docno, msg, -1)
