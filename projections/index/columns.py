"""A bulk transaction's posting lists as columns: sorted, cut and encoded
with numpy, all lists at once.

A replay (or a bulk import) gathers its written messages in batches
(:mod:`.gather`): each batch's postings, per field, as columns — term number,
tf, document length — document after document.  :class:`ColumnLists` keeps
the batches (and the few whole records a bulk transaction merges besides)
and, at the write, puts every field's postings in list order (term, then
docno) with one sort.  Into an empty ``postings`` the chunks are then cut and
encoded column-wise (:func:`_chunks`): the same bytes as
:func:`~.chunks.encode_chunk` gives chunk by chunk (a test compares them), for a
fraction of the time.  Into a ``postings`` that holds chunks already, each list is
merged the way the live path merges it (:func:`~.chunks.merge_list`).
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterator
from itertools import count

import numpy as np

from eventstore.transaction import Tx

from .arrays import Postings, counts, decode_chunks, first_docnos
from .chunks import Change, merge_list
from .gather import Gathered, GatheredField, gathered_field
from .layout import FIELDS, POSTINGS, list_prefix
from .records import FieldEntry

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_GAP_TYPES = ("<u1", "<u2", "<u4", "<u8")     # chunk gap widths 1, 2, 4, 8 bytes


class _Column:
    """One field's postings in list order: each list's term and first
    posting, and each posting's docno, tf and document length."""

    def __init__(self, terms: list[str], starts: np.ndarray, docnos: np.ndarray, tfs: np.ndarray,
                 lengths: np.ndarray) -> None:
        self.terms, self.starts, self.docnos, self.tfs, self.lengths = terms, starts, docnos, tfs, lengths

    def lists(self) -> Iterator[tuple[str, list[int], list[int] | None, list[int]]]:
        """(term, docnos, tfs or None when all are 1, lengths) of each list."""
        bounds = [*self.starts.tolist(), len(self.docnos)]
        docnos, tfs, lengths = self.docnos.tolist(), self.tfs.tolist(), self.lengths.tolist()
        for term, i, j in zip(self.terms, bounds, bounds[1:]):
            mine = tfs[i:j]
            yield term, docnos[i:j], None if max(mine) == 1 else mine, lengths[i:j]


