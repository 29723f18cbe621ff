"""Read model: the full-text index over content, summary and tags.

Sub-databases (document number ``docno`` = the 6-byte sequence of the event
that created the message in this log; ``field`` = 0 content, 1 summary, 2 tags):

* ``postings`` (dupsort, dupfixed 10): field byte + term →
  ``255 - impact`` (1) + ``~docno`` (6) + tf (1) + field length (2).
  Duplicates sort by value, so each list is **impact-ordered** (best first,
  newest first among equals) and the ranker can stop reading a common term's
  list early.  ``impact`` is the BM25 term-frequency factor computed with a
  fixed reference length per field and quantized to a byte, so it depends on
  nothing but the message; the ranker turns it into a safe upper bound for the
  store's actual average length (:func:`impact_bound`).
* ``doc_postings`` (dupsort, dupfixed 9): the same lists in document order —
  docno (6) + tf (1) + field length (2) — for random access to one document's
  tf (``set_range_dup``) and for walking a list against a filter's set.
* ``exact`` (dupsort, dupfixed 6): field byte + hash of the whole normalized
  field text (each tag on its own) → docno, for SPEC §6.10's whole-field match.
* ``docs``: docno → id (16) + kind, tier, importance (1 each) + timestamp (8) +
  session id: what filters and tie-breaks need without decoding messages.
* ``facets`` (dupsort, dupfixed 6): one list of docnos per filter value —
  ``s`` + session id, ``k`` + kind, ``t`` + tier, ``i`` + importance,
  ``g`` + tag — so a selective filter is answered from an index, and the
  size of each list (``count``) tells the ranker how selective it is
  (:class:`FacetFilter`).

Field lengths and counts live in ``stats`` (``len_*``, ``n_*``).  Indexing is
a deterministic function of the message: replay rebuilds the same bytes.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

from eventstore.events import KINDS, TIERS, Message
from eventstore.ids import to_bytes, to_str
from eventstore.store import Tx

from . import stats
from .tokens import normalize, terms

POSTINGS, DOC_POSTINGS, EXACT, DOCS, FACETS = "postings", "doc_postings", "exact", "docs", "facets"
_DUPS = {"dupsort": True, "dupfixed": True}
SPECS = {POSTINGS: _DUPS, DOC_POSTINGS: _DUPS, EXACT: _DUPS, DOCS: {}, FACETS: _DUPS}
FIELDS = ("content", "summary", "tags")
# BM25 term-frequency saturation and length normalization (Anserini's defaults).
K1, B = 0.9, 0.4
REFERENCE_LENGTH = (32.0, 24.0, 4.0)
MAX_TF, MAX_LENGTH = 255, 65535
IMPACT = struct.Struct(">BHIBH")      # 255-impact, ~docno (hi, lo), tf, length
DOC_POSTING = struct.Struct(">HIBH")  # docno (hi, lo), tf, length
_DOC = struct.Struct(">16sBBBQ")
_MASK48 = (1 << 48) - 1


def docno_key(docno: int) -> bytes:
    return docno.to_bytes(6, "big")


def posting_key(field: int, term: str) -> bytes:
    return bytes([field]) + term.encode("utf-8")


def tf_factor(tf: int, length: int, avg: float) -> float:
    """BM25's saturating term-frequency factor, in [0, 1)."""
    return tf / (tf + K1 * (1 - B + B * length / avg))


def impact_bound(impact: int, field: int, avg: float) -> float:
    """An upper bound of :func:`tf_factor` at ``avg`` for any posting whose
    stored impact is at most ``impact``.

    With reference length R the stored factor is φ < (impact+1)/255; for an
    average A ≥ R the factor grows at most to φ / (φ + (R/A)(1 − φ)), and for
    A < R it only shrinks.
    """
    phi = min(1.0, (impact + 1) / 255)
    rho = min(1.0, REFERENCE_LENGTH[field] / avg)
    return phi / (phi + rho * (1 - phi))


def exact_key(field: int, text: str) -> bytes:
    digest = hashlib.blake2b(normalize(text).strip().encode("utf-8"), digest_size=16).digest()
    return bytes([field]) + digest


def field_texts(msg: Message) -> tuple[list[str], list[str], list[str]]:
    meta = msg.metadata
    return [msg.content], [meta.summary] if meta.summary else [], list(meta.tags)


