"""The ranker: BM25 over content, summary and tags, with scores in 0–1.

**Scores.**  For each field f the query's terms t (with the tokenizer's query
weights q_t) give the field score

    s_f = Σ_t q_t · idf_f(t) · tf_factor(tf, len, avg_f)  ÷  Σ_t q_t · idf_f(t)

— BM25 (``K1``, ``B`` in :mod:`projections.terms`) divided by what a document
could at most reach, so s_f < 1.  idf_f(t) = ln(1 + (N_f − df + ½)/(df + ½))
is positive however small the store.  A field whose whole normalized text
equals the query scores exactly 1.0 (SPEC §6.10); any other is capped at
``PARTIAL_CAP``.  A message's score is ``1 − Π_f (1 − w_f · s_f)`` with the
field weights ``WEIGHTS``: monotone in every field, and 1.0 exactly when the
whole content matches.  Matching is OR: one query term is enough, and more
terms, rarer terms and more frequent terms score higher.

**Evaluation** never scans a common term's whole list.  Lists are read
best-impact first, a block at a time, always from the list whose unread
postings could still add the most (score-at-a-time).  Reading stops once no
unread posting — not even a document holding the best unread posting of every
list — could reach the k-th best score found so far; the candidates whose
upper bound still reaches it get their missing terms by random access to the
document-ordered lists.  The result is the exact top k for the cost of the
lists' heads.  A selective filter (session, tags, kinds, tiers,
min_importance: whichever facet list is shortest) instead walks the lists
against the filter's set of documents.  Search only reads.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import islice

from eventstore.events import KINDS, TIERS
from eventstore.store import Tx

from . import stats, terms
from .tokens import query_terms

PARTIAL_CAP = 0.99
WEIGHTS = (1.0, 0.9, 0.8)            # content, summary, tags
FIRST_BLOCK, MAX_BLOCK = 32, 4096    # postings read per step from one list (doubling)
ALLOWED_MAX = 50_000                 # largest filter set worth building
SELECTIVE_WORK = 20_000              # walk the lists against the set when Σ min(df, |set|) ≤ this
EPS = 2e-6                           # beneath the 6-decimal rounding of reported scores
_MASK48 = (1 << 48) - 1
_NF = len(terms.FIELDS)


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


def combine(scores) -> float:
    """1 − Π(1 − w_f · s_f) over the field scores, in field order."""
    miss = 1.0
    for w, s in zip(WEIGHTS, scores):
        miss *= 1.0 - w * s
    return 1.0 - miss


def search(tx: Tx, query: str, flt: Filters, limit: int) -> list[Hit]:
    """The best ``limit`` live messages for ``query`` under ``flt``."""
    lists = _plan(tx, stats.read(tx), query_terms(query))
    fl = _Filter(tx, flt)
    if fl.size == 0:
        return []
    acc = _Accumulator()
    _add_exact(tx, query, acc, fl)
    work = sum(min(lst.df, fl.size) for lst in lists)
    if fl.materialize(ALLOWED_MAX) and work <= SELECTIVE_WORK:
        _walk(tx, lists, acc, fl.allowed)
        candidates = list(acc.scores)
    else:
        candidates = _top_k(tx, lists, acc, fl, limit)
    return _rank(acc, candidates, fl, limit)


# --------------------------------------------------------------------- plan
@dataclass
class _List:
    """One query term in one field: weight, statistics, read position."""

    bit: int
    field: int
    key: bytes
    weight: float          # q · idf ÷ the field's total
    df: int
    avg: float
    read: int = 0
    block: int = FIRST_BLOCK
    bound: float = 0.0     # the most one unread posting can still add
    postings: object = None

    @property
    def done(self) -> bool:
        return self.read >= self.df


def _plan(tx: Tx, st: dict[str, int], qterms: dict[str, float]) -> list[_List]:
    lists: list[_List] = []
    with tx.txn.cursor(db=tx.db(terms.POSTINGS)) as cur:
        for f, name in enumerate(terms.FIELDS):
            n = st[f"n_{name}"]
            if not n:
                continue
            avg = max(st[f"len_{name}"] / n, 1.0)
            found, total = [], 0.0
            for term, q in qterms.items():
                key = terms.posting_key(f, term)
                df = cur.count() if cur.set_key(key) else 0
                w = q * idf(n, df)
                total += w
                if df:
                    found.append((key, w, df))
            for key, w, df in found:
                lists.append(_List(len(lists), f, key, w / total, df, avg))
    return lists


# ------------------------------------------------------------------ filters
class _Filter:
    """A filter as its shortest facet list (maybe built into a set) plus a
    per-document check for the other conditions."""

    def __init__(self, tx: Tx, flt: Filters) -> None:
        self.tx, self.flt = tx, flt
        self.allowed: set[int] | None = None
        self.size = -1                       # unknown: no facet list applies
        self._docs: dict[int, terms.Doc | None] = {}
        options = self._options()
        self.checks = len(options) > 0       # documents must be checked one by one
        if options:
            with tx.txn.cursor(db=tx.db(terms.FACETS)) as cur:
                sizes = [sum(cur.count() if cur.set_key(k) else 0 for k in keys) for keys in options]
            best = min(range(len(options)), key=sizes.__getitem__)
            self.size, self._keys, self._alone = sizes[best], options[best], len(options) == 1

    def _options(self) -> list[list[bytes]]:
        """Each filter condition as the facet keys whose union it allows."""
        f, out = self.flt, []
        if f.session_id is not None:
            out.append([b"s" + f.session_id.encode("utf-8")])
        if f.kinds:
            out.append([b"k" + bytes([KINDS.index(k)]) for k in sorted(f.kinds)])
        if f.tiers:
            out.append([b"t" + bytes([TIERS.index(t)]) for t in sorted(f.tiers)])
        if f.min_importance:
            out.append([b"i" + bytes([i]) for i in range(f.min_importance, 101)])
        out.extend([b"g" + t.encode("utf-8")] for t in dict.fromkeys(f.tags))
        return out

    def materialize(self, limit: int) -> bool:
        """Build the set of allowed docnos when it has at most ``limit``."""
        if self.size < 0 or self.size > limit:
            return False
        allowed: set[int] = set()
        with self.tx.txn.cursor(db=self.tx.db(terms.FACETS)) as cur:
            for key in self._keys:
                if cur.set_key(key):
                    allowed.update(int.from_bytes(v, "big") for v in cur.iternext_dup(keys=False))
        self.allowed = allowed
        self.checks = not self._alone
        return True

    def doc(self, docno: int) -> terms.Doc | None:
        if docno not in self._docs:
            self._docs[docno] = terms.doc(self.tx, docno)
        return self._docs[docno]

    def passes(self, docno: int) -> bool:
        if self.allowed is not None and docno not in self.allowed:
            return False
        if not self.checks:
            return True
        d, f = self.doc(docno), self.flt
        if d is None or not ((f.session_id is None or d.session_id == f.session_id)
                             and (not f.kinds or d.kind in f.kinds)
                             and (not f.tiers or d.tier in f.tiers)
                             and d.importance >= f.min_importance):
            return False
        key = terms.docno_key(docno)
        with self.tx.txn.cursor(db=self.tx.db(terms.FACETS)) as cur:
            return all(cur.set_key_dup(b"g" + t.encode("utf-8"), key) for t in f.tags)


# -------------------------------------------------------------- accumulator
class _Accumulator:
    """Partial field scores per document, and which lists each was seen in."""

    def __init__(self) -> None:
        self.scores: dict[int, list[float]] = {}
        self.seen: dict[int, int] = {}
        self.exact: dict[int, int] = {}      # docno → fields (bits) matched whole
        self.touched: set[int] = set()       # changed since the k-th score was last taken
        self.top: list[tuple[float, int]] = []

    def field_scores(self, docno: int) -> list[float]:
        s = [min(PARTIAL_CAP, v) for v in self.scores[docno]]
        whole = self.exact.get(docno, 0)
        return [1.0 if whole >> f & 1 else s[f] for f in range(_NF)]

    def score(self, docno: int) -> float:
        return combine(self.field_scores(docno))

    def bound(self, docno: int, extra: list[float]) -> float:
        s, whole = self.scores[docno], self.exact.get(docno, 0)
        return combine(1.0 if whole >> f & 1 else min(PARTIAL_CAP, s[f] + extra[f]) for f in range(_NF))


def _add_exact(tx: Tx, query: str, acc: _Accumulator, fl: _Filter) -> None:
    with tx.txn.cursor(db=tx.db(terms.EXACT)) as cur:
        for f in range(_NF):
            if not cur.set_key(terms.exact_key(f, query)):
                continue
            for v in cur.iternext_dup(keys=False):
                docno = int.from_bytes(v, "big")
                if fl.allowed is None or docno in fl.allowed:
                    acc.scores.setdefault(docno, [0.0] * _NF)
                    acc.seen.setdefault(docno, 0)
                    acc.exact[docno] = acc.exact.get(docno, 0) | 1 << f
                    acc.touched.add(docno)


def _factor_constants(lst: _List) -> tuple[float, float]:
    return terms.K1 * (1 - terms.B), terms.K1 * terms.B / lst.avg


# --------------------------------------------------------- filtered walking
def _walk(tx: Tx, lists: list[_List], acc: _Accumulator, allowed: set[int]) -> None:
    """Exact scores of every allowed document, from the document-ordered lists."""
    scores, seen, unpack = acc.scores, acc.seen, terms.DOC_POSTING.unpack
    ordered = sorted(allowed)
    with tx.txn.cursor(db=tx.db(terms.DOC_POSTINGS)) as cur:
        for lst in lists:
            c, d, w, f, bit = *_factor_constants(lst), lst.weight, lst.field, 1 << lst.bit
            if lst.df <= len(ordered):
                cur.set_key(lst.key)
                found = (unpack(v) for v in cur.iternext_dup(keys=False))
            else:
                found = _probe(cur, lst.key, ordered)
            for hi, lo, tf, length in found:
                docno = hi << 32 | lo
                if docno not in allowed:
                    continue
                s = scores.get(docno)
                if s is None:
                    s = scores[docno] = [0.0] * _NF
                    seen[docno] = 0
                s[f] += w * tf / (tf + c + d * length)
                seen[docno] |= bit


def _probe(cur, key: bytes, docnos):
    """The document-ordered postings of ``key`` for each of ``docnos`` present."""
    unpack = terms.DOC_POSTING.unpack
    for docno in docnos:
        if cur.set_range_dup(key, terms.docno_key(docno)):
            v = cur.value()
            hi, lo, tf, length = unpack(v)
            if hi << 32 | lo == docno:
                yield hi, lo, tf, length


# ------------------------------------------------------- score-at-a-time
def _top_k(tx: Tx, lists: list[_List], acc: _Accumulator, fl: _Filter, k: int) -> list[int]:
    cursors = []
    try:
        for lst in lists:
            cur = tx.txn.cursor(db=tx.db(terms.POSTINGS))
            cursors.append(cur)
            cur.set_key(lst.key)
            lst.bound = lst.weight * terms.impact_bound(255 - cur.value()[0], lst.field, lst.avg)
            lst.postings = cur.iternext_dup(keys=False)
        _read_heads(lists, acc, fl, k)
    finally:
        for cur in cursors:
            cur.close()
    return _complete(tx, lists, acc, fl, k)


def _read_heads(lists: list[_List], acc: _Accumulator, fl: _Filter, k: int) -> None:
    """Read impact-ordered blocks until no unseen document can reach the k-th score."""
    theta = _kth(acc, fl, k)
    heap = [(-lst.bound, lst.bit) for lst in lists]
    heapq.heapify(heap)
    while heap and _unseen_bound(lists) >= theta - EPS:
        lst = lists[heapq.heappop(heap)[1]]
        _read_block(lst, acc, fl.allowed)
        if not lst.done:
            heapq.heappush(heap, (-lst.bound, lst.bit))
        theta = _kth(acc, fl, k)


def _read_block(lst: _List, acc: _Accumulator, allowed: set[int] | None) -> int:
    """Add the next block of ``lst``'s impact-ordered postings; returns how many."""
    scores, seen, touched, unpack = acc.scores, acc.seen, acc.touched, terms.IMPACT.unpack
    c, d = _factor_constants(lst)
    w, f, bit = lst.weight, lst.field, 1 << lst.bit
    n, inv = 0, 255
    for v in islice(lst.postings, lst.block):
        n += 1
        inv, hi, lo, tf, length = unpack(v)
        docno = _MASK48 - (hi << 32 | lo)
        if allowed is not None and docno not in allowed:
            continue
        s = scores.get(docno)
        if s is None:
            s = scores[docno] = [0.0] * _NF
            seen[docno] = 0
        s[f] += w * tf / (tf + c + d * length)
        seen[docno] |= bit
        touched.add(docno)
    lst.read = lst.df if n < lst.block else lst.read + n
    lst.block = min(2 * lst.block, MAX_BLOCK)
    lst.bound = 0.0 if lst.done else lst.weight * terms.impact_bound(255 - inv, lst.field, lst.avg)
    return n


