"""What the ranker (:mod:`projections.search`) evaluates with: a query term's
posting list in one field, and every document's per-field sums — as arrays.

A list is decoded a whole list, or the chunks a set of documents falls in, at
a time (:func:`~projections.index.arrays.decode_chunks`), and its BM25 terms
are added to the sums in one step: the sums are arrays indexed by docno, so
adding a list is a scatter, not a dictionary update per posting.  Every
float operation is the one a per-posting loop would do, in the same order
(``w · tf / (tf + c + d · length)``, lists added one after the other), so a
document's sums do not depend on how they were computed.  Which documents
pass the search's filter is asked of the documents that could make the
result only (:class:`Admit`), not of every posting.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from eventstore.transaction import Tx

from .index import FIELDS
from .index.arrays import EMPTY, DecodedLists, Postings, Snapshot, decode_chunks, first_docnos

K1, B = 0.9, 0.4                     # BM25 term-frequency saturation and length normalization
PARTIAL_CAP = 0.99
WEIGHTS = (1.0, 0.9, 0.8)            # content, summary, tags
WHOLE = 10.0                         # added to a field's sum when it equals the query whole
WHOLE_SHARE = 4                      # look documents up in the whole list (decoded once, kept) when it has
WHOLE_MIN = 32                       # < WHOLE_MIN chunks or they fall in ≥ 1/WHOLE_SHARE of its chunks
CACHE_BYTES = 128 << 20              # decoded lists kept between searches (per open store)
_NF = len(FIELDS)
_UNSET = np.zeros(0, np.int64)
MASK_LOOKUPS = 2048                  # an allowed set is asked of more documents at once: as a bool array
SPARE = 4                            # sum arrays kept, zeroed, for later searches (one per concurrent search)


class Reuse:
    """What searches of one open store hand on to later ones (a slot of its
    caches, :mod:`eventstore.caches`): decoded posting lists, and sum arrays
    zeroed again."""

    def __init__(self) -> None:
        self.lists = DecodedLists(CACHE_BYTES)
        self.spare: list[tuple[np.ndarray, np.ndarray]] = []
        self.lock = threading.Lock()


def reuse(tx: Tx) -> Reuse:
    return tx.caches.slot(Reuse)


def field_score(total: float) -> float:
    """A field's score from its sum: 1.0 for a whole match, else capped."""
    return 1.0 if total >= WHOLE else min(total, PARTIAL_CAP)


def combine(scores: Iterable[float]) -> float:
    """1 − Π(1 − w_f · s_f) over the field scores, in field order."""
    miss = 1.0
    for w, s in zip(WEIGHTS, scores):
        miss *= 1.0 - w * s
    return 1.0 - miss


