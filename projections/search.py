"""The ranker: BM25 over content, summary and tags, with scores in 0–1.

**Scores.**  For each field f the query's terms t (with the tokenizer's query
weights q_t) give the field score

    s_f = Σ_t q_t · idf_f(t) · tf / (tf + K1 · (1 − B + B · len / avg_f))  ÷  Σ_t q_t · idf_f(t)

— BM25 (``K1``, ``B``) divided by what a document
could at most reach, so s_f < 1.  idf_f(t) = ln(1 + (N_f − df + ½)/(df + ½))
is positive however small the store.  A field whose whole normalized text
equals the query scores exactly 1.0 (docs/tools.md, search_messages); any other is capped at
``PARTIAL_CAP``.  A message's score is ``1 − Π_f (1 − w_f · s_f)`` with the
field weights ``WEIGHTS``: monotone in every field, and 1.0 exactly when the
whole content matches.  Matching is OR: one query term is enough; more terms,
rarer terms and more frequent terms score higher.

**Evaluation** reads the document-ordered posting lists of
:mod:`projections.index` a list at a time, the rarest (highest weight) first,
summing each document's fields.  Before each list it asks whether a document
seen in no list so far could still reach the k-th best score found so far —
the lists left add at most their weights — and once none can, the lists left
are read only for the candidates that could still make the top k: by random
access (bisecting the chunk starts, then the chunk) or by reading the list
whole when that is cheaper (MaxScore).  That is the exact top k, ties
included.  Documents written since the last merge are scored first, whole,
from their pending records.  Filters come from :class:`~projections.index.FacetFilter`: a
selective one reads only its documents' postings, exactly; any other is
checked per document while reading.  Search only reads.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from eventstore.store import Tx

from . import sessions as session_index
from . import stats
from .context import POOL, ContextScorer
from .context import WEIGHT as CONTEXT_WEIGHT
from .index import EXACT, FIELDS, POSTINGS, Doc, FacetFilter, chunk_count, decode_chunk, exact_key, list_prefix, pending
from .tokens import query_terms

# BM25 term-frequency saturation and length normalization (Anserini's defaults).
K1, B = 0.9, 0.4
PARTIAL_CAP = 0.99
WEIGHTS = (1.0, 0.9, 0.8)            # content, summary, tags
WHOLE = 10.0                         # added to a field's sum when it equals the query whole
PROBE_RATIO = 4                      # read a list whole instead when df ≤ this × its probes
ALLOWED_MAX = 10_000                 # largest filter set worth building
SELECTIVE_WORK = 20_000              # walk against the set when Σ min(df, |set|) ≤ this
EPS = 2e-6                           # beneath the 6-decimal rounding of reported scores
_NF = len(FIELDS)


@dataclass(frozen=True)
class Filters:
    session_id: str | None = None
    kinds: frozenset[str] = frozenset()
    tiers: frozenset[str] = frozenset()
    tags: tuple[str, ...] = ()
    min_importance: int = 0
    roles: frozenset[str] = frozenset()
    after: int | None = None          # timestamp ≥ after (ms since the epoch)
    before: int | None = None         # timestamp < before


@dataclass
class Trace:
    """What one evaluation did (for benchmarks and tests)."""

    path: str = ""          # "walk" (selective filter) or "top-k"
    lists: int = 0          # query terms × fields present in the index
    postings: int = 0       # Σ df over those lists
    read: int = 0           # postings of lists read whole
    probes: int = 0         # random accesses to one document's posting in a list
    pending: int = 0        # documents written since the last merge


@dataclass
class Hit:
    doc: Doc
    score: float
    breakdown: dict[str, float] = dataclasses.field(default_factory=dict)


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


def search(tx: Tx, query: str, flt: Filters, limit: int, trace: Trace | None = None,
           prune: bool = True, context: bool = True) -> list[Hit]:
    """The best ``limit`` live messages for ``query`` under ``flt``.
    ``prune=False`` reads every list whole (the same result, slower: for
    tests); ``context=False`` ranks by the own fields alone (for comparisons)."""
    trace = trace if trace is not None else Trace()
    pool = max(limit, POOL) if context else limit
    st = stats.read(tx)
    fl = FacetFilter(tx, flt, st["active"])
    pend = pending(tx)
    trace.pending = len(pend)
    if fl.size == 0 and not pend:
        return []
    lists = _plan(tx, st, query_terms(query), pend)
    trace.lists, trace.postings = len(lists), sum(lst.df for lst in lists)
    acc = _Accumulator()
    wholes = [exact_key(f, query) for f in range(_NF)]
    done = _score_pending(wholes, lists, pend, fl, acc)
    _add_whole_matches(tx, wholes, acc, fl)
    allowed = fl.allowed if fl.materialize(ALLOWED_MAX) else None
    if allowed is not None and sum(min(lst.df, fl.size) for lst in lists) <= SELECTIVE_WORK:
        trace.path = "walk"
        only = sorted(allowed)
        for lst in lists:
            _read(lst, acc, fl.passes if fl.checks else None, trace, only)
        candidates, keep = acc.docs(), None
        rest: list[_List] = []
    else:
        trace.path = "top-k"
        keep = fl.passes if fl.checks or fl.allowed is not None else None
        candidates, rest = _top_k(lists, acc, keep, pool, done, trace, prune)
    if context:
        completed = _Completion(acc, rest, keep, done.union(candidates), trace)
        return _rank_in_context(tx, acc, candidates, completed, fl, limit, lists, pend, st)
    return _rank(acc, [(_reported(acc.score(d)), d) for d in candidates], fl, limit)


# --------------------------------------------------------------------- plan
@dataclass(eq=False)
class _List:
    """One query term in one field: weight, statistics and its chunks."""

    field: int
    term: str
    weight: float          # q · idf ÷ the field's total
    df: int                # postings in the merged lists
    avg: float
    keys: list[bytes]      # of the chunks, in order
    chunks: list[bytes]
    df_all: int = 0        # postings, pending documents included
    q: float = 1.0         # the term's query weight
    decoded: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.starts = [int.from_bytes(k[-6:], "big") for k in self.keys]     # first docnos, to bisect

    def factor(self) -> tuple[float, float]:
        """(c, d) with tf_factor = tf / (tf + c + d · length)."""
        return K1 * (1 - B), K1 * B / self.avg

    def chunk(self, i: int) -> tuple:
        found = self.decoded.get(i)
        if found is None:
            found = self.decoded[i] = decode_chunk(self.keys[i], self.chunks[i])
        return found

    def postings(self):
        """Every (docno, tf, length), in document order."""
        for i in range(len(self.chunks)):
            yield from zip(*self.chunk(i))

    def probe(self, docno: int) -> tuple[int, int] | None:
        """(tf, length) of ``docno`` in this list, if it is there."""
        i = bisect_right(self.starts, docno) - 1
        if i < 0:
            return None
        docnos, tfs, lengths = self.chunk(i)
        j = bisect_left(docnos, docno)
        return (tfs[j], lengths[j]) if j < len(docnos) and docnos[j] == docno else None


def _plan(tx: Tx, st: dict[str, int], qterms: dict[str, float], pend: list) -> list[_List]:
    lists: list[_List] = []
    with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
        for f, name in enumerate(FIELDS):
            n = st[f"n_{name}"]
            if not n:
                continue
            avg = max(st[f"len_{name}"] / n, 1.0)
            found, total = [], 0.0
            for term, q in qterms.items():
                keys, chunks = _chunks(cur, list_prefix(f, term))
                df = sum(map(chunk_count, chunks))
                df_all = df + sum(1 for p in pend if term in p.tfs[f])
                w = q * idf(n, df_all)
                total += w
                if df_all:
                    found.append((term, w, df, keys, chunks, df_all, q))
            lists.extend(_List(f, term, w / total, df, avg, keys, chunks, df_all, q)
                         for term, w, df, keys, chunks, df_all, q in found)
    return lists


def _chunks(cur, prefix: bytes) -> tuple[list[bytes], list[bytes]]:
    keys, chunks = [], []
    if cur.set_range(prefix):
        for k, v in cur:
            if not k.startswith(prefix):
                break
            keys.append(k)
            chunks.append(v)
    return keys, chunks


# -------------------------------------------------------------- accumulator
class _Accumulator:
    """Per field, each document's partial sum (``WHOLE`` added for a whole match)."""

    def __init__(self) -> None:
        self.sums: list[dict[int, float]] = [{} for _ in range(_NF)]

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

    def best(self, docnos: list[int], k: int) -> list[int]:
        """The ``k`` of ``docnos`` with the highest scores, the newer first
        among equal ones (compared rounded: the order sums were added in
        must not matter)."""
        if self.single():              # the score grows with the content sum (every docno has one)
            sums = self.sums[0]
            top = heapq.nlargest(k, docnos, key=sums.__getitem__)
            if len(top) == k:          # settle the ties at the k-th among the few near it
                floor = sums[top[-1]] - 1e-8
                top = [d for d in docnos if sums[d] >= floor]
            return heapq.nlargest(k, top, key=lambda d: (round(sums[d], 9), d))
        return heapq.nlargest(k, docnos, key=lambda d: (round(self.score(d), 9), d))

    def kth(self, k: int) -> float:
        """The k-th best score so far (a lower bound of the final k-th)."""
        if self.single():
            best = heapq.nlargest(k, self.sums[0].values())
            return field_score(best[-1]) if len(best) >= k else 0.0
        best = heapq.nlargest(k, map(self.score, self.docs()))
        return best[-1] if len(best) >= k else 0.0