def _postings(docno: int, field: int, texts: list[str]) -> tuple[int, list[tuple[bytes, bytes, bytes]]]:
    """The field's length in terms and its (key, impact value, doc value) triples."""
    toks = [t for text in texts for t in terms(text)]
    length = min(len(toks), MAX_LENGTH)
    hi, lo = divmod(docno, 1 << 32)
    ihi, ilo = divmod(_MASK48 - docno, 1 << 32)
    out = []
    for term, tf in sorted(Counter(toks).items()):
        tf = min(tf, MAX_TF)
        impact = int(255 * tf_factor(tf, length, REFERENCE_LENGTH[field]))
        out.append((posting_key(field, term), IMPACT.pack(255 - impact, ihi, ilo, tf, length),
                    DOC_POSTING.pack(hi, lo, tf, length)))
    return length, out


def facet_keys(msg: Message) -> Iterator[bytes]:
    m = msg.metadata
    yield b"s" + msg.session_id.encode("utf-8")
    yield b"k" + bytes([KINDS.index(m.memory_kind)])
    yield b"t" + bytes([TIERS.index(m.memory_tier)])
    yield b"i" + bytes([m.importance])
    for tag in dict.fromkeys(m.tags):
        yield b"g" + tag.encode("utf-8")


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


# Offsets of the filterable fields inside a ``docs`` value (see :func:`raw_doc`).
DOC_KIND, DOC_TIER, DOC_IMPORTANCE, DOC_SESSION = 16, 17, 18, _DOC.size


def raw_doc(tx: Tx, docno: int) -> bytes | None:
    """The ``docs`` value itself, for filters that compare a byte or two."""
    return tx.txn.get(docno_key(docno), db=tx.db(DOCS))


def doc(tx: Tx, docno: int) -> Doc | None:
    raw = tx.txn.get(docno_key(docno), db=tx.db(DOCS))
    if raw is None:
        return None
    mid, kind, tier, imp, ts = _DOC.unpack_from(raw)
    return Doc(to_str(mid), KINDS[kind], TIERS[tier], imp, ts, raw[_DOC.size:].decode("utf-8"))


def _field(tx: Tx, docno: int, f: int, texts: list[str], sign: int, deltas: dict[str, int]) -> None:
    """Add (sign=+1) or remove (sign=-1) one field's postings and whole-text rows."""
    op = tx.txn.put if sign > 0 else tx.txn.delete
    postings, doc_postings, exact = tx.db(POSTINGS), tx.db(DOC_POSTINGS), tx.db(EXACT)
    length, entries = _postings(docno, f, texts)
    for key, impact, docpost in entries:
        op(key, impact, db=postings)
        op(key, docpost, db=doc_postings)
    dk = docno_key(docno)
    for text in dict.fromkeys(texts):
        op(exact_key(f, text), dk, db=exact)
    name = FIELDS[f]
    deltas[f"len_{name}"] = deltas.get(f"len_{name}", 0) + sign * length
    deltas[f"n_{name}"] = deltas.get(f"n_{name}", 0) + sign * (1 if texts else 0)


def _rows(tx: Tx, docno: int, msg: Message, sign: int) -> None:
    """Add or remove the message's facet entries and its ``docs`` row."""
    txn, dk = tx.txn, docno_key(docno)
    op, facets = (txn.put if sign > 0 else txn.delete), tx.db(FACETS)
    for key in facet_keys(msg):
        op(key, dk, db=facets)
    if sign > 0:
        txn.put(dk, _doc_value(msg), db=tx.db(DOCS))
    else:
        txn.delete(dk, db=tx.db(DOCS))


def _apply(tx: Tx, docno: int, msg: Message, sign: int) -> None:
    """Index (sign=+1) or unindex (sign=-1) one message version."""
    deltas: dict[str, int] = {}
    for f, texts in enumerate(field_texts(msg)):
        _field(tx, docno, f, texts, sign, deltas)
    _rows(tx, docno, msg, sign)
    stats.add(tx, **deltas)


def index(tx: Tx, docno: int, msg: Message) -> None:
    _apply(tx, docno, msg, +1)


def unindex(tx: Tx, docno: int, msg: Message) -> None:
    _apply(tx, docno, msg, -1)


