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
adding each list to every document's per-field sums in one array step
(:mod:`projections.evaluation`).  Before each list it asks whether a document
seen in no list so far could still reach the k-th best score found so far —
the lists left add at most their weights — and once none can, the lists left
are read only for the candidates that could still make the top k, list by
list, dropping after each those that no longer can (MaxScore): from the
chunks they fall in, or from the whole list when they fall in many of its
chunks (decoded lists are kept between searches, for exactly the chunk bytes
they were decoded from).  That is the exact top k, ties included.  Documents
written since the last merge are scored first, whole, from their pending
records.  Filters come from :class:`~projections.index.FacetFilter`: a
selective one reads only its documents' postings; any other is asked of the
documents that could make the result, never of every posting.  Search only
reads.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from eventstore.store import Tx

from . import sessions as session_index
from . import stats
from .context import POOL, ContextScorer
from .context import WEIGHT as CONTEXT_WEIGHT
from .evaluation import (
    K1,
    PARTIAL_CAP,
    WEIGHTS,
    WHOLE,
    Admit,
    B,
    QueryList,
    Sums,
    combine,
    field_score,
    member,
    reuse,
)
from .index import DOCS, EXACT, FIELDS, POSTINGS, Doc, exact_key, list_prefix
from .index.arrays import Kept, Postings, counts, first_docnos
from .index.docs import tie_keys
from .index.filters import FacetFilter
from .index.layout import docno_of, key_range
from .index.masks import snapshot
from .index.pending_view import PendingView, pending_view
from .query import Filters
from .tokens import query_terms

__all__ = ["B", "K1", "PARTIAL_CAP", "WEIGHTS", "WHOLE", "Filters", "Hit", "Options", "QueryPlan", "Trace", "combine",
           "field_score", "idf", "search"]

ALLOWED_MAX = 10_000                 # largest filter set worth building
SELECTIVE_WORK = 20_000              # walk against the set when Σ min(df, |set|) ≤ this,
WALK_SHARE = 4                       # or ≤ 1/WALK_SHARE of the postings the lists hold
EPS = 2e-6                           # beneath the 6-decimal rounding of reported scores
_NF = len(FIELDS)


@dataclass
class Trace:
    """What one evaluation did (for benchmarks and tests)."""

    path: str = ""          # "walk" (selective filter) or "top-k"
    lists: int = 0          # query terms × fields present in the index
    postings: int = 0       # Σ df over those lists
    read: int = 0           # postings of lists read whole
    probes: int = 0         # documents looked up in a list without reading it whole
    pending: int = 0        # documents written since the last merge


@dataclass
class Hit:
    doc: Doc
    score: float
    breakdown: dict[str, float] = dataclasses.field(default_factory=dict)


def idf(n_docs: int, df: int) -> float:
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class Options:
    """How a search evaluates; the defaults serve, the others are for tests
    and comparisons."""

    prune: bool = True             # False: read every list whole (the same result, slower)
    context: bool = True           # False: rank by the own fields alone


@dataclass
class QueryPlan:
    """One search, planned: what it reads — the query's lists, the pending
    records, the filter, in the snapshot ``tx`` — how far (the best
    ``limit``, after ranking ``pool`` candidates in context), and what it
    did (``trace``)."""

    tx: Tx
    query: str
    limit: int
    stats: dict[str, int]
    filter: FacetFilter
    pending: PendingView
    lists: list[QueryList]
    trace: Trace
    options: Options

    @property
    def pool(self) -> int:
        """How many candidates the own fields' evaluation must find."""
        return max(self.limit, POOL) if self.options.context else self.limit


def search(tx: Tx, query: str, flt: Filters, limit: int, trace: Trace | None = None,
           options: Options = Options()) -> list[Hit]:
    """The best ``limit`` live messages for ``query`` under ``flt`` (what the
    evaluation did goes to ``trace``)."""
    trace = trace if trace is not None else Trace()
    st = stats.read(tx)
    fl = FacetFilter(tx, flt, st["active"], (st["updates"], st["deleted"]))
    pend = pending_view(tx, st)
    trace.pending = len(pend)
    if fl.size == 0 and not pend:
        return []
    lists = _plan(tx, st, query_terms(query), pend)
    trace.lists, trace.postings = len(lists), sum(lst.df for lst in lists)
    plan = QueryPlan(tx, query, limit, st, fl, pend, lists, trace, options)
    acc = Sums(_docno_bound(tx, pend), reuse(tx))
    hits = _evaluate(plan, acc)
    acc.release()               # only after a search that ended well: its arrays are known clean
    return hits


