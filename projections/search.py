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
whole content matches.  Matching is OR: one query term is enough; more terms,
rarer terms and more frequent terms score higher.

**Evaluation** reads the impact-ordered lists a block at a time, always from
the list whose unread postings could still add the most (score-at-a-time),
and stops as soon as no unseen document — not even one holding the best
unread posting of every list — could reach the k-th best score found so far.
Candidates that could still reach it get their unread terms by random access
to the document-ordered lists (or by finishing a list when that is cheaper).
That is the exact top k, ties included.  Should that need more than
``READ_BUDGET`` postings read or ``COMPLETE_MAX`` candidates completed, the
best-bounded ones are taken (anytime ranking: the heads of the lists hold the
postings that matter most; :class:`Trace` says when), so a common word never
costs its whole list.  Filters come from :class:`terms.FacetFilter`: a
selective one walks the lists against its set of documents, exactly; any
other is checked per candidate while reading.  Search only reads.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import islice

from eventstore.store import Tx

from . import stats, terms
from .tokens import query_terms

PARTIAL_CAP = 0.99
WEIGHTS = (1.0, 0.9, 0.8)            # content, summary, tags
WHOLE = 10.0                         # added to a field's sum when it equals the query whole
FIRST_BLOCK, MAX_BLOCK = 32, 2048    # postings per step from one list (doubling)
READ_BUDGET = 20_000                 # impact-ordered postings read at most
COMPLETE_MAX = 1_000                 # candidates completed by random access at most
PROBE_RATIO = 4                      # finish a list instead when its rest ≤ this × its probes
ALLOWED_MAX = 10_000                 # largest filter set worth building
SELECTIVE_WORK = 20_000              # walk against the set when Σ min(df, |set|) ≤ this
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
class Trace:
    """What one evaluation did (for benchmarks and tests)."""

    path: str = ""          # "walk" (selective filter) or "top-k"
    lists: int = 0          # query terms × fields present in the index
    postings: int = 0       # Σ df over those lists
    read: int = 0           # postings read in order
    probes: int = 0         # random accesses to the document-ordered lists
    exact: bool = True      # False when the read budget or COMPLETE_MAX cut it short


@dataclass
class Hit:
    doc: terms.Doc
    score: float
    breakdown: dict[str, float] = field(default_factory=dict)


def idf(n_docs: int, df: int) -> float:
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def field_score(total: float) -> float:
    """A field's score from its sum: 1.0 for a whole match, else capped."""
    return 1.0 if total >= WHOLE else min(total, PARTIAL_CAP)


def combine(scores) -> float:
    """1 − Π(1 − w_f · s_f) over the field scores, in field order."""
    miss = 1.0
    for w, s in zip(WEIGHTS, scores):
        miss *= 1.0 - w * s
    return 1.0 - miss


def search(tx: Tx, query: str, flt: Filters, limit: int, trace: Trace | None = None) -> list[Hit]:
    """The best ``limit`` live messages for ``query`` under ``flt``."""
    trace = trace if trace is not None else Trace()
    st = stats.read(tx)
    fl = terms.FacetFilter(tx, flt, st["active"])
    if fl.size == 0:
        return []
    lists = _plan(tx, st, query_terms(query))
    trace.lists, trace.postings = len(lists), sum(lst.df for lst in lists)
    acc = _Accumulator()
    walk = fl.materialize(ALLOWED_MAX) and sum(min(lst.df, fl.size) for lst in lists) <= SELECTIVE_WORK
    _add_whole_matches(tx, query, acc, fl)
    if walk:
        trace.path = "walk"
        _walk(tx, lists, acc, fl.allowed)
        candidates = acc.docs()
    else:
        trace.path = "top-k"
        candidates = _TopK(tx, lists, acc, fl, limit, trace).run()
    return _rank(acc, candidates, fl, limit)


# --------------------------------------------------------------------- plan
@dataclass(eq=False)
class _List:
    """One query term in one field: weight, statistics, read position."""

    field: int
    key: bytes
    weight: float          # q · idf ÷ the field's total
    df: int
    avg: float
    read: int = 0
    block: int = FIRST_BLOCK
    bound: float = 0.0     # the most one unread posting can still add
    postings: object = None
    seen: set = field(default_factory=set)

    @property
    def done(self) -> bool:
        return self.read >= self.df

    def factor(self) -> tuple[float, float]:
        """(c, d) with tf_factor = tf / (tf + c + d · length)."""
        return terms.K1 * (1 - terms.B), terms.K1 * terms.B / self.avg


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
            lists.extend(_List(f, key, w / total, df, avg) for key, w, df in found)
    return lists