def reindex(tx: Tx, docno: int, old: Message, new: Message, content_changed: bool) -> None:
    """Move an updated message's rows from ``old`` to ``new``, touching only the
    fields that changed: the same bytes as unindex + index, without re-tokenizing
    an unchanged content (whose text is then not looked at)."""
    deltas: dict[str, int] = {}
    for f, (was, now) in enumerate(zip(field_texts(old), field_texts(new))):
        if (f == 0 and not content_changed) or was == now:
            continue
        _field(tx, docno, f, was, -1, deltas)
        _field(tx, docno, f, now, +1, deltas)
    _rows(tx, docno, old, -1)
    _rows(tx, docno, new, +1)
    if deltas:
        stats.add(tx, **deltas)


class FacetFilter:
    """Search filters answered from the facet lists: the shortest list that
    applies (built into a set of docnos when small enough), plus a per-document
    check, on the ``docs`` bytes, of whatever that list does not settle.

    A condition every live message meets (``kinds`` naming every kind in use,
    say) filters nothing and is dropped.
    """

    def __init__(self, tx: Tx, flt, n_docs: int) -> None:
        """``flt`` has ``session_id``, ``kinds``, ``tiers``, ``tags``, ``min_importance``."""
        self.tx, self.flt = tx, flt
        self.allowed: set[int] | None = None
        self.size = -1                       # -1: nothing to filter
        self._docs: dict[int, Doc | None] = {}
        self._verdicts: dict[int, bool] = {}
        with tx.txn.cursor(db=tx.db(FACETS)) as cur:
            sized = [(sum(cur.count() if cur.set_key(k) else 0 for k in keys), name, keys)
                     for name, keys in self._conditions()]
        sized = [c for c in sized if c[0] < n_docs or c[0] == 0]
        self._pending = {name for _, name, _ in sized}
        if sized:
            self.size, self._best, self._keys = min(sized, key=lambda c: c[0])
        self.checks = bool(self._pending)    # documents must be checked one by one
        self._kinds = {KINDS.index(k) for k in flt.kinds}
        self._tiers = {TIERS.index(t) for t in flt.tiers}
        self._session = (flt.session_id or "").encode("utf-8")

    def _conditions(self) -> list[tuple[object, list[bytes]]]:
        """Each condition, named, as the facet keys whose union it allows."""
        f, out = self.flt, []
        if f.session_id is not None:
            out.append(("session", [b"s" + f.session_id.encode("utf-8")]))
        if f.kinds:
            out.append(("kinds", [b"k" + bytes([KINDS.index(k)]) for k in sorted(f.kinds)]))
        if f.tiers:
            out.append(("tiers", [b"t" + bytes([TIERS.index(t)]) for t in sorted(f.tiers)]))
        if f.min_importance:
            out.append(("importance", [b"i" + bytes([i]) for i in range(f.min_importance, 101)]))
        out.extend((("tag", t), [b"g" + t.encode("utf-8")]) for t in dict.fromkeys(f.tags))
        return out

    def materialize(self, limit: int) -> bool:
        """Build the set of allowed docnos when it has at most ``limit``."""
        if self.size < 0 or self.size > limit:
            return False
        allowed: set[int] = set()
        with self.tx.txn.cursor(db=self.tx.db(FACETS)) as cur:
            for key in self._keys:
                if cur.set_key(key):
                    allowed.update(int.from_bytes(v, "big") for v in cur.iternext_dup(keys=False))
        self.allowed = allowed
        self._pending.discard(self._best)
        self.checks = bool(self._pending)
        return True

    def doc(self, docno: int) -> Doc | None:
        if docno not in self._docs:
            self._docs[docno] = doc(self.tx, docno)
        return self._docs[docno]

    def passes(self, docno: int) -> bool:
        if self.allowed is not None and docno not in self.allowed:
            return False
        if not self.checks:
            return True
        verdict = self._verdicts.get(docno)
        if verdict is None:
            verdict = self._verdicts[docno] = self._check(docno)
        return verdict

    def _check(self, docno: int) -> bool:
        raw = raw_doc(self.tx, docno)
        if raw is None:
            return False
        for name in self._pending:
            if name == "session":
                ok = raw[DOC_SESSION:] == self._session
            elif name == "kinds":
                ok = raw[DOC_KIND] in self._kinds
            elif name == "tiers":
                ok = raw[DOC_TIER] in self._tiers
            elif name == "importance":
                ok = raw[DOC_IMPORTANCE] >= self.flt.min_importance
            else:
                with self.tx.txn.cursor(db=self.tx.db(FACETS)) as cur:
                    ok = cur.set_key_dup(b"g" + name[1].encode("utf-8"), docno_key(docno))
            if not ok:
                return False
        return True