def _evaluate(plan: QueryPlan, acc: Sums) -> list[Hit]:
    """:func:`search` once the query's lists are planned and the sums laid out."""
    fl, trace = plan.filter, plan.trace
    wholes = [exact_key(f, plan.query) for f in range(_NF)]
    done = _score_pending(plan, acc, wholes)
    _add_whole_matches(plan.tx, wholes, acc, fl)
    only = fl.allowed_docnos if fl.materialize(ALLOWED_MAX) else None
    admit = Admit(fl.meets, only, done, fl.checks, fl.ready)
    if only is not None and _walk(plan.lists, fl.size):
        trace.path = "walk"
        for lst in plan.lists:
            _read(lst, acc, trace, only)
        candidates = acc.docs()
        rest: list[QueryList] = []
        dropped: list[tuple[np.ndarray, int]] = []
    else:
        trace.path = "top-k"
        candidates, rest, dropped = _top_k(plan, acc, admit, done)
    if plan.options.context:
        complete = np.sort(np.concatenate([candidates, done]))
        completed = _Completion(acc, rest, complete, dropped, trace)
        return _rank_in_context(plan, acc, candidates, completed, admit)
    own = acc.scores(candidates).tolist()         # each as acc.score gives it, in one array step
    return _rank(acc, [(_reported(v), d) for v, d in zip(own, candidates.tolist())], fl, plan.limit, admit)


# --------------------------------------------------------------------- plan
def _plan(tx: Tx, st: dict[str, int], qterms: dict[str, float], pend: PendingView) -> list[QueryList]:
    lists: list[QueryList] = []
    snap = snapshot(tx)
    decoded = reuse(tx).lists
    with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
        for f, name in enumerate(FIELDS):
            n = st[f"n_{name}"]
            if not n:
                continue
            avg = max(st[f"len_{name}"] / n, 1.0)
            found, total = [], 0.0
            for term, q in qterms.items():
                prefix = list_prefix(f, term)
                kept = decoded.confirmed(prefix, snap)     # its chunks, if this snapshot's
                if kept is None:
                    keys, chunks = _chunks(cur, prefix)
                    kept = Kept(keys, chunks, first_docnos(keys), int(counts(chunks).sum()))
                df = kept.df
                df_all = df + pend.df(f, term)
                w = q * idf(n, df_all)
                total += w
                if df_all:
                    found.append((term, w, kept, df_all, q))
            lists.extend(QueryList(f, term, w / total, kept.df, avg, kept.keys, kept.raws, df_all, q, snap,
                                   kept.firsts, decoded)
                         for term, w, kept, df_all, q in found)
    return lists


def _chunks(cur, prefix: bytes) -> tuple[list[bytes], list[bytes]]:
    """The keys and chunks of the list whose keys start with ``prefix`` (it
    ends in NUL: they are the keys from it up to the prefix ending in 1),
    collected without a Python step per chunk."""
    items = key_range(cur, prefix, prefix[:-1] + b"\x01", values=True)
    return list(map(itemgetter(0), items)), list(map(itemgetter(1), items))


def _docno_bound(tx: Tx, pend: PendingView) -> int:
    """One past the greatest docno a sum can be for (sums grow past it if need be)."""
    with tx.txn.cursor(db=tx.db(DOCS)) as cur:
        top = docno_of(cur.key()) if cur.last() else 0
    return max(top, pend.top) + 1


def _score_pending(plan: QueryPlan, acc: Sums, wholes: list[bytes]) -> np.ndarray:
    """Whole scores of the pending documents that pass; returns their docnos
    (ascending).  ``wholes`` are the query's whole-text keys, one per field.
    Each document's sum adds its lists in order, then its whole match, as
    for a merged document."""
    pend = plan.pending
    if not pend:
        return np.zeros(0, np.int64)
    done = pend.passing(*plan.filter.pending_conditions())
    every = len(done) == len(pend)
    for lst in plan.lists:
        found = pend.postings(lst.field, lst.term)
        if not every:
            keep = member(found.docnos, done)
            found = Postings(found.docnos[keep], found.tfs[keep], found.lengths[keep])
        acc.add(lst.field, found.docnos, lst.terms(found.tfs, found.lengths))
    for f, key in enumerate(wholes):
        docnos = np.array(pend.with_whole(key), np.int64)
        if not every:
            docnos = docnos[member(docnos, done)]
        acc.add(f, docnos, np.full(len(docnos), WHOLE))
    return done


