"""The context boost: a turn ranked with the turns around it.

A conversation's turn means more than its own words: the answer to "when did
Caroline go to the support group?" is often a short reply ("yesterday, it was
great") whose neighbours carry the question's words.  Each candidate's
*context* is its window — itself plus up to ``WINDOW`` earlier and
``WINDOW`` later messages of its session, in write (docno) order — scored
against the query with BM25 over the window's content: the sum of the
window's term frequencies, normalized by the window's length in UTF-8 bytes
against the average window (k1 ``K1``, b ``B``), each term weighted by an
idf over windows.  The score ``s_ctx`` (below 1) joins the own fields'
noisy-OR with weight ``WEIGHT``:

    score = 1 − (1 − own) · (1 − WEIGHT · s_ctx)

It only raises the score of a message that matched in one of its own fields
(content, summary, tags) — it never admits one.  It re-ranks: the messages
scored are the best ``max(limit, POOL)`` by their own score and every message
with an own match in one of their windows (the short reply beside a strong
match — on the LoCoMo development set this finds what scoring every
candidate finds).  A message's score does not depend on which others were
scored; which messages are scored does depend on the filter.  Everything is
read at query time from what the index keeps anyway — the content posting
lists (random access), the session's ``facets`` list (its docnos in write
order), the pending records and the ``docs`` rows (content sizes) — so
writes, replay, compaction and the store's size do not change, and an update
or delete changes every window it touches by construction.

Statistics: a window's idf uses ``df_ctx = min(N, df · W)`` — a term in
``df`` messages is in about ``W`` windows each, ``W`` the average window size
(``2·WINDOW + 1``, fewer when sessions are shorter) — and the average window
length is ``W`` times the average content size.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from eventstore.transaction import Tx

from .index import FACETS, docno_key
from .index.arrays import Postings, tail_docnos
from .index.docs import DOC_BYTES, DOC_SESSION, raw_doc, raw_docs
from .index.layout import docno_of
from .index.pending_view import PendingView

WINDOW = 2          # messages on each side
WEIGHT = 0.8        # of the context score in the noisy-OR
K1, B = 0.9, 0.4
POOL = 15           # best candidates by own score: they and their windows' messages get a context score


class ContentList(Protocol):
    """A query term's content posting list (:class:`projections.evaluation.QueryList`)."""

    term: str
    df_all: int
    q: float               # the term's query weight (repeats counted)

    def find(self, docnos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


class ContextScorer:
    def __init__(self, tx: Tx, lists: Sequence[ContentList], pend: PendingView, n_docs: int, n_sessions: int,
                 body_bytes: int) -> None:
        """``lists`` are the query's terms in the content field."""
        self.tx, self.lists = tx, lists
        self.window = min(2.0 * WINDOW + 1, max(1.0, n_docs / max(n_sessions, 1)))
        self.avg = max(self.window * body_bytes / max(n_docs, 1), 1.0)
        idfs = [lst.q * _idf(n_docs, min(n_docs, lst.df_all * self.window)) for lst in lists]
        total = sum(idfs)
        self.term_weights = [w / total for w in idfs] if total > 0 else [0.0] * len(idfs)
        self.pending = pend
        self._rows: dict[int, tuple[int, bytes]] = {}
        self._cur = tx.txn.cursor(db=tx.db(FACETS))
        self._tf_cache: dict[int, tuple[int, ...] | None] = {}
        self._windows: dict[int, list[int]] = {}

    def __enter__(self) -> ContextScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cur.close()

    def windows(self, docnos: list[int]) -> dict[int, list[int]]:
        """Each of ``docnos``'s window: itself and its neighbours, in order."""
        known = self._windows
        by_session: dict[bytes, list[int]] = {}
        self._fetch_rows([d for d in docnos if d not in known])
        for d in docnos:
            if d not in known:
                by_session.setdefault(self._row(d)[1], []).append(d)
        for key, group in by_session.items():
            order = self._session_order(key, len(group))
            for d in group:
                if order is not None:
                    i = bisect_left(order, d)
                    known[d] = order[max(0, i - WINDOW):i + WINDOW + 1]
                else:
                    known[d] = sorted([d, *self._neighbours(d, key)])
        return {d: known[d] for d in docnos}

    def scores(self, docnos: list[int]) -> dict[int, float]:
        """The context score of each of ``docnos``."""
        if not self.lists:
            return dict.fromkeys(docnos, 0.0)
        windows = self.windows(docnos)
        members = {d for window in windows.values() for d in window}
        self._fetch_rows(list(members))
        self._look_up(members)
        return {d: self._window_score(window) for d, window in windows.items()}

    def _look_up(self, docnos: set[int]) -> None:
        """The query terms' frequencies in the content of each of ``docnos``
        not looked up yet: every list asked for all of them at once."""
        todo = sorted(d for d in docnos if d not in self._tf_cache)
        if not todo:
            return
        wanted = np.array(todo, np.int64)
        pending = self.pending.docnos()
        at = np.minimum(np.searchsorted(pending, wanted), max(len(pending) - 1, 0))
        held = pending[at] == wanted if len(pending) else np.zeros(len(wanted), bool)
        merged, pend = np.flatnonzero(~held), np.flatnonzero(held)
        found = np.zeros((len(self.lists), len(todo)), np.int64)
        for row, lst in zip(found, self.lists):
            if len(merged):
                hit, in_list, _ = lst.find(wanted[merged])
                row[merged[hit]] = in_list
            if len(pend):
                row[pend] = _tfs_in(self.pending.postings(0, lst.term), wanted[pend])
        for d, column in zip(todo, found.T.tolist()):
            self._tf_cache[d] = tuple(column) if any(column) else None

    def _window_score(self, window: list[int]) -> float:
        found = [v for v in map(self._tfs, window) if v is not None]
        if not found:
            return 0.0
        length = sum(self._row(d)[0] for d in window)
        norm = K1 * (1 - B + B * length / self.avg)
        total = 0.0
        for w, tf in zip(self.term_weights, map(sum, zip(*found))):
            if tf:
                total += w * tf / (tf + norm)
        return total

    def _session_order(self, key: bytes, wanted: int) -> list[int] | None:
        """Every docno of a session in order, pending ones included — when the
        session is small against the candidates in it (else None: each
        candidate's neighbours are looked up on their own)."""
        cur = self._cur
        n = cur.count() if cur.set_key(key) else 0
        if n > 8 * wanted + 32:
            return None
        merged = tail_docnos(b"".join(cur.iternext_dup(keys=False)), 6).tolist() if n else []
        pend = self.pending.in_session(key)
        return sorted(merged + pend) if pend else merged

    def _tfs(self, docno: int) -> tuple[int, ...] | None:
        """The query terms' frequencies in a document's content (None: none of them)."""
        if docno not in self._tf_cache:
            self._look_up({docno})
        return self._tf_cache[docno]

    def _row(self, docno: int) -> tuple[int, bytes]:
        """(content size, session facet key) of a document, from its ``docs`` row."""
        row = self._rows.get(docno)
        if row is None:
            row = self._rows[docno] = _row_of(raw_doc(self.tx, docno))
        return row

    def _fetch_rows(self, docnos: list[int]) -> None:
        """:meth:`_row` of each of ``docnos`` not known yet, read in one call."""
        todo = [d for d in docnos if d not in self._rows]
        if not todo:
            return
        for d, raw in zip(todo, raw_docs(self.tx, todo)):
            self._rows[d] = _row_of(raw)

    def _neighbours(self, docno: int, key: bytes) -> list[int]:
        """Up to ``WINDOW`` docnos of the session before ``docno`` and after it."""
        before, after = self._merged(docno, key)
        pend = self.pending.in_session(key)
        i = bisect_left(pend, docno)
        before = sorted([*before, *pend[max(0, i - WINDOW):i]])[-WINDOW:]
        j = i + 1 if i < len(pend) and pend[i] == docno else i
        after = sorted([*after, *pend[j:j + WINDOW]])[:WINDOW]
        return before + after

    def _merged(self, docno: int, key: bytes) -> tuple[list[int], list[int]]:
        """The merged neighbours, from the session's facet list (in docno order)."""
        before: list[int] = []
        after: list[int] = []
        cur, dk = self._cur, docno_key(docno)
        if not cur.set_range_dup(key, dk):
            if cur.set_key(key) and cur.last_dup():       # every merged one is earlier
                before.append(docno_of(cur.value()))
                while len(before) < WINDOW and cur.prev_dup():
                    before.append(docno_of(cur.value()))
            return before[::-1], after
        mark = cur.value()
        if mark != dk:
            after.append(docno_of(mark))
        while len(after) < WINDOW and cur.next_dup():
            after.append(docno_of(cur.value()))
        cur.set_key_dup(key, mark)
        while len(before) < WINDOW and cur.prev_dup():
            before.append(docno_of(cur.value()))
        return before[::-1], after


def _tfs_in(postings: Postings, docnos: np.ndarray) -> np.ndarray:
    """The tf of each of the sorted ``docnos`` in ``postings`` (0: not there)."""
    out = np.zeros(len(docnos), np.int64)
    if not len(postings.docnos):
        return out
    at = np.minimum(np.searchsorted(postings.docnos, docnos), len(postings.docnos) - 1)
    hit = postings.docnos[at] == docnos
    out[hit] = postings.tfs[at[hit]]
    return out


def _row_of(raw: bytes | None) -> tuple[int, bytes]:
    return (0, b"") if raw is None else (int.from_bytes(raw[DOC_BYTES:DOC_BYTES + 4], "big"), b"s" + raw[DOC_SESSION:])


def _idf(n_docs: int, df: float) -> float:
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