@dataclass(eq=False)
class QueryList:
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
    snapshot: Snapshot | None = None     # the one the chunks were read in (None: may still change)
    firsts: np.ndarray = dataclasses.field(default_factory=lambda: _UNSET)   # each chunk's first docno
    kept: DecodedLists = dataclasses.field(default_factory=lambda: DecodedLists(0))   # the store's decoded lists
    _whole: Postings | None = None
    _peeked: bool = False

    def __post_init__(self) -> None:
        if self.firsts is _UNSET:                         # not given: from the keys
            self.firsts = first_docnos(self.keys)

    def factor(self) -> tuple[float, float]:
        """(c, d) with tf_factor = tf / (tf + c + d · length)."""
        return K1 * (1 - B), K1 * B / self.avg

    def terms(self, tfs: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The list's BM25 terms for postings with these tfs and lengths."""
        c, d = self.factor()
        return self.weight * tfs / (tfs + c + d * lengths)

    def whole(self) -> Postings:
        """Every posting, in docno order."""
        if self._whole is None:
            self._whole = self.kept.get(self.keys, self.chunks, self.firsts, self.snapshot)
        return self._whole

    def find(self, docnos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of the sorted ``docnos``, which are in the list (a mask), and their
        tfs and lengths: from the whole list when it is short or they fall in
        many of its chunks, else from the chunks they fall in."""
        if not len(docnos) or not self.keys:
            return np.zeros(len(docnos), bool), EMPTY.tfs, EMPTY.lengths
        if self._whole is None and not self._peeked:
            self._whole, self._peeked = self.kept.peek(self.keys, self.chunks, self.snapshot), True
        if self._whole is not None:
            found = self._whole
        elif len(self.keys) < WHOLE_MIN:                 # a short list: decoded once, kept
            found = self.whole()
        else:
            at = np.searchsorted(self.firsts, docnos, side="right") - 1       # sorted, as docnos are
            at = at[at >= 0]
            if len(at) > 1:
                at = at[np.concatenate(([True], at[1:] != at[:-1]))]
            if WHOLE_SHARE * len(at) >= len(self.keys):
                found = self.whole()
            else:
                wanted = at.tolist()
                found = decode_chunks([self.keys[i] for i in wanted], [self.chunks[i] for i in wanted],
                                      self.firsts[at])
        if not len(found.docnos):
            return np.zeros(len(docnos), bool), EMPTY.tfs, EMPTY.lengths
        pos = np.minimum(np.searchsorted(found.docnos, docnos), len(found.docnos) - 1)
        hit = found.docnos[pos] == docnos
        pos = pos[hit]
        return hit, found.tfs[pos], found.lengths[pos]


class Sums:
    """Per field, each document's partial sum (``WHOLE`` added for a whole
    match), in arrays indexed by docno; and the documents that have one."""

    def __init__(self, size: int, reuse: Reuse) -> None:
        self.size = max(size, 1)
        self.sums: list[np.ndarray | None] = [None] * _NF
        self._fresh: list[np.ndarray] = []
        self._reuse = reuse
        kept = self._reuse.spare
        with self._reuse.lock:
            spare = kept.pop() if kept and len(kept[-1][0]) >= self.size else None
        if spare is not None:          # an earlier search's arrays, zeroed again: no pages to fault in
            self.seen, self.sums[0] = spare
            self.size = len(self.seen)
        else:
            self.seen = np.zeros(self.size, bool)

    def release(self) -> None:
        """Zero the content sums touched and keep the arrays for a later search."""
        content = self.sums[0]
        if content is None or len(content) != self.size:
            return
        docs = self.docs()
        content[docs] = 0.0
        self.seen[docs] = False
        self.sums = [None] * _NF
        with self._reuse.lock:
            if len(self._reuse.spare) < SPARE:
                self._reuse.spare.append((self.seen, content))

    def _fit(self, top: int) -> None:
        if top < self.size:
            return
        size = max(top + 1, 2 * self.size)
        self.seen = np.concatenate([self.seen, np.zeros(size - self.size, bool)])
        self.sums = [None if s is None else np.concatenate([s, np.zeros(size - self.size)]) for s in self.sums]
        self.size = size

    def add(self, field: int, docnos: np.ndarray, values: np.ndarray) -> None:
        """Add ``values`` to the sums of ``docnos`` (distinct) in ``field``."""
        if not len(docnos):
            return
        self._fit(int(docnos.max()))
        sums = self.sums[field]
        if sums is None:
            sums = self.sums[field] = np.zeros(self.size)
        sums[docnos] += values
        fresh = docnos[~self.seen[docnos]]
        if len(fresh):
            self.seen[fresh] = True
            self._fresh.append(fresh)

    def single(self) -> bool:
        """Only the content field has anything (the common case)."""
        return all(s is None for s in self.sums[1:])

    def docs(self) -> np.ndarray:
        """Every document with a sum (each once, in no particular order)."""
        return np.concatenate(self._fresh) if self._fresh else np.zeros(0, np.int64)

    def get(self, field: int, docno: int) -> float:
        sums = self.sums[field]
        return float(sums[docno]) if sums is not None and docno < self.size else 0.0

    def fields(self, docno: int) -> list[float]:
        return [field_score(self.get(f, docno)) for f in range(_NF)]

    def score(self, docno: int) -> float:
        return combine(self.fields(docno))

    def _field_scores(self, field: int, docnos: np.ndarray, extra: float = 0.0) -> np.ndarray:
        sums = self.sums[field]
        total = np.zeros(len(docnos)) if sums is None else sums[docnos]
        if extra:
            total = total + extra
        return np.where(total >= WHOLE, 1.0, np.minimum(total, PARTIAL_CAP))

    def scores(self, docnos: np.ndarray, extra: tuple[float, ...] = (0.0,) * _NF) -> np.ndarray:
        """:meth:`score` of each of ``docnos`` — with ``extra`` added to each
        field's sum first (an upper bound) — computed as :func:`combine` does."""
        miss = np.ones(len(docnos))
        for f, (w, e) in enumerate(zip(WEIGHTS, extra)):
            miss *= 1.0 - w * self._field_scores(f, docnos, e)
        return 1.0 - miss

    def content(self, docnos: np.ndarray) -> np.ndarray:
        sums = self.sums[0]
        return np.zeros(len(docnos)) if sums is None else sums[docnos]

    def values(self, docnos: np.ndarray) -> np.ndarray:
        """What documents are compared by: the content sums while only the
        content field has any (the score is their capped value), else scores."""
        return self.content(docnos) if self.single() else self.scores(docnos)

    def kth(self, k: int, admit: Admit | None, among: np.ndarray | None = None) -> float:
        """The k-th best score among the documents summed (or ``among``) that
        pass (``admit``; None: all do) — a lower bound of the final k-th;
        0.0 while fewer than k pass."""
        return self.kth_top(k, admit, among)[0]

    def kth_top(self, k: int, admit: Admit | None, among: np.ndarray | None = None) -> tuple[float, np.ndarray]:
        """:meth:`kth`, and the best k that pass (all that pass when fewer
        do).  Sums only grow, so after more lists are added the k-th best of
        all is the k-th best of these and the documents in those lists."""
        docs = self.docs() if among is None else among
        if admit is not None and admit.has_set:        # one array step settles most
            docs = docs[admit.cheap(docs)]
        if not len(docs):
            return 0.0, docs
        single = self.single()
        values = self.values(docs)
        passing, _ = _first_passing(docs, values, k, admit)
        top = docs[np.array(passing[:k], np.int64)]
        if len(passing) < k:
            return 0.0, top
        best = float(values[passing[k - 1]])
        return (field_score(best) if single else best), top

    def best(self, docnos: np.ndarray, k: int, admit: Admit | None = None,
             tie: Callable[[list[int]], list] | None = None) -> list[int]:
        """The ``k`` of ``docnos`` that pass (``admit``; None: all do) with the
        highest scores — compared rounded (to 9 decimals: the order sums were
        added in must not matter) — equal ones ordered by ``tie`` (each
        docno's key, the larger first; None: the newer first).  Only the best
        are asked whether they pass, in order, until k do."""
        if not len(docnos):
            return []
        values = self.content(docnos) if self.single() else self.scores(docnos)
        passing, _ = _first_passing(docnos, values, k, admit)
        if len(passing) < k:
            chosen = np.array(passing, np.int64)
        else:
            # In (score, docno) order the first k that pass are the best k, unless
            # two different scores near the k-th could round alike, or (with
            # ``tie``) more than k score that high: then every document that close
            # is asked, and the rounded comparison, then ``tie``, decides.
            low = float(values[passing[k - 1]]) - 1e-8
            close = values >= low
            near = np.unique(values[close])
            if not (np.diff(near) <= 1e-8).any() and (tie is None or np.count_nonzero(close) == k):
                return docnos[passing[:k]].tolist()
            chosen = np.flatnonzero(close)
            if admit is not None:
                chosen = chosen[admit(docnos[chosen])]
        found = docnos[chosen].tolist()
        keys = tie(found) if tie is not None else found
        ranked = zip((round(v, 9) for v in values[chosen].tolist()), keys, found)
        return [d for _, _, d in heapq.nlargest(k, ranked)]


def _first_passing(docnos: np.ndarray, values: np.ndarray, k: int,
                   admit: Admit | None) -> tuple[list[int], int]:
    """Positions in ``docnos`` of the first k that pass, in (value, docno)
    order from the highest, each asked once, a few at a time (then twice as
    many as asked so far); and how many were asked.  Fewer than k when fewer pass."""
    n, m = len(docnos), 4 * k
    passing: list[int] = []
    asked = 0
    while True:
        if m < n:                      # the best m, and every one tied with the m-th
            window = np.flatnonzero(values >= np.partition(values, n - m)[n - m])
        else:
            window = np.arange(n)
        order = window[np.lexsort((-docnos[window], -values[window]))]     # a prefix of any larger window's
        while asked < len(order) and len(passing) < k:
            batch = order[asked:asked + max(2 * (k - len(passing)), 16, asked)]     # at least doubling
            passing.extend((batch if admit is None else batch[admit(docnos[batch])]).tolist())
            asked += len(batch)
        if len(passing) >= k or m >= n:
            return passing, asked
        m *= 4


class Admit:
    """Which documents pass the search's filter, asked of arrays of docnos:
    the ``done`` ones (pending documents, checked on their records) do; the
    others are checked by ``passes`` — against the filter's set of allowed
    docnos, when it has one, first."""

    def __init__(self, passes: Callable[[np.ndarray], np.ndarray] | None, allowed: np.ndarray | None,
                 done: np.ndarray, checks: bool, ready: Callable[[], bool] | None = None) -> None:
        """``done``: sorted, distinct; ``ready``: whether ``passes`` is one
        array step now (None: never taken to be)."""
        self._passes = passes if checks else None
        self._ready = ready
        self._allowed = allowed
        self._allowed_mask: np.ndarray | None = None
        self.has_set = allowed is not None
        self._done = done
        self.everything = passes is None or (allowed is None and not checks)

    def __call__(self, docnos: np.ndarray) -> np.ndarray:
        if self.everything:
            return np.ones(len(docnos), bool)
        ok = np.ones(len(docnos), bool)
        if self._allowed is not None:
            ok &= self._in_allowed(docnos, self._allowed)
        if self._passes is not None:
            at = np.flatnonzero(ok)
            ok[at] = self._passes(docnos[at])
        if len(self._done):
            ok |= member(docnos, self._done)
        return ok

    def cheap(self, docnos: np.ndarray) -> np.ndarray:
        """Which of ``docnos`` are in the allowed set, when there is one (else
        all): the part of the filter answered in one array step."""
        if self._allowed is None:
            return np.ones(len(docnos), bool)
        ok = self._in_allowed(docnos, self._allowed)
        if len(self._done):
            ok |= member(docnos, self._done)
        return ok

    def settled(self, docnos: np.ndarray) -> np.ndarray:
        """Which of ``docnos`` pass, when the checks take one array step now
        (``ready``); else :meth:`cheap` — the part that does."""
        if self._passes is not None and (self._ready is None or not self._ready()):
            return self.cheap(docnos)
        return self(docnos)

    def _in_allowed(self, docnos: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """Which of ``docnos`` are in the allowed set: by binary search for a
        few, else from a bool array over the docnos (built once: many lookups
        cost less than one each)."""
        if self._allowed_mask is None and len(docnos) > MASK_LOOKUPS and len(allowed):
            self._allowed_mask = np.zeros(int(allowed[-1]) + 1, bool)
            self._allowed_mask[allowed] = True
        mask = self._allowed_mask
        if mask is None:
            return member(docnos, allowed)
        inside = docnos < len(mask)
        return inside & mask[np.where(inside, docnos, 0)]

    def one(self, docno: int) -> bool:
        return bool(self(np.array([docno], np.int64))[0])


def member(docnos: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Which of ``docnos`` are in ``sorted_set`` (sorted, distinct): one
    binary search each (``np.isin`` first makes ``docnos`` distinct, by hashing)."""
    if not len(sorted_set):
        return np.zeros(len(docnos), bool)
    pos = np.minimum(np.searchsorted(sorted_set, docnos), len(sorted_set) - 1)
    return sorted_set[pos] == docnos
