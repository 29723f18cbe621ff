"""Posting chunks: the codec of one block of a posting list, and the cutting
and merging of lists into chunks.

A posting list (one term in one field) is stored as chunks under
``field byte + term + NUL + first docno``.  A chunk holds, for each document
in docno order, the docno, the term's frequency ``tf`` and the field's length
in terms, packed as arrays in the narrowest width that holds them (~3 bytes a
posting), sealed with a CRC-32 of key and value.  A list is cut before every
posting whose docno is a *boundary* (:func:`boundary`: about one docno in
``IndexConfig.chunk``, by a hash of the number alone), so the chunks are a
function of the postings alone — however and whenever they arrived.  That is
what lets a replay build each chunk once, and live writes merge batches in,
with the same bytes.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from functools import partial
from itertools import accumulate, repeat
from operator import sub
from typing import NamedTuple

from eventstore.errors import CorruptStoreError

from .layout import docno_key, docno_of, sealed, unsealed

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_GAP_CODES = "BHIQ"                     # chunk gap widths 1, 2, 4, 8 bytes
_SWAP = sys.byteorder == "big"          # chunks are little-endian


class Chunk(NamedTuple):
    """The postings of one chunk, decoded."""

    docnos: list[int]
    tfs: bytes            # one byte each
    lengths: array        # the field's length in each document


def boundary(docno: int, cut: int) -> bool:
    """Whether a posting list starts a new chunk at ``docno`` (see ``IndexConfig.cut``)."""
    return (docno * _GOLDEN) & _MASK64 < cut


def _packed(code: str, values: Iterable[int]) -> bytes:
    if code == "B":
        return bytes(values)            # the same bytes, without an array
    arr = array(code, values)
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def _unpacked(code: str, raw: bytes) -> array:
    arr = array(code)
    arr.frombytes(raw)
    if _SWAP:
        arr.byteswap()
    return arr


def _gap_width(top: int) -> int:
    """The index in ``_GAP_CODES`` of the narrowest width that holds ``top``."""
    return 0 if top < 1 << 8 else 1 if top < 1 << 16 else 2 if top < 1 << 32 else 3


def encode_chunk(key: bytes, docnos: list[int], tfs: list[int] | None, lengths: list[int]) -> bytes:
    """One byte of widths, then the n−1 docno gaps, the tfs (left out when all
    are 1; ``None`` says so) and the lengths, each array in the narrowest width
    that holds it; then the CRC-32 of the chunk's key and those bytes."""
    gaps = list(map(sub, docnos[1:], docnos[:-1]))
    g = _gap_width(max(gaps, default=0))
    ones = tfs is None or tfs.count(1) == len(tfs)
    wide = max(lengths) > 255
    head = bytes((g | (0 if ones else 4) | (8 if wide else 0),))
    return sealed(key, head + _packed(_GAP_CODES[g], gaps) + (b"" if ones or tfs is None else bytes(tfs))
                  + _packed("H" if wide else "B", lengths))


def _parts(key: bytes, raw: bytes) -> tuple[int, int, bytes, bytes | None, bytes]:
    """A stored chunk cut into its layout byte, posting count, gap bytes, tf
    bytes (``None`` when all are 1) and length bytes, its checksum checked."""
    raw = unsealed(key, raw, "a posting chunk")
    code = raw[0] if raw else 255
    if code > 15:
        raise CorruptStoreError("a posting chunk has an unknown layout")
    wg, wt = 1 << (code & 3), (code >> 2) & 1
    n, rest = divmod(len(raw) - 1 + wg, wg + wt + (2 if code & 8 else 1))
    if rest or n < 1:
        raise CorruptStoreError("a posting chunk has the wrong length")
    at = 1 + (n - 1) * wg
    return code, n, raw[1:at], raw[at:at + n] if wt else None, raw[at + n * wt:]


def decode_chunk(key: bytes, raw: bytes) -> Chunk:
    """The postings of the chunk stored under ``key``."""
    code, n, gaps, tfs, lengths = _parts(key, raw)
    docnos = list(accumulate(_unpacked(_GAP_CODES[code & 3], gaps), initial=docno_of(key)))
    return Chunk(docnos, b"\x01" * n if tfs is None else tfs, _unpacked("H" if code & 8 else "B", lengths))