# -------------------------------------------------------------- accumulator
class _Accumulator:
    """Per field, each document's partial sum (``WHOLE`` added for a whole match)."""

    def __init__(self) -> None:
        self.sums: list[dict[int, float]] = [{} for _ in range(_NF)]
        self.touched: set[int] = set()       # changed since the k-th score was last taken
        self.top: list[tuple[float, int]] = []

    def single(self) -> bool:
        """Only the content field has anything (the common case)."""
        return not any(self.sums[1:])

    def docs(self) -> list[int]:
        if self.single():
            return list(self.sums[0])
        return list(set().union(*self.sums))

    def fields(self, docno: int) -> list[float]:
        return [field_score(s.get(docno, 0.0)) for s in self.sums]

    def score(self, docno: int) -> float:
        return combine(self.fields(docno))

    def bound(self, docno: int, extra: list[float]) -> float:
        return combine(field_score(s.get(docno, 0.0) + e) for s, e in zip(self.sums, extra))


def _add_whole_matches(tx: Tx, query: str, acc: _Accumulator, fl: terms.FacetFilter) -> None:
    with tx.txn.cursor(db=tx.db(terms.EXACT)) as cur:
        for f in range(_NF):
            if cur.set_key(terms.exact_key(f, query)):
                for v in cur.iternext_dup(keys=False):
                    docno = int.from_bytes(v, "big")
                    if not fl.passes(docno):
                        continue
                    acc.sums[f][docno] = acc.sums[f].get(docno, 0.0) + WHOLE
                    acc.touched.add(docno)


# --------------------------------------------------------- filtered walking
def _walk(tx: Tx, lists: list[_List], acc: _Accumulator, allowed: set[int]) -> None:
    """Exact sums for every allowed document, from the document-ordered lists."""
    ordered = sorted(allowed)
    with tx.txn.cursor(db=tx.db(terms.DOC_POSTINGS)) as cur:
        for lst in lists:
            (c, d), w, sums = lst.factor(), lst.weight, acc.sums[lst.field]
            if lst.df <= len(ordered):
                cur.set_key(lst.key)
                found = map(terms.DOC_POSTING.unpack, cur.iternext_dup(keys=False))
            else:
                found = _probe(cur, lst.key, ordered)
            for hi, lo, tf, length in found:
                docno = hi << 32 | lo
                if docno in allowed:
                    sums[docno] = sums.get(docno, 0.0) + w * tf / (tf + c + d * length)


def _probe(cur, key: bytes, docnos):
    """The document-ordered postings of ``key`` for those of ``docnos`` it has."""
    unpack = terms.DOC_POSTING.unpack
    for docno in docnos:
        if cur.set_range_dup(key, terms.docno_key(docno)):
            hi, lo, tf, length = unpack(cur.value())
            if hi << 32 | lo == docno:
                yield hi, lo, tf, length


# ------------------------------------------------------- score-at-a-time
class _TopK:
    """Impact-ordered evaluation with a safe stop, a budget, and completion."""

    def __init__(self, tx: Tx, lists: list[_List], acc: _Accumulator, fl: terms.FacetFilter, k: int,
                 trace: Trace) -> None:
        self.tx, self.lists, self.acc, self.fl, self.k, self.trace = tx, lists, acc, fl, k, trace
        self.keep = fl.passes if fl.checks or fl.allowed is not None else None

    def run(self) -> list[int]:
        cursors = []
        try:
            for lst in self.lists:
                cur = self.tx.txn.cursor(db=self.tx.db(terms.POSTINGS))
                cursors.append(cur)
                cur.set_key(lst.key)
                lst.bound = lst.weight * terms.impact_bound(255 - cur.value()[0], lst.field, lst.avg)
                lst.postings = cur.iternext_dup(keys=False)
            self._read()
            return self._complete()
        finally:
            for cur in cursors:
                cur.close()

    def _read(self) -> None:
        """Read blocks until no unseen document can reach the k-th score."""
        theta, read = self._kth(), 0
        heap = [(-lst.bound, i) for i, lst in enumerate(self.lists)]
        heapq.heapify(heap)
        while heap and self._unseen_bound() >= theta - EPS:
            if read >= READ_BUDGET:
                self.trace.exact = False
                break
            i = heapq.heappop(heap)[1]
            lst = self.lists[i]
            read += _read_block(lst, self.acc, self.keep)
            if not lst.done:
                heapq.heappush(heap, (-lst.bound, i))
            theta = self._kth()
        self.trace.read += read

    def _open_bounds(self) -> list[float]:
        per_field = [0.0] * _NF
        for lst in self.lists:
            per_field[lst.field] += lst.bound
        return per_field

    def _unseen_bound(self) -> float:
        return combine(min(PARTIAL_CAP, s) for s in self._open_bounds())

    def _kth(self) -> float:
        """The k-th best score so far (every accumulated document passes the filter).

        Scores only grow, so the best k can change only by documents touched
        since the last call: those and the previous best k are all it scores.
        """
        acc = self.acc
        pool = acc.touched.union(d for _, d in acc.top)
        acc.touched = set()
        if acc.single():
            sums = acc.sums[0]
            best = heapq.nlargest(self.k, zip(map(sums.__getitem__, pool), pool))
            acc.top = [(field_score(s), d) for s, d in best]
        else:
            acc.top = heapq.nlargest(self.k, ((acc.score(d), d) for d in pool))
        return acc.top[-1][0] if len(acc.top) >= self.k else 0.0

    def _complete(self) -> list[int]:
        """Fill in the unread terms of the candidates that could still make the top k."""
        open_lists = [lst for lst in self.lists if not lst.done]
        if not open_lists:
            return self.acc.docs()
        theta, extra = self._kth() - EPS, self._open_bounds()
        known, need = [], []
        for docno in self._reachable(theta, extra):
            own, missing = [0.0] * _NF, False
            for lst in open_lists:
                if docno not in lst.seen:
                    own[lst.field] += lst.bound
                    missing = True
            if not missing:
                known.append(docno)
            elif (ub := self._bound(docno, own)) >= theta:
                need.append((ub, docno))
        if len(need) > COMPLETE_MAX:
            self.trace.exact = False
            need = [d for _, d in heapq.nlargest(COMPLETE_MAX, need)]
        else:
            need = [d for _, d in need]
        for lst in open_lists:
            self._fill(lst, [d for d in need if d not in lst.seen])
        return known + need

    def _bound(self, docno: int, extra: list[float]) -> float:
        if self.acc.single():
            return field_score(self.acc.sums[0][docno] + extra[0])
        return self.acc.bound(docno, extra)

    def _reachable(self, theta: float, extra: list[float]) -> list[int]:
        acc = self.acc
        if acc.single():
            floor = theta - extra[0]
            return [d for d, s in acc.sums[0].items() if s >= floor]
        return [d for d in acc.docs() if acc.bound(d, extra) >= theta]

    def _fill(self, lst: _List, docnos: list[int]) -> None:
        """Add ``lst``'s postings for ``docnos``: by finishing it or by probes."""
        if not docnos:
            return
        (c, d), w, sums = lst.factor(), lst.weight, self.acc.sums[lst.field]
        wanted = set(docnos)
        if lst.df - lst.read <= PROBE_RATIO * len(docnos):
            self.trace.read += lst.df - lst.read
            unpack = terms.IMPACT.unpack
            found = ((_MASK48 - (hi << 32 | lo), tf, length)
                     for _, hi, lo, tf, length in map(unpack, lst.postings))
        else:
            self.trace.probes += len(wanted)
            with self.tx.txn.cursor(db=self.tx.db(terms.DOC_POSTINGS)) as cur:
                found = [(hi << 32 | lo, tf, length)
                         for hi, lo, tf, length in _probe(cur, lst.key, sorted(wanted))]
        for docno, tf, length in found:
            if docno in wanted:
                sums[docno] = sums.get(docno, 0.0) + w * tf / (tf + c + d * length)