def _unseen_bound(lists: list[_List]) -> float:
    return combine(min(PARTIAL_CAP, s) for s in _open_bounds(lists))


def _open_bounds(lists: list[_List]) -> list[float]:
    per_field = [0.0] * _NF
    for lst in lists:
        per_field[lst.field] += lst.bound
    return per_field


def _kth(acc: _Accumulator, fl: _Filter, k: int) -> float:
    """The k-th best current score among documents that pass the filter.

    Scores only grow, so the best k can change only by documents touched since
    the last call: those and the previous best k are all that is scored.
    """
    pool = acc.touched.union(d for _, d in acc.top)
    acc.touched = set()
    acc.top = heapq.nlargest(k, ((acc.score(d), d) for d in pool if fl.passes(d)))
    return acc.top[-1][0] if len(acc.top) >= k else 0.0


def _complete(tx: Tx, lists: list[_List], acc: _Accumulator, fl: _Filter, k: int) -> list[int]:
    """Fill in the unread terms of every candidate that could still make the top k."""
    open_lists = [lst for lst in lists if not lst.done]
    if not open_lists:
        return list(acc.scores)
    extra, mask = _open_bounds(lists), sum(1 << lst.bit for lst in open_lists)
    theta = _kth(acc, fl, k)
    known = [d for d, s in acc.seen.items() if s & mask == mask]
    need = [d for d, s in acc.seen.items() if s & mask != mask and acc.bound(d, extra) >= theta - EPS]
    need.sort()
    with tx.txn.cursor(db=tx.db(terms.DOC_POSTINGS)) as cur:
        for lst in open_lists:
            c, d, w, f, bit = *_factor_constants(lst), lst.weight, lst.field, 1 << lst.bit
            missing = [doc for doc in need if not acc.seen[doc] & bit]
            for hi, lo, tf, length in _probe(cur, lst.key, missing):
                acc.scores[hi << 32 | lo][f] += w * tf / (tf + c + d * length)
    return known + need


# ------------------------------------------------------------------ ranking
def _rank(acc: _Accumulator, candidates: list[int], fl: _Filter, limit: int) -> list[Hit]:
    """Apply the filter in score order and settle ties by SPEC's rule."""
    scored = sorted(((_reported(acc.score(d)), d) for d in candidates), reverse=True)
    hits: list[Hit] = []
    for score, docno in scored:
        if len(hits) >= limit and score < hits[-1].score:
            break
        if not fl.passes(docno) or (doc := fl.doc(docno)) is None:
            continue
        parts = acc.field_scores(docno)
        hits.append(Hit(doc, score, {name: _reported(s) for name, s in zip(terms.FIELDS, parts)}))
    hits.sort(key=lambda h: (-h.score, -h.doc.importance, -h.doc.timestamp, h.doc.message_id))
    return hits[:limit]


def _reported(s: float) -> float:
    """Six decimals, never rounding a real match down to zero."""
    return 0.0 if s <= 0 else max(round(s, 6), 1e-6)