def chunk_count(raw: bytes) -> int:
    """The number of postings in a chunk, from its length alone (the
    checksum is checked when the chunk is decoded)."""
    code = raw[0] if raw else 255
    if code > 15:
        raise CorruptStoreError("a posting chunk has an unknown layout")
    wg = 1 << (code & 3)
    return (len(raw) - 5 + wg) // (wg + ((code >> 2) & 1) + (2 if code & 8 else 1))


def cut_list(prefix: bytes, docnos: list[int], tfs: list[int] | None, lengths: list[int], cut: int,
             bounds: set[int] | None = None) -> list[tuple[bytes, bytes]]:
    """Sorted postings of one list cut into (key, encoded chunk): the first
    posting always starts a chunk, as a list's first or a boundary does.
    ``bounds``, when given, holds every boundary among ``docnos``."""
    if bounds is None:
        starts = [i for i, d in enumerate(docnos) if i and boundary(d, cut)]
    else:
        starts = sorted(i for i in map(partial(bisect_left, docnos), bounds.intersection(docnos)) if i)
    out = []
    for i, j in zip([0, *starts], [*starts, len(docnos)]):
        key = prefix + docno_key(docnos[i])
        out.append((key, encode_chunk(key, docnos[i:j], None if tfs is None else tfs[i:j], lengths[i:j])))
    return out


class Change(NamedTuple):
    """What a merge does to one list: postings to add — sorted docnos, their
    tfs (None: all 1) and lengths — and docnos to remove.  ``bounds``, when
    given, holds every boundary among the docnos added; ``first``, when
    known, is the index of the first of them."""

    docnos: list[int]
    tfs: list[int] | None
    lengths: list[int]
    remove: set[int] | frozenset[int] = frozenset()
    bounds: set[int] | None = None
    first: int | None = None


def merge_list(cur, prefix: bytes, change: Change, cut: int) -> None:
    """Make a :class:`Change` to one list, rewriting only the chunks it
    touches (``cur`` is a cursor on ``postings``).

    The run rewritten starts at the chunk holding the smallest docno involved
    (or the list's first chunk), one earlier when removing (a removed first
    posting may join its chunk to the previous one), and ends with the chunk
    holding the largest; the chunk after it starts at a boundary and stays.
    """
    docnos, tfs, lengths, remove, bounds, _ = change
    items = appended(cur, prefix, change, cut) if docnos and not remove else None
    if items is not None:
        cur.putmulti(items)
        return
    low = min(docnos[0] if docnos else _MASK64, min(remove, default=_MASK64))
    high = max(docnos[-1] if docnos else 0, max(remove, default=0))
    _to_run_start(cur, prefix, prefix + docno_key(low), bool(remove))
    run: dict[bytes, bytes] = {}
    key = cur.key()
    while key.startswith(prefix) and (not run or docno_of(key) <= high):
        run[key] = cur.value()
        if not cur.next():
            break
        key = cur.key()
    if run:
        docnos, tfs, lengths, bounds = _combined(run, change)
    new = dict(cut_list(prefix, docnos, tfs, lengths, cut, bounds)) if docnos else {}
    for k in run.keys() - new.keys():
        if cur.set_key(k):
            cur.delete()
    cur.putmulti(sorted(new.items()))


def appended(cur, prefix: bytes, change: Change, cut: int) -> list[tuple[bytes, bytes]] | None:
    """The chunks to put for :func:`merge_list`'s usual case in a live merge —
    postings (none removed) all after the list's last — found without decoding
    and without writing (``cur``, on ``postings``, is only read): the last
    chunk with the postings before the first boundary among them (the
    change's ``first``, found when None) spliced onto its bytes (see
    :func:`_extended`), then the rest cut into chunks of their own, in key
    order.  None when some posting is not after the last."""
    docnos, tfs, lengths, _, bounds, first = change
    found = cur.set_range(prefix + docno_key(docnos[0]))
    if found and cur.key().startswith(prefix):
        return None                     # a chunk starts at or after the first posting
    if not ((cur.prev() if found else cur.last()) and cur.key().startswith(prefix)):
        return cut_list(prefix, docnos, tfs, lengths, cut, bounds)       # a new list
    key, raw = cur.item()
    parts = _parts(key, raw)
    gaps = parts[2]
    last = docno_of(key) + sum(gaps if not parts[0] & 3 else _unpacked(_GAP_CODES[parts[0] & 3], gaps))
    if last >= docnos[0]:
        return None
    k = _first_boundary(docnos, cut, bounds) if first is None else first
    out = [(key, _extended(key, parts, last, docnos[:k], None if tfs is None else tfs[:k], lengths[:k]))] if k else []
    if k < len(docnos):
        out += cut_list(prefix, docnos[k:], None if tfs is None else tfs[k:], lengths[k:], cut, bounds)
    return out