def _score_pending(wholes: list[bytes], lists: list[_List], pend: list, fl: FacetFilter,
                   acc: _Accumulator) -> set[int]:
    """Whole scores of the pending documents that pass; returns their docnos.
    ``wholes`` are the query's whole-text keys, one per field."""
    factors = [lst.factor() for lst in lists]
    done = set()
    for p in pend:
        if not fl.passes_pending(p):
            continue
        done.add(p.docno)
        for lst, (c, d) in zip(lists, factors):
            tf = p.tfs[lst.field].get(lst.term)
            if tf:
                sums = acc.sums[lst.field]
                sums[p.docno] = sums.get(p.docno, 0.0) + lst.weight * tf / (
                    tf + c + d * p.lengths[lst.field])
        for f, key in enumerate(wholes):
            if key in p.exact:
                acc.sums[f][p.docno] = acc.sums[f].get(p.docno, 0.0) + WHOLE
    return done


def _add_whole_matches(tx: Tx, wholes: list[bytes], acc: _Accumulator, fl: FacetFilter) -> None:
    with tx.txn.cursor(db=tx.db(EXACT)) as cur:
        for f, key in enumerate(wholes):
            if cur.set_key(key):
                for v in cur.iternext_dup(keys=False):
                    docno = int.from_bytes(v, "big")
                    if fl.passes(docno):
                        acc.sums[f][docno] = acc.sums[f].get(docno, 0.0) + WHOLE


