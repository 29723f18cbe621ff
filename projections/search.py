"""The ranker: BM25 over content, summary and tags, with scores in 0–1.

For each field the query's terms are looked up in the impact-ordered posting
lists; a term's list is read only up to ``HEAD`` postings (its best-impact,
newest ones), so a very common word costs a bounded read, not a scan.  When a
selective filter (session, tags) is given, the candidate set comes from that
index and lists are read further (``FILTERED_HEAD``).

Field score = Σ idf·tf-factor over matched terms ÷ Σ idf over query terms, so a
field containing every query term with high frequency approaches 1; it is
capped at ``PARTIAL_CAP`` because only a field whose whole normalized text
equals the query scores 1.0 (SPEC §6.10).  The message's score combines the
fields as ``1 − Π(1 − w_f · s_f)``: monotone in every field, 1.0 exactly when a
weight-1 field matches whole.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from eventstore.store import Tx

from . import history, messages, stats, terms
from .tokens import query_terms

HEAD = 4000
FILTERED_HEAD = 200_000
SELECTIVE = 20_000
PARTIAL_CAP = 0.99
WEIGHTS = {"content": 1.0, "summary": 0.9, "tags": 0.8}
_MASK48 = (1 << 48) - 1


@dataclass(frozen=True)
class Filters:
    session_id: str | None = None
    kinds: frozenset[str] = frozenset()
    tiers: frozenset[str] = frozenset()
    tags: tuple[str, ...] = ()
    min_importance: int = 0


@dataclass
class Hit:
    doc: terms.Doc
    score: float
    breakdown: dict[str, float] = field(default_factory=dict)


def idf(n_docs: int, df: int) -> float:
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def _selected_docnos(tx: Tx, flt: Filters) -> set[int] | None:
    """Docnos allowed by the selective filters, or None when not selective."""
    sets: list[set[int]] = []
    for tag in flt.tags:
        sets.append(_dup_docnos(tx, terms.TAGS, tag.encode("utf-8")))
    if flt.session_id is not None:
        ids = list(history.after(tx, flt.session_id, None, SELECTIVE + 1))
        if len(ids) <= SELECTIVE:
            sets.append({d for d in (_docno_of(tx, mid) for mid in ids) if d is not None})
    if not sets:
        return None
    sets.sort(key=len)
    out = sets[0]
    for s in sets[1:]:
        out = out & s
    return out


def _docno_of(tx: Tx, message_id: str) -> int | None:
    state = messages.get(tx, message_id)
    return None if state is None else state.docno


def _dup_docnos(tx: Tx, db: str, key: bytes) -> set[int]:
    with tx.txn.cursor(db=tx.db(db)) as cur:
        if not cur.set_key(key):
            return set()
        return {int.from_bytes(v, "big") for v in cur.iternext_dup(keys=False)}


def _field_scores(tx: Tx, qterms: Counter, fname: str, n_docs: int, avg: float,
                  allowed: set[int] | None) -> dict[int, float]:
    f = terms.FIELDS.index(fname)
    head = FILTERED_HEAD if allowed is not None else HEAD
    raw: dict[int, float] = {}
    total_idf = 0.0
    with tx.txn.cursor(db=tx.db(terms.POSTINGS)) as cur:
        for term, qtf in qterms.items():
            found = cur.set_key(bytes([f]) + term.encode("utf-8"))
            df = cur.count() if found else 0
            w = idf(n_docs, df) * qtf
            total_idf += w
            if not found:
                continue
            for n, v in enumerate(cur.iternext_dup(keys=False)):
                if n >= head:
                    break
                docno = _MASK48 - int.from_bytes(v[1:7], "big")
                if allowed is not None and docno not in allowed:
                    continue
                tf, length = v[7], int.from_bytes(v[8:10], "big")
                raw[docno] = raw.get(docno, 0.0) + w * terms.tf_factor(tf, length, avg)
    if total_idf <= 0:
        return {}
    return {d: min(PARTIAL_CAP, s / total_idf) for d, s in raw.items()}


def _exact(tx: Tx, query: str) -> dict[str, set[int]]:
    return {name: _dup_docnos(tx, terms.EXACT, terms.exact_key(f, query))
            for f, name in enumerate(terms.FIELDS)}


def combine(breakdown: dict[str, float]) -> float:
    miss = 1.0
    for name, s in breakdown.items():
        miss *= 1.0 - WEIGHTS[name] * s
    return 1.0 - miss


def _passes(doc: terms.Doc, flt: Filters) -> bool:
    return ((flt.session_id is None or doc.session_id == flt.session_id)
            and (not flt.kinds or doc.kind in flt.kinds)
            and (not flt.tiers or doc.tier in flt.tiers)
            and doc.importance >= flt.min_importance)


def search(tx: Tx, query: str, flt: Filters, limit: int) -> list[Hit]:
    """The best ``limit`` live messages for ``query`` under ``flt``."""
    st = stats.read(tx)
    n_docs = max(st["active"], 1)
    allowed = _selected_docnos(tx, flt)
    qterms = query_terms(query)
    exact = _exact(tx, query)
    per_field: dict[str, dict[int, float]] = {}
    for name in terms.FIELDS:
        avg = st[f"len_{name}"] / st[f"n_{name}"] if st[f"n_{name}"] else 1.0
        scores = _field_scores(tx, qterms, name, n_docs, max(avg, 1.0), allowed) if qterms else {}
        for docno in exact[name]:
            if allowed is None or docno in allowed:
                scores[docno] = 1.0
        per_field[name] = scores
    candidates: dict[int, dict[str, float]] = {}
    for name, scores in per_field.items():
        for docno, s in scores.items():
            candidates.setdefault(docno, {n: 0.0 for n in terms.FIELDS})[name] = s
    ranked = sorted(((round(combine(b), 6), d) for d, b in candidates.items()), reverse=True)
    return _select(tx, ranked, candidates, flt, limit)


def _select(tx: Tx, ranked, candidates, flt: Filters, limit: int) -> list[Hit]:
    """Apply the remaining filters in score order and settle ties by SPEC's rule."""
    hits: list[Hit] = []
    for score, docno in ranked:
        if len(hits) >= limit and score < hits[-1].score:
            break
        doc = terms.doc(tx, docno)
        if doc is None or not _passes(doc, flt):
            continue
        if flt.tags and not _has_tags(tx, docno, flt.tags):
            continue
        breakdown = {n: round(s, 6) for n, s in candidates[docno].items()}
        hits.append(Hit(doc, score, breakdown))
    hits.sort(key=lambda h: (-h.score, -h.doc.importance, -h.doc.timestamp, h.doc.message_id))
    return hits[:limit]


def _has_tags(tx: Tx, docno: int, tags: tuple[str, ...]) -> bool:
    key = terms.docno_key(docno)
    with tx.txn.cursor(db=tx.db(terms.TAGS)) as cur:
        return all(cur.set_key_dup(t.encode("utf-8"), key) for t in tags)