def _add_whole_matches(tx: Tx, wholes: list[bytes], acc: Sums, fl: FacetFilter) -> None:
    with tx.txn.cursor(db=tx.db(EXACT)) as cur:
        for f, key in enumerate(wholes):
            if cur.set_key(key):
                found = [d for d in (int.from_bytes(v, "big") for v in cur.iternext_dup(keys=False))
                         if fl.passes(d)]
                acc.add(f, np.array(found, np.int64), np.full(len(found), WHOLE))


# ------------------------------------------------------------------ reading
def _read(lst: QueryList, acc: Sums, trace: Trace, only: np.ndarray | None = None) -> None:
    """Add ``lst``'s postings: all of them, or those of the sorted ``only``
    documents (looked up in the chunks they fall in)."""
    if not lst.df:
        return
    if only is None:
        found = lst.whole()
        trace.read += lst.df
        acc.add(lst.field, found.docnos, lst.terms(found.tfs, found.lengths))
        return
    hit, tfs, lengths = lst.find(only)
    trace.probes += len(only)
    acc.add(lst.field, only[hit], lst.terms(tfs, lengths))


def _top_k(plan: QueryPlan, acc: Sums, admit: Admit,
           done: np.ndarray) -> tuple[np.ndarray, list[QueryList], list[tuple[np.ndarray, int]]]:
    """Read the query's merged lists whole while an unseen document could
    still make the top k (k: the plan's pool); then complete, list by list
    from the lists left, the candidates that still could — dropping, after
    each list, those that no longer can.  ``done``: the pending documents,
    scored whole.  Returns the candidates completed (sorted), the lists not
    read whole, and the candidates dropped, each group with how many of
    those lists its sums hold.  A list with no merged postings adds nothing
    to any document here: it is left out (on a small store, all are)."""
    k, trace, prune = plan.pool, plan.trace, plan.options.prune
    order = sorted((lst for lst in plan.lists if lst.df), key=lambda lst: -lst.weight)
    theta, top = acc.kth_top(k, admit)
    while order and (not prune or _bound(order) >= theta - EPS):
        lst = order.pop(0)
        _read(lst, acc, trace)
        if lst.df:                     # the k-th best of all: of the best so far and the list's documents
            added = _contenders(acc, top, k, lst.whole().docnos)
            theta, top = acc.kth_top(k, admit, np.concatenate([top[~member(top, added)], added]))
    docs = acc.docs()
    if not order:
        return np.sort(docs), [], []
    need = docs[_could(acc, docs, order, theta)]
    need = np.sort(need[admit.settled(need)])      # those that fail need no completing
    probe = need[~member(need, done)] if len(done) else need
    dropped: list[tuple[np.ndarray, int]] = []
    for i, lst in enumerate(order):
        _read(lst, acc, trace, probe)
        if prune and i + 1 < len(order) and len(need) > k:
            theta = max(theta, acc.kth(k, admit, need))
            keep = _could(acc, probe, order[i + 1:], theta)
            if not keep.all():
                dropped.append((probe[~keep], i + 1))
            probe = probe[keep]
            need = np.sort(np.concatenate([probe, need[member(need, done)]])) if len(done) else probe
    return need, order, dropped