# ------------------------------------------------------------------ reading
def _read(lst: _List, acc: _Accumulator, keep, trace: Trace, only: list[int] | None = None) -> None:
    """Add ``lst``'s postings: of every document ``keep`` accepts (all when None;
    one already summed was accepted before), or of the sorted ``only`` ones."""
    if not lst.df:
        return
    (c, d), w, sums = lst.factor(), lst.weight, acc.sums[lst.field]
    if only is not None and lst.df > PROBE_RATIO * len(only):
        trace.probes += len(only)
        for docno in only:
            found = lst.probe(docno)
            if found and (keep is None or keep(docno)):
                tf, length = found
                sums[docno] = sums.get(docno, 0.0) + w * tf / (tf + c + d * length)
        return
    trace.read += lst.df
    wanted = None if only is None else set(only)
    get = sums.get
    for docno, tf, length in lst.postings():
        if wanted is not None and docno not in wanted:
            continue
        if keep is not None and docno not in sums and not keep(docno):
            continue
        sums[docno] = get(docno, 0.0) + w * tf / (tf + c + d * length)


def _top_k(lists: list[_List], acc: _Accumulator, keep, k: int, done: set[int],
           trace: Trace, prune: bool) -> tuple[list[int], list[_List]]:
    """Read lists whole while an unseen document could still make the top k;
    then complete, from the lists left, the candidates that still could.
    Those candidates, and the lists that were not read whole."""
    order = sorted(lists, key=lambda lst: -lst.weight)
    theta = acc.kth(k)
    while order and (not prune or _bound(order) >= theta - EPS):
        _read(order.pop(0), acc, keep, trace)
        theta = acc.kth(k)
    if not order:
        return acc.docs(), []
    extra = _weights(order)
    if acc.single():                   # the score is the capped content sum: compare sums
        floor = theta - EPS - extra[0]
        need = sorted(d for d, s in acc.sums[0].items() if s >= floor)
    else:
        need = sorted(d for d in acc.docs() if acc.bound(d, extra) >= theta - EPS)
    probe = [d for d in need if d not in done]
    for lst in order:
        _read(lst, acc, keep, trace, probe)
    return need, order