def _first_boundary(docnos: list[int], cut: int, bounds: set[int] | None) -> int:
    """The index of the first boundary among ``docnos`` (their length if none);
    ``bounds``, when given, holds every boundary among them."""
    if bounds is None:
        return next((i for i, d in enumerate(docnos) if boundary(d, cut)), len(docnos))
    first, last = docnos[0], docnos[-1]
    within = [b for b in bounds if first <= b <= last]     # a merge's bounds are few: ~1 docno in ``chunk``
    return min(map(partial(bisect_left, docnos), bounds.intersection(docnos) if within else ()),
               default=len(docnos))


def _extended(key: bytes, parts: tuple[int, int, bytes, bytes | None, bytes], last: int, docnos: list[int],
              tfs: list[int] | None, lengths: list[int]) -> bytes:
    """A chunk (``parts``, whose last docno is ``last``) with postings after it
    added: the bytes :func:`encode_chunk` gives for all of them, each array
    re-packed wider only when a new value needs it."""
    code, n, old_gaps, old_tfs, old_lengths = parts
    gaps = [docnos[0] - last, *map(sub, docnos[1:], docnos[:-1])]
    g_old = code & 3
    g = max(g_old, _gap_width(max(gaps)))
    if g != g_old:
        old_gaps = _packed(_GAP_CODES[g], _unpacked(_GAP_CODES[g_old], old_gaps))
    ones = old_tfs is None and (tfs is None or tfs.count(1) == len(tfs))
    wide_old = bool(code & 8)
    wide = wide_old or max(lengths) > 255
    if wide != wide_old:
        old_lengths = _packed("H", _unpacked("B", old_lengths))
    tf_bytes = b"" if ones else ((b"\x01" * n if old_tfs is None else old_tfs)
                                 + (b"\x01" * len(docnos) if tfs is None else bytes(tfs)))
    head = bytes((g | (0 if ones else 4) | (8 if wide else 0),))
    return sealed(key, head + old_gaps + _packed(_GAP_CODES[g], gaps) + tf_bytes
                  + old_lengths + _packed("H" if wide else "B", lengths))


def _combined(run: dict[bytes, bytes], change: Change
              ) -> tuple[list[int], list[int], list[int], set[int] | None]:
    """The run's postings with the change made, and what is known of their
    boundaries (see :func:`cut_list`)."""
    docnos, tfs, lengths, remove, bounds, _ = change
    chunks = [decode_chunk(k, raw) for k, raw in run.items()]
    if len(chunks) == 1 and not remove and docnos and docnos[0] > chunks[0].docnos[-1]:
        # appending after the last chunk: its own postings hold no boundary but the first
        old = chunks[0]
        return (old.docnos + docnos, list(old.tfs) + (tfs or [1] * len(docnos)),
                old.lengths.tolist() + lengths, bounds)
    merged: dict[int, tuple[int, int]] = {}
    for old_docnos, old_tfs, old_lengths in chunks:
        merged.update(zip(old_docnos, zip(old_tfs, old_lengths)))
    for d in remove:
        merged.pop(d, None)
    merged.update(zip(docnos, zip(tfs or repeat(1), lengths)))
    docnos = sorted(merged)
    return docnos, [merged[d][0] for d in docnos], [merged[d][1] for d in docnos], None


def _to_run_start(cur, prefix: bytes, start: bytes, removing: bool) -> None:
    """Put ``cur`` on the chunk holding ``start``'s docno — else on the list's
    first chunk, else off the list — and one chunk earlier when ``removing``."""
    found = cur.set_range(start)
    if not (found and cur.key() == start):
        back = cur.prev() if found else cur.last()
        if not (back and cur.key().startswith(prefix)):
            cur.set_range(start)
            return
    if removing:
        here = cur.key()
        if not (cur.prev() and cur.key().startswith(prefix)):
            cur.set_key(here)