def _read_block(lst: _List, acc: _Accumulator, keep) -> int:
    """Add the next block of ``lst``'s impact-ordered postings (of documents
    ``keep`` accepts, when given); returns how many were read."""
    (c, d), w, sums, unpack = lst.factor(), lst.weight, acc.sums[lst.field], terms.IMPACT.unpack
    seen, touched = lst.seen.add, acc.touched.add
    n, inv = 0, 255
    for v in islice(lst.postings, lst.block):
        n += 1
        inv, hi, lo, tf, length = unpack(v)
        docno = _MASK48 - (hi << 32 | lo)
        if keep is not None and docno not in sums and not keep(docno):
            continue
        sums[docno] = sums.get(docno, 0.0) + w * tf / (tf + c + d * length)
        seen(docno)
        touched(docno)
    lst.read = lst.df if n < lst.block else lst.read + n
    lst.block = min(2 * lst.block, MAX_BLOCK)
    lst.bound = 0.0 if lst.done else w * terms.impact_bound(255 - inv, lst.field, lst.avg)
    return n


# ------------------------------------------------------------------ ranking
def _rank(acc: _Accumulator, candidates: list[int], fl: terms.FacetFilter, limit: int) -> list[Hit]:
    """The best ``limit`` candidates that pass the filter, ties settled by SPEC's
    rule: higher importance, then newer timestamp, then message id — the larger
    first, since ULIDs are monotonic: still the newer within one millisecond."""
    scored = [(_reported(acc.score(d)), d) for d in candidates]
    m = 2 * limit + 8
    while True:
        hits, complete = _take(heapq.nlargest(m, scored), acc, fl, limit)
        if complete or m >= len(scored):
            break
        m *= 4
    hits.sort(key=lambda h: (h.score, h.doc.importance, h.doc.timestamp, h.doc.message_id), reverse=True)
    return hits[:limit]


def _take(ordered, acc: _Accumulator, fl: terms.FacetFilter, limit: int) -> tuple[list[Hit], bool]:
    """Passing hits in score order; True when a lower score closed the list."""
    hits: list[Hit] = []
    for score, docno in ordered:
        if len(hits) >= limit and score < hits[-1].score:
            return hits, True
        if not fl.passes(docno) or (doc := fl.doc(docno)) is None:
            continue
        parts = {name: _reported(s) for name, s in zip(terms.FIELDS, acc.fields(docno))}
        hits.append(Hit(doc, score, parts))
    return hits, False


def _reported(s: float) -> float:
    """Six decimals, never rounding a real match down to zero."""
    return 0.0 if s <= 0 else max(round(s, 6), 1e-6)