class ColumnLists:
    """The postings a bulk transaction adds, kept as columns until written.
    Each field's terms are numbered as its batches come (in the order they
    first appear), during the replay rather than in the write at its end."""

    def __init__(self, cut: int) -> None:
        self.cut = cut
        self.parts: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in FIELDS]
        self.numbers: list[defaultdict[str, int]] = [defaultdict(count().__next__) for _ in FIELDS]
        self.records: list[list[tuple[int, FieldEntry]]] = [[] for _ in FIELDS]
        self.excluded: set[int] = set()

    def add_batch(self, gathered: Gathered) -> None:
        docnos = np.array(gathered.docnos, dtype=np.uint64)
        for f, batch in enumerate(gathered.fields):
            self._add(f, docnos, batch)

    def _add(self, f: int, docnos: np.ndarray, batch: GatheredField) -> None:
        if batch.ids:
            self.parts[f].append(_batch_part(batch, docnos, self.numbers[f]))

    def add(self, field: int, docno: int, entry: FieldEntry) -> None:
        """Add a whole record's field (one merged besides the batches)."""
        if entry.terms:
            self.records[field].append((docno, entry))

    def exclude(self, docnos: set[int]) -> None:
        """Leave ``docnos`` out of the batches' postings (their records are merged, or pending, instead)."""
        self.excluded |= docnos

    def column(self, f: int) -> _Column:
        """Field ``f``'s postings in list order: by term (as its UTF-8 bytes sort), then docno."""
        parts, numbers = list(self.parts[f]), self.numbers[f]
        if parts and self.excluded:
            gone = np.fromiter(self.excluded, dtype=np.uint64, count=len(self.excluded))
            kept = []
            for ids, docnos, tfs, lengths in parts:
                keep = ~np.isin(docnos, gone)
                if keep.any():
                    kept.append((ids[keep], docnos[keep], tfs[keep], lengths[keep]))
            parts = kept
        if self.records[f]:
            docs = sorted(self.records[f], key=lambda de: de[0])
            parts.append(_batch_part(gathered_field([e for _, e in docs]),
                                     np.array([d for d, _ in docs], dtype=np.uint64), numbers))
            # parts in docno order (records are mostly the last transaction's pending
            # ones, before every batch): the docnos ascend, list_order's fast case
            parts.sort(key=lambda part: int(part[1][0]))
        if not parts:
            empty = np.zeros(0, dtype=np.uint64)
            return _Column([], empty, empty, empty.astype(np.uint8), empty.astype(np.uint32))
        ids, docnos, tfs, lengths = (np.concatenate([p[i] for p in parts]) for i in range(4))
        terms = list(numbers)           # every term numbered, some perhaps with no posting left
        by_rank = sorted(range(len(terms)), key=terms.__getitem__)
        rank = np.empty(len(terms), dtype=np.uint32)
        rank[by_rank] = np.arange(len(terms), dtype=np.uint32)
        ranks = rank[ids]
        order = list_order(ranks, docnos, len(terms))
        docnos, tfs, lengths = docnos[order], tfs[order], lengths[order]
        sizes = np.bincount(ranks, minlength=len(terms))      # each list's postings, by rank
        used = np.flatnonzero(sizes)
        firsts = (np.cumsum(sizes) - sizes)[used]
        return _Column([terms[by_rank[r]] for r in used.tolist()], firsts, docnos, tfs, lengths)

    def put(self, tx: Tx) -> None:
        """Write every list: appended chunk by chunk into an empty ``postings``;
        into one that holds chunks, each list's last chunk stored re-cut with
        its new postings (when they all come after it: a bulk transaction's
        usual case), else each list merged as the live path merges it."""
        columns = [self.column(f) for f in range(len(FIELDS))]
        with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
            if not tx.txn.stat(tx.db(POSTINGS))["entries"]:
                items = [item for f, col in enumerate(columns) for item in _chunks(f, col, self.cut)]
                _, added = cur.putmulti(items, append=True)
                if added != len(items):
                    raise AssertionError("posting chunks were not appended in key order")
                return
            lasts = [_last_chunks(cur, f, col) for f, col in enumerate(columns)]
            if any(last is None for last in lasts):
                for f, col in enumerate(columns):
                    bounds = set(col.docnos[_boundaries(col.docnos, self.cut)].tolist())
                    for term, docnos, tfs, lengths in col.lists():
                        merge_list(cur, list_prefix(f, term), Change(docnos, tfs, lengths, bounds=bounds), self.cut)
                return
            items = []
            for f, (col, last) in enumerate(zip(columns, lasts)):
                items += _chunks(f, col if last is None else _after(col, *last), self.cut)
            cur.putmulti(items)      # a list's first chunk here replaces its last stored one (the same key)


def list_order(ranks: np.ndarray, docnos: np.ndarray, terms: int) -> np.ndarray:
    """The permutation that puts postings in list order, by rank then docno:
    ``np.lexsort((docnos, ranks))``.  When the docnos already ascend along the
    arrays (batches come in docno order) the same permutation is a stable sort
    of the ranks alone — a radix sort when they fit in 16 bits, ten times as
    fast (both sorts are stable: ties keep their places either way)."""
    if terms <= 1 << 16 and (len(docnos) < 2 or bool((docnos[1:] >= docnos[:-1]).all())):
        return np.argsort(ranks.astype(np.uint16), kind="stable")
    return np.lexsort((docnos, ranks))