def _walk(lists: list[QueryList], allowed: int) -> bool:
    """Whether to read the lists for the ``allowed`` documents only (at most
    one lookup each per list) rather than by MaxScore.  The top k under a
    small set can seldom prune: few of the documents in the lists read first
    pass, so the k-th best stays low and most lists are read whole.  So
    walk when the lookups are few, or a small share of the postings."""
    lookups = sum(min(lst.df, allowed) for lst in lists)
    return lookups <= max(SELECTIVE_WORK, sum(lst.df for lst in lists) // WALK_SHARE)


def _contenders(acc: Sums, top: np.ndarray, k: int, added: np.ndarray) -> np.ndarray:
    """Of the documents of a list just read, those that could join ``top``
    (the best k so far, all passing): a score below each of theirs cannot —
    sums only grow, so they still beat it.  One comparison each, before
    the best of them are sorted out and asked whether they pass."""
    if len(top) < k or not len(added):
        return added
    values = acc.values(added)
    return added[values >= acc.values(top).min()]


def _could(acc: Sums, docnos: np.ndarray, lists: list[QueryList], theta: float) -> np.ndarray:
    """Which of ``docnos`` could still reach ``theta`` with what ``lists`` add at most."""
    extra = _weights(lists)
    if acc.single() and not any(extra[1:]):     # the score is, and stays, the capped content sum
        return acc.content(docnos) >= theta - EPS - extra[0]
    return acc.scores(docnos, tuple(extra)) >= theta - EPS


@dataclass
class _Completion:
    """Completes the own-field sums of documents outside the candidates: their
    postings in the lists that were not read whole (the others are summed),
    from the first list a dropped candidate's sums do not hold yet."""

    acc: Sums
    rest: list[QueryList]
    complete: np.ndarray            # sorted (repeats allowed)
    dropped: list[tuple[np.ndarray, int]]
    trace: Trace

    def own(self, docnos: list[int]) -> None:
        """Complete the sums of ``docnos`` (distinct)."""
        wanted = np.sort(np.array(docnos, np.int64))
        wanted = wanted[~member(wanted, self.complete)]
        if not len(wanted):
            return
        starts = np.zeros(len(wanted), np.int64)
        for group, start in self.dropped:
            starts[member(wanted, group)] = start
        for j, lst in enumerate(self.rest):          # each list once, for every document it is missing from
            _read(lst, self.acc, self.trace, wanted[starts <= j])
        self.complete = np.sort(np.concatenate([self.complete, wanted]))


def _weights(lists: list[QueryList]) -> list[float]:
    """Per field, the most ``lists`` can add to a document's sum."""
    per_field = [0.0] * _NF
    for lst in lists:
        per_field[lst.field] += lst.weight
    return per_field


def _bound(lists: list[QueryList]) -> float:
    """The most a document in none of the lists read could score from ``lists``."""
    return combine(min(PARTIAL_CAP, s) for s in _weights(lists))


# ------------------------------------------------------------------ ranking
def _rank(acc: Sums, scored: list[tuple[float, int]], fl: FacetFilter, limit: int,
          admit: Admit | None) -> list[Hit]:
    """The best ``limit`` of the (reported score, docno) pairs that pass the
    filter (``admit``; None: they all do), ties settled by the contract's rule: higher importance, then newer
    timestamp, then message id — the larger first, since ULIDs are monotonic:
    still the newer within one millisecond (the context pool's edge too: :func:`~.index.docs.tie_keys`)."""
    m = 2 * limit + 8
    while True:
        hits, complete = _take(heapq.nlargest(m, scored), acc, fl, limit, admit)
        if complete or m >= len(scored):
            break
        m *= 4
    hits.sort(key=lambda h: (h.score, h.doc.importance, h.doc.timestamp, h.doc.message_id), reverse=True)
    return hits[:limit]


def _take(ordered, acc: Sums, fl: FacetFilter, limit: int, admit: Admit | None) -> tuple[list[Hit], bool]:
    """Passing hits in score order; True when a lower score closed the list."""
    hits: list[Hit] = []
    for score, docno in ordered:
        if len(hits) >= limit and score < hits[-1].score:
            return hits, True
        if (admit is not None and not admit.one(docno)) or (doc := fl.doc(docno)) is None:
            continue
        parts = {name: _reported(s) for name, s in zip(FIELDS, acc.fields(docno))}
        hits.append(Hit(doc, score, parts))
    return hits, False


def _rank_in_context(plan: QueryPlan, acc: Sums, candidates: np.ndarray, completion: _Completion,
                     admit: Admit) -> list[Hit]:
    """The best ``limit`` messages once raised by their context
    (:mod:`projections.context`), among the best ``max(limit, POOL)``
    candidates by their own score and every message with an own match in one
    of their windows (a short reply beside a strong match), ranked by :func:`_rank`."""
    tx, st = plan.tx, plan.stats
    best = acc.best(candidates, plan.pool, admit, lambda docnos: tie_keys(tx, docnos))
    content = [lst for lst in plan.lists if lst.field == 0]
    with ContextScorer(tx, content, plan.pending, st["active"], session_index.count(tx),
                       st["body_bytes"]) as scorer:
        pool = set(best)
        near = {n for window in scorer.windows(best).values() for n in window}
        near.difference_update(pool)
        if near:
            completion.own(list(near))
            near_docs = np.array(sorted(near), np.int64)
            matched = near_docs[acc.scores(near_docs) > 0]
            pool.update(matched[admit(matched)].tolist())
        ctx = scorer.scores(sorted(pool))
    boosted = [(_reported(1.0 - (1.0 - acc.score(d)) * (1.0 - CONTEXT_WEIGHT * ctx[d])), d) for d in pool]
    return _rank(acc, boosted, plan.filter, plan.limit, None)


def _reported(s: float) -> float:
    """Six decimals, never rounding a real match down to zero."""
    return 0.0 if s <= 0 else max(round(s, 6), 1e-6)
