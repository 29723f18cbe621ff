"""Posting chunks decoded as arrays, many at a time (query side).

:func:`decode_chunks` gives what :func:`~.chunks.decode_chunk` gives for each
of a list's chunks — docnos, tfs and field lengths — but for any number of
chunks at once, as three numpy arrays laid end to end, with a fixed number of
array operations whatever the count: search reads lists of hundreds of
thousands of postings, and a Python step per posting (or per chunk of ~128)
is what bounded it.  The chunk layout is :mod:`.chunks`'s; every chunk's
checksum is checked as :func:`~.chunks.decode_chunk` checks it.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from eventstore.errors import CorruptStoreError

_MAX_CODE = 15
_FIRST = itemgetter(0)


class Postings(NamedTuple):
    """Postings in docno order within each chunk (chunks in the order given)."""

    docnos: np.ndarray     # int64
    tfs: np.ndarray        # int64
    lengths: np.ndarray    # int64


EMPTY = Postings(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def first_docnos(keys: Sequence[bytes]) -> np.ndarray:
    """The docno each chunk key ends with (its first posting's), as int64."""
    if not keys:
        return np.zeros(0, np.int64)
    joined = b"".join(keys)
    if len(joined) == len(keys) * len(keys[0]):     # one list's keys: all of one length
        return tail_docnos(joined, len(keys[0]))
    return tail_docnos(b"".join(k[-6:] for k in keys), 6)


def tail_docnos(raw: bytes | memoryview, width: int) -> np.ndarray:
    """The docnos (6 bytes, big-endian) that end each of the ``width``-byte
    rows laid end to end in ``raw``, as int64."""
    rows = np.frombuffer(raw, np.uint8).reshape(-1, width)[:, width - 6:]
    wide = np.zeros((len(rows), 8), np.uint8)
    wide[:, 2:] = rows
    return wide.view(">u8").ravel().astype(np.int64)


def counts(raws: Sequence[bytes]) -> np.ndarray:
    """Postings per chunk, from the chunks' lengths and layout bytes
    (:func:`~.chunks.chunk_count`, for many chunks)."""
    if not raws:
        return np.zeros(0, np.int64)
    try:
        heads = np.frombuffer(bytes(map(_FIRST, raws)), np.uint8).astype(np.int64)
    except IndexError:
        raise CorruptStoreError("a posting chunk is empty") from None
    if int(heads.max()) > _MAX_CODE:
        raise CorruptStoreError("a posting chunk has an unknown layout")
    lens = np.fromiter(map(len, raws), np.int64, len(raws))
    wg = 1 << (heads & 3)
    return (lens - 5 + wg) // (wg + ((heads >> 2) & 1) + 1 + ((heads >> 3) & 1))


def decode_chunks(keys: Sequence[bytes], raws: Sequence[bytes], firsts: np.ndarray) -> Postings:
    """The postings of the chunks ``raws`` stored under ``keys`` (``firsts``:
    their first docnos, :func:`first_docnos`), end to end.

    Every byte is labelled with what it is — layout byte, a gap of width w,
    a tf, a length of width w, checksum — by one ``repeat`` of the chunks'
    section sizes; each kind of number is then the bytes with its label, in
    order, and lands in the postings of the chunks that have it.
    """
    if not raws:
        return EMPTY
    for key, raw in zip(keys, raws):
        if len(raw) < 4 or zlib.crc32(raw[:-4], zlib.crc32(key)).to_bytes(4, "little") != raw[-4:]:
            raise CorruptStoreError("a posting chunk failed its checksum")
    lens = np.fromiter(map(len, raws), np.int64, len(raws))
    buf = np.frombuffer(b"".join(raws), np.uint8)
    heads = buf[np.cumsum(lens) - lens].astype(np.int64)
    if int(heads.max()) > _MAX_CODE:
        raise CorruptStoreError("a posting chunk has an unknown layout")
    g, wt, wide = heads & 3, (heads >> 2) & 1, (heads >> 3) & 1
    wg = 1 << g
    n, rest = np.divmod(lens - 5 + wg, wg + wt + 1 + wide)
    if rest.any() or (n < 1).any():
        raise CorruptStoreError("a posting chunk has the wrong length")
    # labels: 0 layout byte, 1+g gaps of width 2**g, 5 tfs, 6+wide lengths, 8 checksum
    sizes = np.stack([np.ones_like(n), (n - 1) * wg, n * wt, n * (1 + wide), np.full_like(n, 4)], axis=1)
    labels = np.stack([np.zeros_like(n), 1 + g, np.full_like(n, 5), 6 + wide, np.full_like(n, 8)], axis=1)
    label = np.repeat(labels.ravel().astype(np.uint8), sizes.ravel())
    total = int(n.sum())
    starts = np.cumsum(n) - n                         # each chunk's first posting
    steps = np.zeros(total, np.int64)                 # docno steps: the gaps, and each chunk's jump
    later = np.ones(total, bool)
    later[starts] = False
    gap_width = np.repeat(g, n - 1)                   # of each posting after a chunk's first
    gaps = np.zeros(total - len(raws), np.int64)
    for code, dtype in enumerate(("<u1", "<u2", "<u4", "<u8")):
        if (g == code).any():
            gaps[gap_width == code] = buf[label == 1 + code].view(dtype)
    steps[later] = gaps
    run = np.cumsum(steps)
    ends = starts + n - 1
    within = run[ends] - run[starts]                  # each chunk's last docno − its first
    steps[starts[0]] = firsts[0]
    steps[starts[1:]] = firsts[1:] - firsts[:-1] - within[:-1]
    docnos = np.cumsum(steps)
    tfs = np.ones(total, np.int64)
    if wt.any():
        tfs[np.repeat(wt == 1, n)] = buf[label == 5]
    lengths = np.empty(total, np.int64)
    for w, dtype in ((0, "<u1"), (1, "<u2")):
        if (wide == w).any():
            lengths[np.repeat(wide == w, n)] = buf[label == 6 + w].view(dtype)
    return Postings(docnos, tfs, lengths)


class _Entry(NamedTuple):
    keys: list[bytes]
    raws: list[bytes]
    firsts: np.ndarray
    postings: Postings
    ends: np.ndarray          # each chunk's end in ``postings``
    size: int                 # bytes held


class Kept(NamedTuple):
    """A kept list's chunks, as a snapshot holds them."""

    keys: list[bytes]
    raws: list[bytes]
    firsts: np.ndarray
    df: int


# A store snapshot's name: the generation of the store's caches and LMDB's
# transaction id, which every committed write changes
# (:meth:`eventstore.caches.Caches.snapshot`).
Snapshot = tuple[int, int]


class DecodedLists:
    """Posting lists decoded whole, kept between searches (least recently used
    first out, within ``budget`` bytes).  An entry is used only for the very
    chunk bytes it was decoded from — compared whole, keys and values — so it
    is never stale: a list whose chunks changed (a merge appends to its last
    chunk, an update or delete rewrites one) is decoded again from its first
    changed chunk on, the chunks before it reused."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._seen: dict[bytes, Snapshot] = {}      # the snapshot each entry was last found the store's in
        self._held = 0

    def confirmed(self, name: bytes, snapshot: Snapshot | None) -> Kept | None:
        """The chunks of the list ``name`` (its key prefix) if they are kept
        and were found to be the store's in this very ``snapshot``: no write
        has been committed since, so they still are."""
        if snapshot is None:
            return None
        with self._lock:
            old = self._entries.get(name)
            seen = self._seen.get(name)
        if old is None or seen != snapshot:
            return None
        return Kept(old.keys, old.raws, old.firsts, int(old.ends[-1]))

    def peek(self, keys: list[bytes], raws: list[bytes], snapshot: Snapshot | None = None) -> Postings | None:
        """The postings of a whole list if they are kept for exactly these chunks."""
        if not keys:
            return None
        name = keys[0][:-6]
        with self._lock:
            old = self._entries.get(name)
        if old is not None and self._same(name, old, keys, raws, snapshot):
            return old.postings
        return None

    def _same(self, name: bytes, old: _Entry, keys: list[bytes], raws: list[bytes],
              snapshot: Snapshot | None) -> bool:
        """Whether ``old`` was decoded from exactly these chunks (noted for
        ``snapshot``, the one they were read in, when so)."""
        if not (old.raws is raws or (old.raws == raws and old.keys == keys)):
            return False
        if snapshot is not None:
            with self._lock:
                self._seen[name] = snapshot
        return True

    def get(self, keys: list[bytes], raws: list[bytes], firsts: np.ndarray,
            snapshot: Snapshot | None = None) -> Postings:
        """The postings of a whole list (its chunk keys, values and first
        docnos, read in ``snapshot`` — None: a snapshot that may still change)."""
        if not keys:
            return EMPTY
        name = keys[0][:-6]
        with self._lock:
            old = self._entries.get(name)
            if old is not None:
                self._entries.move_to_end(name)
        if old is not None and self._same(name, old, keys, raws, snapshot):
            return old.postings
        same = _common_start(old, keys, raws)
        fresh = decode_chunks(keys[same:], raws[same:], firsts[same:])
        if same and old is not None:
            keep = int(old.ends[same - 1])
            postings = Postings(*(np.concatenate([a[:keep], b]) for a, b in zip(old.postings, fresh)))
        else:
            postings = fresh
        self._put(name, keys, raws, firsts, postings, snapshot)
        return postings

    def _put(self, name: bytes, keys: list[bytes], raws: list[bytes], firsts: np.ndarray, postings: Postings,
             snapshot: Snapshot | None) -> None:
        size = 24 * len(postings.docnos) + sum(map(len, raws)) + 100 * len(raws)
        if size > self.budget // 4:
            with self._lock:
                self._seen.pop(name, None)
            return
        for a in postings:
            a.flags.writeable = False
        ends = np.cumsum(counts(raws))
        with self._lock:
            old = self._entries.pop(name, None)
            if old is not None:
                self._held -= old.size
            self._entries[name] = _Entry(keys, raws, firsts, postings, ends, size)
            self._held += size
            if snapshot is None:
                self._seen.pop(name, None)
            else:
                self._seen[name] = snapshot
            while self._held > self.budget and self._entries:
                gone_name, gone = self._entries.popitem(last=False)
                self._seen.pop(gone_name, None)
                self._held -= gone.size


def _common_start(old: _Entry | None, keys: list[bytes], raws: list[bytes]) -> int:
    """How many leading chunks ``old`` shares with the list (0 without one)."""
    if old is None:
        return 0
    n = min(len(old.keys), len(keys))
    i = 0
    while i < n and old.keys[i] == keys[i] and old.raws[i] == raws[i]:
        i += 1
    return i