def _batch_part(batch: GatheredField, docnos: np.ndarray, numbers: defaultdict[str, int]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A gathered batch of ``docnos`` as a part: (each posting's term number
    in ``numbers``, which it extends, docno, tf, document length)."""
    counts = np.frombuffer(batch.counts, dtype=np.uint32)
    local = np.frombuffer(batch.ids, dtype=np.uint32)
    ids = np.array(list(map(numbers.__getitem__, batch.terms)), dtype=np.uint32)[local]
    return (ids, np.repeat(docnos, counts),
            np.frombuffer(batch.tfs, dtype=np.uint8), np.repeat(np.frombuffer(batch.lengths, dtype=np.uint32), counts))


def _last_chunks(cur, field: int, col: _Column) -> tuple[np.ndarray, np.ndarray, Postings] | None:
    """The last stored chunk of each of the column's lists that has one —
    which lists (their places in the column), each chunk's number of
    postings, and the chunks' postings decoded together — or None when a
    list has postings at or before its last stored one."""
    which, keys, raws = [], [], []
    for i, term in enumerate(col.terms):
        prefix = list_prefix(field, term)
        found = cur.set_range(prefix + b"\xff" * 6)        # past the list's last key
        if found and cur.key().startswith(prefix):
            return None                                     # a chunk of the greatest docno there is
        if (cur.prev() if found else cur.last()) and (key := cur.key()).startswith(prefix):
            which.append(i)
            keys.append(key)
            raws.append(cur.value())
    sizes = counts(raws)
    stored = decode_chunks(keys, raws, first_docnos(keys))
    lists = np.array(which, dtype=np.int64)
    if len(lists) and (stored.docnos[np.cumsum(sizes) - 1].astype(np.uint64) >= col.docnos[col.starts[lists]]).any():
        return None
    return lists, sizes, stored


def _after(col: _Column, lists: np.ndarray, sizes: np.ndarray, stored: Postings) -> _Column:
    """The column with each of ``lists`` preceded by its ``sizes`` stored
    postings (its last chunk's, all before the list's first)."""
    n, extra = len(col.docnos), np.zeros(len(col.terms), dtype=np.int64)
    extra[lists] = sizes
    shift = np.cumsum(extra)                          # postings put before each list's end
    firsts = col.starts.astype(np.int64)
    starts = firsts + shift - extra
    old = np.arange(n) + np.repeat(shift, np.diff(firsts, append=n))
    new = np.repeat(starts[lists] - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
    out = []
    for mine, theirs in ((col.docnos, stored.docnos), (col.tfs, stored.tfs), (col.lengths, stored.lengths)):
        both = np.empty(n + len(theirs), dtype=mine.dtype)
        both[old], both[new] = mine, theirs
        out.append(both)
    return _Column(col.terms, starts, *out)


def _boundaries(docnos: np.ndarray, cut: int) -> np.ndarray:
    """Which docnos are boundaries (:func:`~.chunks.boundary`, column-wise: the product wraps modulo 2**64)."""
    if cut >> 64:                                 # chunk=1: every docno
        return np.ones(len(docnos), dtype=bool)
    return docnos * _GOLDEN < np.uint64(cut)


def _chunks(field: int, col: _Column, cut: int) -> list[tuple[bytes, bytes]]:
    """Every list of a column cut into its chunks (before each list's first
    posting and each boundary docno, see :func:`~.chunks.boundary`) and
    encoded as :func:`~.chunks.encode_chunk` encodes one."""
    docnos, n = col.docnos, len(col.docnos)
    if not n:
        return []
    first = np.zeros(n, dtype=bool)
    first[col.starts] = True
    starts_chunk = first | _boundaries(docnos, cut)
    gaps = np.zeros(n, dtype=np.uint64)
    gaps[1:] = docnos[1:] - docnos[:-1]          # wraps at a list's first posting: set to 0 below
    gaps[starts_chunk] = 0
    starts = np.flatnonzero(starts_chunk)
    top = np.maximum.reduceat(gaps, starts)
    width = (top >= 1 << 8).astype(np.uint8) + (top >= 1 << 16) + (top >= 1 << 32)
    ones = np.maximum.reduceat(col.tfs, starts) <= 1
    wide = np.maximum.reduceat(col.lengths, starts) > 255
    heads = width | np.where(ones, 0, 4).astype(np.uint8) | np.where(wide, 8, 0).astype(np.uint8)
    used = np.flatnonzero(np.bincount(width)).tolist()    # (np.unique would load numpy.ma: ~25 ms)
    gap_bytes = {w: gaps.astype(_GAP_TYPES[w]).tobytes() for w in used}
    tf_bytes = col.tfs.tobytes()
    narrow, broad = col.lengths.astype("<u1").tobytes(), col.lengths.astype("<u2").tobytes()
    list_of = np.cumsum(first)[starts] - 1
    prefixes = [list_prefix(field, term) for term in col.terms]
    out = []
    ends = [*starts[1:].tolist(), n]
    for s, e, head, w, lst, d in zip(starts.tolist(), ends, heads.tolist(), width.tolist(), list_of.tolist(),
                                     docnos[starts].tolist()):
        key = prefixes[lst] + d.to_bytes(6, "big")
        size = 1 << w
        body = b"".join((bytes((head,)), gap_bytes[w][(s + 1) * size:e * size], b"" if head & 4 == 0
                         else tf_bytes[s:e], broad[2 * s:2 * e] if head & 8 else narrow[s:e]))
        out.append((key, body + zlib.crc32(body, zlib.crc32(key)).to_bytes(4, "little")))
    return out