@dataclass
class _Completion:
    """Completes the own-field sums of documents outside the candidates: their
    postings in the lists that were not read whole (the others are summed)."""

    acc: _Accumulator
    rest: list[_List]
    keep: object
    complete: set[int]
    trace: Trace

    def own(self, docnos: list[int]) -> None:
        todo = sorted(d for d in docnos if d not in self.complete)
        if todo:
            for lst in self.rest:
                _read(lst, self.acc, self.keep, self.trace, todo)
            self.complete.update(todo)


def _weights(lists: list[_List]) -> list[float]:
    """Per field, the most ``lists`` can add to a document's sum."""
    per_field = [0.0] * _NF
    for lst in lists:
        per_field[lst.field] += lst.weight
    return per_field


def _bound(lists: list[_List]) -> float:
    """The most a document in none of the lists read could score from ``lists``."""
    return combine(min(PARTIAL_CAP, s) for s in _weights(lists))


# ------------------------------------------------------------------ ranking
def _rank(acc: _Accumulator, scored: list[tuple[float, int]], fl: FacetFilter, limit: int) -> list[Hit]:
    """The best ``limit`` of the (reported score, docno) pairs that pass the
    filter, ties settled by the contract's rule: higher importance, then newer
    timestamp, then message id — the larger first, since ULIDs are monotonic:
    still the newer within one millisecond."""
    m = 2 * limit + 8
    while True:
        hits, complete = _take(heapq.nlargest(m, scored), acc, fl, limit)
        if complete or m >= len(scored):
            break
        m *= 4
    hits.sort(key=lambda h: (h.score, h.doc.importance, h.doc.timestamp, h.doc.message_id), reverse=True)
    return hits[:limit]


def _take(ordered, acc: _Accumulator, fl: FacetFilter, limit: int) -> tuple[list[Hit], bool]:
    """Passing hits in score order; True when a lower score closed the list."""
    hits: list[Hit] = []
    for score, docno in ordered:
        if len(hits) >= limit and score < hits[-1].score:
            return hits, True
        if (doc := fl.doc(docno)) is None:     # every summed document passed the filter
            continue
        parts = {name: _reported(s) for name, s in zip(FIELDS, acc.fields(docno))}
        hits.append(Hit(doc, score, parts))
    return hits, False


def _rank_in_context(tx: Tx, acc: _Accumulator, candidates: list[int], completion: _Completion, fl: FacetFilter,
                     limit: int, lists: list[_List], pend: list, st: dict[str, int]) -> list[Hit]:
    """The best ``limit`` messages once raised by their context
    (:mod:`projections.context`), among the best ``max(limit, POOL)``
    candidates by their own score and every message with an own match in one
    of their windows (a short reply beside a strong match), ranked by :func:`_rank`."""
    best = acc.best(candidates, max(limit, POOL))
    content = [lst for lst in lists if lst.field == 0]
    with ContextScorer(tx, content, [lst.q for lst in content], pend, st["active"],
                       session_index.count(tx), st["body_bytes"]) as scorer:
        pool = set(best)
        near = {n for window in scorer.windows(best).values() for n in window}
        near.difference_update(pool)
        if near:
            completion.own(list(near))
            pool.update(d for d in near if acc.score(d) > 0)
        ctx = scorer.scores(sorted(pool))
    boosted = [(_reported(1.0 - (1.0 - acc.score(d)) * (1.0 - CONTEXT_WEIGHT * ctx[d])), d) for d in pool]
    return _rank(acc, boosted, fl, limit)


def _reported(s: float) -> float:
    """Six decimals, never rounding a real match down to zero."""
    return 0.0 if s <= 0 else max(round(s, 6), 1e-6)
