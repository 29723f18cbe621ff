"""Read model: the full-text index over content, summary and tags.

Document number ``docno`` = the sequence of the event that created the message
in this log; ``field`` = 0 content, 1 summary, 2 tags.  Sub-databases:

* ``postings``: field byte + term + NUL + 6-byte docno → one *chunk* of the
  term's posting list in document order: for each document its docno, the
  term's frequency ``tf`` and the field's length in terms, packed as arrays in
  the narrowest width that holds them (:func:`encode_chunk`, ~3 bytes a
  posting), then a CRC-32 of key and value, so a damaged chunk — or one
  whose key changed — is refused when read.  The key's docno is the chunk's
  first.  A list is cut before every
  posting whose docno is a *boundary* (:func:`boundary`: one docno in
  ``CHUNK``, by a hash of the number alone), so the chunks are a function of
  the postings alone — however and whenever they arrived.  That is what lets
  replay build each chunk once, and live writes merge batches in, with the same
  bytes.
* ``pending``: docno → the search *record* of a message indexed since the last
  merge (:func:`record_of`).  A write puts this one record instead of ~35
  postings scattered over the tree; the write that brings the number of
  records to ``MERGE_AT`` merges them all into ``postings``, ``exact`` and
  ``facets`` in its own transaction, so the cost of touching the tree is
  shared by ``MERGE_AT`` writes.  Search reads the pending records as well: a
  message is found as soon as its write returns.  When the merges happen
  depends on the sequence of index operations alone, never on how they were
  grouped into transactions.
* ``exact`` (dupsort, dupfixed 6): field byte + hash of the whole normalized
  field text (each tag on its own) → docno, for SPEC §6.10's whole-field match.
* ``docs``: docno → id (16) + kind, tier, importance (1 each) + timestamp (8) +
  session id + CRC-32 of key and value — written at once, not merged: what
  filters and tie-breaks need without decoding messages.
* ``facets`` (dupsort, dupfixed 6): one list of docnos per filter value —
  ``s`` + session id, ``k`` + kind, ``t`` + tier, ``i`` + importance,
  ``g`` + tag (:class:`FacetFilter`).

Field lengths and counts live in ``stats`` (``len_*``, ``n_*``).

A full replay runs in *bulk* mode (``tx.memo["bulk"]``): the merges the live
path would do are followed in memory, and the chunks are written at the end of
the transaction (and every ``BULK_HOLD`` merged documents) — the same bytes, without re-reading and re-writing chunks
every ``MERGE_AT`` documents.  Written messages are tokenized in batches
(:func:`gather`), mostly by a second process while the replay goes on
(:class:`_Builder`); each batch comes back gathered per list, so it joins the
lists with one step a list rather than one a posting.  A message updated or
deleted while its batch is out gets its record built on the spot, and is left
out of what its batch brought.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import unicodedata
import weakref
import zlib
from array import array
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, chain, islice, repeat
from operator import sub

import Stemmer

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import KINDS, TIERS, Message
from eventstore.ids import to_bytes, to_str
from eventstore.store import Tx

from . import stats, tokens
from .tokens import normalize, terms

POSTINGS, PENDING, EXACT, DOCS, FACETS = "postings", "pending", "exact", "docs", "facets"
_DUPS = {"dupsort": True, "dupfixed": True}
SPECS = {POSTINGS: {}, PENDING: {}, EXACT: _DUPS, DOCS: {}, FACETS: _DUPS}
FIELDS = ("content", "summary", "tags")
# BM25 term-frequency saturation and length normalization (Anserini's defaults).
K1, B = 0.9, 0.4
MAX_TF, MAX_LENGTH = 255, 65535
MERGE_AT = 256          # pending records that trigger a merge
CHUNK = 128             # one docno in CHUNK is a chunk boundary
BULK_HOLD = 100_000     # records a bulk replay keeps in memory before writing them
BUILD_BATCH = 512       # written messages a replay hands the second process at a time
BACKLOG = 2             # batches the second process may have waiting before the replay gathers one itself
FRAME_MAX = 1 << 28     # bytes in a frame from the second process (a 512-message batch's is ~250 KB)
JOIN_WAIT = 30.0        # seconds the end of a replay waits for the second process before stopping it
_MASK64 = (1 << 64) - 1
_CUT = (1 << 64) // CHUNK
_GOLDEN = 0x9E3779B97F4A7C15
_GAP_CODES = "BHIQ"                     # chunk gap widths 1, 2, 4, 8 bytes
_SWAP = sys.byteorder == "big"          # chunks are little-endian
_DOC = struct.Struct(">16sBBBQ")        # docs value: id, kind, tier, importance, timestamp (+ session)


def docno_key(docno: int) -> bytes:
    return docno.to_bytes(6, "big")


def list_prefix(field: int, term: str) -> bytes:
    """The key prefix of a term's posting list (terms never contain NUL)."""
    return bytes((field,)) + term.encode("utf-8") + b"\x00"


def exact_key(field: int, text: str) -> bytes:
    digest = hashlib.blake2b(normalize(text).strip().encode("utf-8"), digest_size=16).digest()
    return bytes([field]) + digest


def field_texts(msg: Message) -> tuple[list[str], list[str], list[str]]:
    return _texts(msg.content, msg.metadata.summary, msg.metadata.tags)


def _texts(content: str, summary: str | None, tags) -> tuple[list[str], list[str], list[str]]:
    """The texts of each field: content, summary (if any), every tag."""
    return [content], [summary] if summary else [], list(tags)


# ------------------------------------------------------------------ chunks
def boundary(docno: int) -> bool:
    """Whether a posting list starts a new chunk at ``docno`` (1 in ``CHUNK``)."""
    return (docno * _GOLDEN) & _MASK64 < _CUT


def _packed(code: str, values) -> bytes:
    arr = array(code, values)
    if _SWAP:
        arr.byteswap()
    return arr.tobytes()


def _unpacked(code: str, raw) -> array:
    arr = array(code)
    arr.frombytes(raw)
    if _SWAP:
        arr.byteswap()
    return arr


def _sealed(key: bytes, body: bytes) -> bytes:
    """``body`` and the CRC-32 of key and body (4 bytes, little-endian)."""
    return body + zlib.crc32(body, zlib.crc32(key)).to_bytes(4, "little")


def _unsealed(key: bytes, raw: bytes, what: str) -> bytes:
    """The body of a sealed value, if it is the one written under ``key``."""
    body = raw[:-4]
    if len(raw) < 4 or zlib.crc32(body, zlib.crc32(key)).to_bytes(4, "little") != raw[-4:]:
        raise CorruptStoreError(f"{what} failed its checksum")
    return body


def encode_chunk(key: bytes, docnos: list[int], tfs: list[int] | None, lengths: list[int]) -> bytes:
    """One byte of widths, then the n−1 docno gaps, the tfs (left out when all
    are 1; ``None`` says so) and the lengths, each array in the narrowest width
    that holds it; then the CRC-32 of the chunk's key and those bytes."""
    gaps = list(map(sub, docnos[1:], docnos[:-1]))
    top = max(gaps, default=0)
    g = 0 if top < 1 << 8 else 1 if top < 1 << 16 else 2 if top < 1 << 32 else 3
    ones = tfs is None or tfs.count(1) == len(tfs)
    wide = max(lengths) > 255
    head = bytes((g | (0 if ones else 4) | (8 if wide else 0),))
    return _sealed(key, head + _packed(_GAP_CODES[g], gaps) + (b"" if ones else bytes(tfs))
                   + _packed("H" if wide else "B", lengths))


def decode_chunk(key: bytes, raw: bytes) -> tuple[list[int], bytes, array]:
    """(docnos, tfs, lengths) of the chunk stored under ``key``."""
    raw = _unsealed(key, raw, "a posting chunk")
    code = raw[0] if raw else 255
    if code > 15:
        raise CorruptStoreError("a posting chunk has an unknown layout")
    wg, wt, wl = 1 << (code & 3), (code >> 2) & 1, 2 if code & 8 else 1
    n, rest = divmod(len(raw) - 1 + wg, wg + wt + wl)
    if rest or n < 1:
        raise CorruptStoreError("a posting chunk has the wrong length")
    at = 1 + (n - 1) * wg
    start = int.from_bytes(key[-6:], "big")
    docnos = list(accumulate(_unpacked(_GAP_CODES[code & 3], raw[1:at]), initial=start))
    tfs = raw[at:at + n] if wt else b"\x01" * n
    return docnos, tfs, _unpacked("H" if wl == 2 else "B", raw[at + n * wt:])


def chunk_count(raw: bytes) -> int:
    """The number of postings in a chunk, from its length alone (the
    checksum is checked when the chunk is decoded)."""
    code = raw[0] if raw else 255
    if code > 15:
        raise CorruptStoreError("a posting chunk has an unknown layout")
    wg = 1 << (code & 3)
    return (len(raw) - 5 + wg) // (wg + ((code >> 2) & 1) + (2 if code & 8 else 1))


def _chunked(prefix: bytes, docnos: list[int], tfs: list[int] | None, lengths: list[int],
             bounds: set[int] | None = None) -> list[tuple[bytes, bytes]]:
    """Sorted postings of one list cut into (key, encoded chunk): the first
    posting always starts a chunk, as a list's first or a boundary does.
    ``bounds``, when given, holds every boundary among ``docnos``."""
    if bounds is None:
        starts = [i for i, d in enumerate(docnos) if i and boundary(d)]
    else:
        starts = sorted(i for i in map(partial(bisect_left, docnos), bounds.intersection(docnos)) if i)
    out = []
    for i, j in zip([0, *starts], [*starts, len(docnos)]):
        key = prefix + docno_key(docnos[i])
        out.append((key, encode_chunk(key, docnos[i:j], None if tfs is None else tfs[i:j], lengths[i:j])))
    return out


def _merge_list(cur, prefix: bytes, docnos: list[int], tfs: list[int] | None, lengths: list[int],
                remove: set[int], bounds: set[int] | None = None) -> None:
    """Add (sorted) and remove postings of one list, rewriting only the chunks
    they touch.

    The run rewritten starts at the chunk holding the smallest docno involved
    (or the list's first chunk), one earlier when removing (a removed first
    posting may join its chunk to the previous one), and ends with the chunk
    holding the largest; the chunk after it starts at a boundary and stays.
    """
    low = min(docnos[0] if docnos else _MASK64, min(remove, default=_MASK64))
    high = max(docnos[-1] if docnos else 0, max(remove, default=0))
    _to_run_start(cur, prefix, prefix + docno_key(low), bool(remove))
    run: dict[bytes, bytes] = {}
    key = cur.key()
    while key.startswith(prefix) and (not run or int.from_bytes(key[-6:], "big") <= high):
        run[key] = cur.value()
        if not cur.next():
            break
        key = cur.key()
    if run:
        docnos, tfs, lengths, bounds = _combined(run, docnos, tfs, lengths, remove, bounds)
    new = dict(_chunked(prefix, docnos, tfs, lengths, bounds)) if docnos else {}
    for k in run.keys() - new.keys():
        if cur.set_key(k):
            cur.delete()
    cur.putmulti(sorted(new.items()))


def _combined(run: dict[bytes, bytes], docnos: list[int], tfs: list[int] | None, lengths: list[int],
              remove: set[int], bounds: set[int] | None) -> tuple:
    """The run's postings with ``docnos`` added and ``remove`` taken out, and
    what is known of their boundaries (see :func:`_chunked`)."""
    chunks = [decode_chunk(k, raw) for k, raw in run.items()]
    if len(chunks) == 1 and not remove and docnos and docnos[0] > chunks[0][0][-1]:
        # appending after the last chunk: its own postings hold no boundary but the first
        old, old_tfs, old_lengths = chunks[0]
        return (old + docnos, list(old_tfs) + (tfs or [1] * len(docnos)),
                old_lengths.tolist() + lengths, bounds)
    merged: dict[int, tuple[int, int]] = {}
    for old, old_tfs, old_lengths in chunks:
        merged.update(zip(old, zip(old_tfs, old_lengths)))
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


# ------------------------------------------------------------------ records
def _field_entry(field: int, texts: list[str]) -> list:
    """[length, terms, tfs, whole-text keys] of one field (stored with the
    terms joined by NUL: :func:`_encode_record`)."""
    if not texts:
        return [0, (), b"", []]
    toks = terms(texts[0]) if len(texts) == 1 else [t for text in texts for t in terms(text)]
    exact = [exact_key(field, text) for text in dict.fromkeys(texts)]
    if not toks:
        return [0, (), b"", exact]
    counts = Counter(toks)                 # terms in order of first occurrence
    tfs = counts.values()
    return [min(len(toks), MAX_LENGTH), tuple(counts),
            bytes(tfs) if max(tfs) <= MAX_TF else bytes(min(n, MAX_TF) for n in tfs), exact]


def facet_keys(msg: Message) -> list[bytes]:
    m = msg.metadata
    if m is codec.DEFAULT_METADATA:        # most messages, after decoding: keys kept per session
        found = _DEFAULT_FACETS.get(msg.session_id)
        if found is None:
            if len(_DEFAULT_FACETS) >= 4096:
                _DEFAULT_FACETS.clear()
            found = _DEFAULT_FACETS[msg.session_id] = _facet_keys(msg.session_id, m)
        return list(found)
    return _facet_keys(msg.session_id, m)


def _facet_keys(session_id: str, m) -> list[bytes]:
    return ([b"s" + session_id.encode("utf-8"), b"k" + bytes([KINDS.index(m.memory_kind)]),
             b"t" + bytes([TIERS.index(m.memory_tier)]), b"i" + bytes([m.importance])]
            + [b"g" + tag.encode("utf-8") for tag in dict.fromkeys(m.tags)])


_DEFAULT_FACETS: dict[str, list[bytes]] = {}


def record_of(msg: Message, fields=range(len(FIELDS))) -> list:
    """A message's search record: one entry per field (``None`` for the fields
    not asked for), then its facet keys."""
    texts = field_texts(msg)
    return [_field_entry(f, texts[f]) if f in fields else None for f in range(len(FIELDS))] + [
        facet_keys(msg)]


def _encode_record(rec: list) -> bytes:
    return codec.dumps([[e[0], "\x00".join(e[1]), e[2], e[3]] for e in rec[:3]] + [rec[3]])


def _decode_record(raw: bytes) -> list:
    try:
        rec = codec.loads(raw)
        if len(rec) != 4 or not all(len(e) == 4 for e in rec[:3]):
            raise ValueError("wrong shape")
        for e in rec[:3]:
            e[1] = tuple(e[1].split("\x00")) if e[1] else ()
            if len(e[1]) != len(e[2]):
                raise ValueError("terms and tfs differ in number")
        return rec
    except Exception as exc:
        raise CorruptStoreError("a pending search record could not be decoded") from exc


def entry_terms(entry: list) -> Iterator[tuple[str, int]]:
    """(term, tf) of one field entry of a record."""
    return zip(entry[1], entry[2])


@dataclass
class Pending:
    """A pending record as search reads it."""

    docno: int
    lengths: tuple[int, int, int]
    tfs: tuple[dict[str, int], dict[str, int], dict[str, int]]
    exact: frozenset[bytes]
    facets: frozenset[bytes]


_PARSED: dict[bytes, Pending] = {}


def pending(tx: Tx) -> list[Pending]:
    """Every pending record (parsed ones are cached by their bytes)."""
    out = []
    with tx.txn.cursor(db=tx.db(PENDING)) as cur:
        for k, raw in cur:
            found = _PARSED.get(raw)
            if found is None or found.docno != int.from_bytes(k, "big"):
                rec = _decode_record(raw)
                found = Pending(int.from_bytes(k, "big"), tuple(e[0] for e in rec[:3]),
                                tuple(dict(entry_terms(e)) for e in rec[:3]),
                                frozenset(x for e in rec[:3] for x in e[3]), frozenset(rec[3]))
                if len(_PARSED) >= 4 * MERGE_AT:
                    _PARSED.clear()
                _PARSED[raw] = found
            out.append(found)
    return out


# ------------------------------------------------------------ main index
def _add_to_main(tx: Tx, records: list[tuple[int, list]], lists: _Lists | None = None,
                 exact: list | None = None, facets: list | None = None) -> None:
    """Merge whole records (ascending docno) into postings, exact and facets,
    with whatever ``lists``, ``exact`` and ``facets`` already hold."""
    lists = lists or _Lists()
    exact, facets = exact or [], facets or []
    for docno, rec in records:
        dk = docno_key(docno)
        for f in range(len(FIELDS)):
            entry = rec[f]
            lists.add(f, docno, entry)
            for k in entry[3]:
                exact.append((k, dk))
        for k in rec[3]:
            facets.append((k, dk))
    if tx.txn.stat(tx.db(POSTINGS))["entries"]:
        lists.write(tx)
    else:
        lists.append(tx)
    _put_dups(tx, EXACT, exact, newest=True)
    _put_dups(tx, FACETS, facets, newest=True)


class _Lists:
    """Postings gathered per list in docno order: per field, each term's
    docnos, the field's length in each of those documents, and its tfs above 1."""

    def __init__(self) -> None:
        self.docnos: list[defaultdict[str, list[int]]] = [defaultdict(list) for _ in FIELDS]
        self.lengths: list[defaultdict[str, list[int]]] = [defaultdict(list) for _ in FIELDS]
        self.tfs: list[dict[str, dict[int, int]]] = [{} for _ in FIELDS]
        self.remove: list[dict[str, set[int]]] = [{} for _ in FIELDS]
        self.bounds: set[int] = set()
        self.batched = False
        self.unsorted: set[tuple[int, str]] = set()     # lists a record was added to after batches

    def add_batch(self, gathered: tuple[list[int], list]) -> None:
        """Add what :func:`gather` made of a batch (batches come in docno
        order, before any single record)."""
        docnos, fields = gathered
        self.batched = True
        self.bounds.update(filter(boundary, docnos))
        for f, (names, sizes, flat, flat_lengths, tfs, _, _) in enumerate(fields):
            mine, my_lengths, my_tfs = self.docnos[f], self.lengths[f], self.tfs[f]
            flat, flat_lengths = iter(flat), iter(flat_lengths)
            for term, n in zip(names, sizes):
                mine[term].extend(islice(flat, n))
                my_lengths[term].extend(islice(flat_lengths, n))
            for term, extra in tfs.items():
                if term in my_tfs:
                    my_tfs[term].update(extra)
                else:
                    my_tfs[term] = extra

    def exclude(self, docnos: set[int]) -> None:
        """Take ``docnos`` out of every list (before any single record is
        added).  They are mostly the newest (the pending ones), so each list
        is searched from the first of them on."""
        lowest = min(docnos)
        for f in range(len(FIELDS)):
            lengths_of = self.lengths[f]
            for term, found in self.docnos[f].items():
                at = bisect_left(found, lowest)
                hits = docnos.intersection(found[at:]) if at < len(found) else None
                if hits:
                    lengths = lengths_of[term]
                    for d in sorted(hits, reverse=True):
                        i = bisect_left(found, d)
                        del found[i], lengths[i]
            for extra in self.tfs[f].values():
                for d in docnos.intersection(extra):
                    del extra[d]

    def add(self, field: int, docno: int, entry: list) -> None:
        names = entry[1]
        if not names:
            return
        if boundary(docno):
            self.bounds.add(docno)
        lists, lengths, length = self.docnos[field], self.lengths[field], entry[0]
        for term in names:
            lists[term].append(docno)
            lengths[term].append(length)
        if self.batched:        # a record after the batches may land inside a list
            self.unsorted.update(zip(repeat(field), names))
        _note_tfs(self.tfs[field], docno, names, entry[2])

    def drop(self, field: int, docno: int, entry: list) -> None:
        for term in entry[1]:
            self.remove[field].setdefault(term, set()).add(docno)

    def _each(self) -> Iterator[tuple[bytes, list[int], list[int] | None, list[int], set[int]]]:
        """(key prefix, docnos, tfs, lengths, docnos to remove) of every list
        touched, in key order (a term's code points sort as its UTF-8 bytes)."""
        for field in range(len(FIELDS)):
            lists, lengths_of, remove, tfs = (self.docnos[field], self.lengths[field], self.remove[field],
                                              self.tfs[field])
            for term in sorted(lists.keys() | remove.keys()):
                docnos, lengths = lists.get(term, []), lengths_of.get(term, [])
                if not docnos and term not in remove:
                    continue                        # every posting was excluded
                if (field, term) in self.unsorted:
                    pairs = sorted(zip(docnos, lengths))
                    docnos, lengths = [d for d, _ in pairs], [x for _, x in pairs]
                extra = tfs.get(term)
                yield (list_prefix(field, term), docnos,
                       list(map(extra.get, docnos, repeat(1))) if extra else None,
                       lengths, remove.get(term, set()))

    def write(self, tx: Tx) -> None:
        with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
            for prefix, docnos, tfs, lengths, remove in self._each():
                _merge_list(cur, prefix, docnos, tfs, lengths, remove, self.bounds)

    def append(self, tx: Tx) -> None:
        """Write the lists into an empty ``postings``: each cut into its chunks
        at once, every chunk appended in key order (pages filled, no search)."""
        items = []
        for prefix, docnos, tfs, lengths, _ in self._each():
            items.extend(_chunked(prefix, docnos, tfs, lengths, self.bounds))
        with tx.txn.cursor(db=tx.db(POSTINGS)) as cur:
            _, added = cur.putmulti(items, append=True)
        if added != len(items):
            raise AssertionError("posting chunks were not appended in key order")


def _note_tfs(tfs: dict[str, dict[int, int]], docno: int, names, counts: bytes) -> None:
    """Note the document's tfs above 1 (term → {docno: tf}); 1 is implied."""
    if max(counts) > 1:
        for term, tf in zip(names, counts):
            if tf > 1:
                tfs.setdefault(term, {})[docno] = tf


def _put_dups(tx: Tx, db: str, items: list[tuple[bytes, bytes]], newest: bool = False) -> None:
    """Put (key, docno) pairs.  ``newest``: every docno is greater than any
    already under its key (a merge's), so each goes at the end of its key's
    duplicates (``MDB_APPENDDUP``: full pages left behind, not half-full ones);
    should one not, the pairs are put again the ordinary way."""
    if items:
        items.sort()
        with tx.txn.cursor(db=tx.db(db)) as cur:
            if not newest or cur.putmulti(items, append=True)[1] != len(items):
                cur.putmulti(items)


def _delete_dups(tx: Tx, db: str, items) -> None:
    handle = tx.db(db)
    for k, v in items:
        tx.txn.delete(k, v, db=handle)


def _remove_fields(tx: Tx, docno: int, rec: list, fields) -> None:
    """Take the given fields of a merged document out of postings and exact."""
    lists = _Lists()
    dk = docno_key(docno)
    for f in fields:
        lists.drop(f, docno, rec[f])
        _delete_dups(tx, EXACT, ((k, dk) for k in rec[f][3]))
    lists.write(tx)


def _add_fields(tx: Tx, docno: int, rec: list, fields) -> None:
    lists = _Lists()
    dk = docno_key(docno)
    for f in fields:
        lists.add(f, docno, rec[f])
        _put_dups(tx, EXACT, [(k, dk) for k in rec[f][3]])
    lists.write(tx)


# ------------------------------------------------------------------ docs
@dataclass(frozen=True)
class Doc:
    message_id: str
    kind: str
    tier: str
    importance: int
    timestamp: int
    session_id: str


def _doc_value(key: bytes, msg: Message) -> bytes:
    m = msg.metadata
    return _sealed(key, _DOC.pack(to_bytes(msg.message_id), KINDS.index(m.memory_kind),
                                  TIERS.index(m.memory_tier), m.importance, msg.timestamp)
                   + msg.session_id.encode("utf-8"))


# Offsets of the filterable fields inside a ``docs`` value (see :func:`raw_doc`).
DOC_KIND, DOC_TIER, DOC_IMPORTANCE, DOC_SESSION = 16, 17, 18, _DOC.size


def raw_doc(tx: Tx, docno: int) -> bytes | None:
    """The ``docs`` value (checksum checked and cut off), for filters that
    compare a byte or two."""
    key = docno_key(docno)
    raw = tx.txn.get(key, db=tx.db(DOCS))
    return None if raw is None else _unsealed(key, raw, "a search document record")


def doc(tx: Tx, docno: int) -> Doc | None:
    raw = raw_doc(tx, docno)
    if raw is None:
        return None
    if len(raw) < _DOC.size or raw[DOC_KIND] >= len(KINDS) or raw[DOC_TIER] >= len(TIERS):
        raise CorruptStoreError("a search document record could not be decoded")
    mid, kind, tier, imp, ts = _DOC.unpack_from(raw)
    return Doc(to_str(mid), KINDS[kind], TIERS[tier], imp, ts, raw[_DOC.size:].decode("utf-8"))


# ------------------------------------------------------- index operations
class _Bulk:
    """A replay's index work kept in memory (see the module docstring).

    A written message's postings come gathered with its batch
    (:class:`_Builder`): until they are written the message itself stands in
    the pending or merged dict.  A message needed earlier (an update or delete
    reached it), or still pending at the end, gets its record built here, and
    its batch's postings are left out of the lists.  Each message's statistics
    are counted once: from its batch, or when its record is built.
    """

    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.pending: dict[int, list | Message] = {}
        self.merged: dict[int, list | Message] = {}     # merged, not yet written
        self.deltas: dict[str, int] = {}
        self.builder = _Builder()
        tx.at_end(self.builder.stop)          # a replay that fails leaves no process behind
        with tx.txn.cursor(db=tx.db(PENDING)) as cur:
            self.pending.update((int.from_bytes(k, "big"), _decode_record(v)) for k, v in cur)
        tx.txn.drop(tx.db(PENDING), delete=False)
        tx.at_flush(self.finish)

    def index(self, docno: int, msg: Message) -> None:
        self.pending[docno] = msg
        self.builder.add(docno, msg)
        if len(self.pending) >= MERGE_AT:
            self.merged.update(self.pending)
            self.pending.clear()
            if len(self.merged) >= BULK_HOLD:
                self._write_merged()

    def held(self, docno: int) -> tuple[list | None, bool]:
        for where, pend in ((self.pending, True), (self.merged, False)):
            rec = where.get(docno)
            if isinstance(rec, Message):
                rec = self._built(docno, rec, record_of(rec))   # its batch's postings are left out
            if rec is not None:
                return rec, pend
        return None, False

    def _built(self, docno: int, msg: Message, rec: list) -> list:
        """Put ``rec`` where ``msg`` stands in for it, and count it."""
        _count(self.deltas, rec, +1)
        where = self.pending if self.pending.get(docno) is msg else self.merged
        where[docno] = rec
        return rec

    def _write_merged(self) -> None:
        """Write every merged document: those still standing in as messages
        from their batch's gathered postings, the rest record by record."""
        lists, done = self.builder.lists()
        exact, facets, invalid = [], [], set()
        merged = self.merged
        for items, (docnos, fields) in done:
            live = [merged.get(d) is m for d, m in items]
            invalid.update(d for d, ok in zip(docnos, live) if not ok)
            dks = list(map(docno_key, docnos))
            for f, (lengths, keys) in enumerate(fields):
                length, n = _STAT_KEYS[f]
                if not all(live):
                    lengths = [x for x, ok in zip(lengths, live) if ok]
                    keys = [x if ok else () for x, ok in zip(keys, live)]
                self.deltas[length] = self.deltas.get(length, 0) + sum(lengths)
                self.deltas[n] = self.deltas.get(n, 0) + sum(map(bool, keys))
                exact.extend((k, dk) for dk, found in zip(dks, keys) for k in found)
            for (docno, msg), dk, ok in zip(items, dks, live):
                if ok:
                    facets.extend(zip(facet_keys(msg), repeat(dk)))
                    del merged[docno]
        if invalid:
            lists.exclude(invalid)
        for docno, msg in list(self.pending.items()):
            if isinstance(msg, Message):
                self._built(docno, msg, record_of(msg))
        records = sorted(self.merged.items())       # built early (an update or delete came), or loaded
        self.merged.clear()
        _add_to_main(self.tx, records, lists, exact, facets)

    def finish(self) -> None:
        self._write_merged()
        handle = self.tx.db(PENDING)
        with self.tx.txn.cursor(db=handle) as cur:
            cur.putmulti(sorted((docno_key(d), _encode_record(r)) for d, r in self.pending.items()))
        self.pending.clear()
        if self.deltas:
            stats.add(self.tx, **self.deltas)


def gather(items: list[tuple[int, str, str | None, tuple[str, ...]]]) -> tuple[list[int], list]:
    """What a batch of messages (docno, content, summary, tags), in docno order, adds
    to the index, gathered per list so that the replay appends a batch with
    one step a list, not one a posting: (docnos, per field (terms, each
    term's number of postings, their docnos and the field's lengths in those
    documents term after term, term → {docno: tf above 1}, each document's
    length, each document's whole-text keys)).  Numbers travel as arrays,
    which a pickle loads at once."""
    docnos = [item[0] for item in items]
    texts_of = [_texts(*item[1:]) for item in items]
    fields = []
    for f in range(len(FIELDS)):
        lists: defaultdict[str, list[int]] = defaultdict(list)
        tfs: dict[str, dict[int, int]] = {}
        lengths, keys = [], []
        for docno, texts in zip(docnos, texts_of):
            length, names, counts, exact = _field_entry(f, texts[f])
            lengths.append(length)
            keys.append(exact)
            for term in names:
                lists[term].append(docno)
            if names:
                _note_tfs(tfs, docno, names, counts)
        flat = array("Q", chain.from_iterable(lists.values()))
        length_of = dict(zip(docnos, lengths)).__getitem__
        fields.append((list(lists), array("I", map(len, lists.values())), flat,
                       array("I", map(length_of, flat)), tfs, array("I", lengths), keys))
    return docnos, fields


def _items(batch: list[tuple[int, Message]]) -> list[tuple[int, str, str | None, tuple[str, ...]]]:
    """What :func:`gather` needs of each message of a batch (cheap to pickle)."""
    return [(d, m.content, m.metadata.summary, m.metadata.tags) for d, m in batch]


def serve() -> None:
    """The second process of :class:`_Builder`: reads batches of (docno,
    content, summary, tags) from stdin and writes what :func:`gather` makes of each to
    stdout, each a length-prefixed pickle."""
    if sys.argv[1:] != [_FINGERPRINT]:
        return              # other code on disk than the replay's: it gathers every batch itself
    src, out = sys.stdin.buffer, sys.stdout.buffer
    try:
        while head := src.read(4):
            data = pickle.dumps(gather(pickle.loads(src.read(int.from_bytes(head, "big")))), 5)
            out.write(len(data).to_bytes(4, "big") + data)
            out.flush()
    except (BrokenPipeError, EOFError, pickle.UnpicklingError):
        pass                # the replay went away (or was killed): nobody waits for more


class _Builder:
    """What :func:`gather` makes of the written messages' batches, mostly
    made in a second process while the replay goes on, and added to one
    :class:`_Lists` as the batches come back, in docno order.

    Messages are handed over ``BUILD_BATCH`` at a time and come back in the
    same order.  When the second process has more than ``BACKLOG`` batches
    waiting, the replay gathers the next batch itself, so that neither
    process waits long for the other.  Two threads move the bytes (the pipes
    would otherwise make either process wait for the other).  What a batch
    gathers is a function of its messages alone, so where it was gathered
    changes no byte, and a failure of the second process (none started, one
    that died or hangs, garbage or short output) only means gathering here:
    a frame that is too long or cut ends the reading and the process, and the
    end of a replay waits at most ``JOIN_WAIT`` seconds for it.  The process is
    a fresh interpreter (``python -c``), not a fork and not ``multiprocessing``
    (whose children import the parent's ``__main__``): it inherits no LMDB
    environment, no lock, no state.  It is handed a fingerprint of the code
    this process loaded (:data:`_FINGERPRINT`) and does nothing if the code it
    loads from disk differs (an upgrade under a running server).
    """

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, Message]]] = [[]]
        self.here: dict[int, tuple] = {}     # batch index → gathered here (not sent)
        self.sent: list[int] = []            # indexes of the batches sent, in order
        self.proc: subprocess.Popen | None = None
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.frames: list[bytes] = []
        self.threads: list[threading.Thread] = []
        self.added = _Lists()
        self.done: list[tuple[list, tuple]] = []    # (batch, its docnos and per-field lengths and keys)

    def add(self, docno: int, msg: Message) -> None:
        batch = self.batches[-1]
        batch.append((docno, msg))
        if len(batch) >= BUILD_BATCH:
            if len(self.batches) == 1 and _cpus() > 1:
                self._start()
            items = _items(batch)
            if self.proc is not None and len(self.sent) - len(self.frames) <= BACKLOG:
                data = pickle.dumps(items, 5)
                self.outbox.put(len(data).to_bytes(4, "big") + data)
                self.sent.append(len(self.batches) - 1)
            else:
                self.here[len(self.batches) - 1] = gather(items)
            self.batches.append([])
            self._take(waiting=False)

    def _take(self, waiting: bool) -> None:
        """Add the batches that are back (all of them if ``waiting``), in order."""
        while len(self.done) < len(self.batches) - 1:
            i = len(self.done)
            gathered = self.here.pop(i, None)
            k = bisect_left(self.sent, i)
            if gathered is None and k < len(self.sent) and self.sent[k] == i:
                if k < len(self.frames):
                    gathered = _loaded(self.frames[k])
                    self.frames[k] = b""           # its memory back
                elif not waiting:
                    return                         # not back yet
            batch = self.batches[i]
            if not _fits(gathered, batch):
                gathered = gather(_items(batch))
            self.added.add_batch(gathered)
            docnos, fields = gathered
            self.done.append((batch, (docnos, [(f[5], f[6]) for f in fields])))

    def _start(self) -> None:
        if not sys.executable:
            return
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from projections.terms import serve; serve()", _FINGERPRINT],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=root)
        except (OSError, ValueError, TypeError):
            return
        weakref.finalize(self, _stop, self.proc, self.outbox)
        self.threads = [threading.Thread(target=_feed, args=(self.outbox, self.proc.stdin), daemon=True),
                        threading.Thread(target=_drain, args=(self.proc, self.frames), daemon=True)]
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        """Stop the second process, if one runs (what it did not answer is lost)."""
        if self.proc is not None:
            _stop(self.proc, self.outbox)
            for thread in self.threads:
                thread.join()
            self.proc = None

    def lists(self) -> tuple[_Lists, list[tuple[list, tuple]]]:
        """Every batch added (the last, short one gathered here): the lists,
        and each batch with its docnos and per-field lengths and whole-text
        keys.  The builder starts over."""
        if self.proc is not None:
            self.outbox.put(None)            # the process ends after the last batch
            self.threads[1].join(JOIN_WAIT)  # its answers are all read when it has ended
            self.stop()
        if self.batches[-1]:
            self.batches.append([])
        self._take(waiting=True)
        out = self.added, self.done
        self.__init__()
        return out


def _feed(outbox: queue.SimpleQueue, pipe) -> None:
    """Write the frames put in ``outbox`` to ``pipe`` until ``None``; then close it."""
    try:
        for data in iter(outbox.get, None):
            pipe.write(data)
            pipe.flush()
        pipe.close()
    except (OSError, ValueError):        # the process is gone: what it missed is built here
        pass


def _drain(proc: subprocess.Popen, frames: list[bytes]) -> None:
    """Read length-prefixed frames off the process's stdout until it ends;
    a frame too long or cut, or any failure, stops the process (so that
    nothing waits on it) and the reading."""
    try:
        while len(head := proc.stdout.read(4)) == 4:
            n = int.from_bytes(head, "big")
            if n > FRAME_MAX or len(data := proc.stdout.read(n)) != n:
                break
            frames.append(data)
        else:
            return
    except Exception:
        pass
    proc.kill()


def _fits(gathered, batch: list[tuple[int, Message]]) -> bool:
    """Whether ``gathered`` has the shape :func:`gather` gives, for ``batch``."""
    try:
        docnos, fields = gathered
        return (docnos == [d for d, _ in batch] and len(fields) == len(FIELDS)
                and all(len(f) == 7 for f in fields))
    except (TypeError, ValueError):
        return False


def _source_fingerprint() -> str:
    """A hash of the code that decides what :func:`gather` makes (this module,
    the tokenizer, the Unicode tables and the stemmer), as loaded."""
    h = hashlib.blake2b(digest_size=12)
    for path in (__file__, tokens.__file__):
        with open(path, "rb") as fh:
            h.update(fh.read())
    h.update(f"{unicodedata.unidata_version} {Stemmer.version()} {sys.version}".encode())
    return h.hexdigest()


_FINGERPRINT = _source_fingerprint()


def _loaded(frame: bytes) -> list | None:
    try:
        return pickle.loads(frame)
    except Exception:
        return None


def _stop(proc: subprocess.Popen, outbox: queue.SimpleQueue) -> None:
    outbox.put(None)
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        try:
            pipe.close()
        except (OSError, ValueError):
            pass


def _cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def _bulk(tx: Tx) -> _Bulk | None:
    if not tx.memo.get("bulk"):
        return None
    found = tx.memo.get("terms.bulk")
    if found is None:
        found = tx.memo["terms.bulk"] = _Bulk(tx)
    return found


def _held(tx: Tx, docno: int) -> tuple[list | None, bool]:
    """(record, pending) of a document not merged into the tree yet, else (None, False)."""
    bulk = _bulk(tx)
    if bulk is not None:
        return bulk.held(docno)
    raw = tx.txn.get(docno_key(docno), db=tx.db(PENDING))
    return (None, False) if raw is None else (_decode_record(raw), True)


def _store_held(tx: Tx, docno: int, rec: list | None, pend: bool) -> None:
    bulk = _bulk(tx)
    if bulk is not None:
        where = bulk.pending if pend else bulk.merged
        if rec is None:
            del where[docno]
        else:
            where[docno] = rec
    elif rec is None:
        tx.txn.delete(docno_key(docno), db=tx.db(PENDING))
    else:
        tx.txn.put(docno_key(docno), _encode_record(rec), db=tx.db(PENDING))


_STAT_KEYS = tuple((f"len_{name}", f"n_{name}") for name in FIELDS)


def _count(deltas: dict[str, int], rec: list, sign: int, fields=range(len(FIELDS))) -> None:
    for f in fields:
        length, n = _STAT_KEYS[f]
        deltas[length] = deltas.get(length, 0) + sign * rec[f][0]
        deltas[n] = deltas.get(n, 0) + (sign if rec[f][3] else 0)


def index(tx: Tx, docno: int, msg: Message) -> None:
    key = docno_key(docno)
    tx.put_last(DOCS, key, _doc_value(key, msg))                 # docnos only grow
    bulk = _bulk(tx)
    if bulk is not None:
        bulk.index(docno, msg)           # the record is built, and counted, later
        return
    rec = record_of(msg)
    deltas: dict[str, int] = {}
    _count(deltas, rec, +1)
    stats.add(tx, **deltas)
    handle = tx.db(PENDING)
    tx.txn.put(docno_key(docno), _encode_record(rec), db=handle)
    if tx.txn.stat(handle)["entries"] >= MERGE_AT:
        with tx.txn.cursor(db=handle) as cur:
            records = [(int.from_bytes(k, "big"), _decode_record(v)) for k, v in cur]
        tx.txn.drop(handle, delete=False)
        _add_to_main(tx, records)


def unindex(tx: Tx, docno: int, msg: Message) -> None:
    rec, pend = _held(tx, docno)
    if rec is not None:
        _store_held(tx, docno, None, pend)
    else:
        rec = record_of(msg)
        _remove_fields(tx, docno, rec, range(len(FIELDS)))
        _delete_dups(tx, FACETS, ((k, docno_key(docno)) for k in rec[3]))
    tx.txn.delete(docno_key(docno), db=tx.db(DOCS))
    deltas: dict[str, int] = {}
    _count(deltas, rec, -1)
    stats.add(tx, **deltas)


def reindex(tx: Tx, docno: int, old: Message, new: Message, content_changed: bool) -> None:
    """Move an updated message's index entries from ``old`` to ``new``, touching
    only the fields that changed: the same bytes as unindex + index would leave
    in the tree, without re-tokenizing an unchanged content."""
    changed = [f for f, (was, now) in enumerate(zip(field_texts(old), field_texts(new)))
               if (f or content_changed) and was != now]
    before, after = record_of(old, changed), record_of(new, changed)
    deltas: dict[str, int] = {}
    _count(deltas, before, -1, changed)
    _count(deltas, after, +1, changed)
    key = docno_key(docno)
    tx.txn.put(key, _doc_value(key, new), db=tx.db(DOCS))
    rec, pend = _held(tx, docno)
    if rec is not None:
        for f in changed:
            rec[f] = after[f]
        rec[3] = after[3]
        _store_held(tx, docno, rec, pend)
    else:
        _remove_fields(tx, docno, before, changed)
        _add_fields(tx, docno, after, changed)
        dk = docno_key(docno)
        gone, came = set(before[3]), set(after[3])
        _delete_dups(tx, FACETS, ((k, dk) for k in sorted(gone - came)))
        _put_dups(tx, FACETS, [(k, dk) for k in sorted(came - gone)])
    if deltas:
        stats.add(tx, **deltas)


class FacetFilter:
    """Search filters answered from the facet lists: the shortest list that
    applies (built into a set of docnos when small enough), plus a per-document
    check, on the ``docs`` bytes, of whatever that list does not settle.
    Pending documents are not in the facet lists yet: :meth:`passes_pending`
    checks their record's facet keys instead.

    A condition every live message meets (``kinds`` naming every kind in use,
    say) filters nothing and is dropped.
    """

    def __init__(self, tx: Tx, flt, n_docs: int) -> None:
        """``flt`` has ``session_id``, ``kinds``, ``tiers``, ``tags``, ``min_importance``."""
        self.tx, self.flt = tx, flt
        self.allowed: set[int] | None = None
        self.size = -1                       # -1: nothing to filter
        self._docs: dict[int, Doc | None] = {}
        self._verdicts: dict[int, bool] = {}
        conditions = self._conditions()
        self._any = [frozenset(keys) for _, keys in conditions]
        with tx.txn.cursor(db=tx.db(FACETS)) as cur:
            sized = [(sum(cur.count() if cur.set_key(k) else 0 for k in keys), name, keys)
                     for name, keys in conditions]
        sized = [c for c in sized if c[0] < n_docs or c[0] == 0]
        self._pending = {name for _, name, _ in sized}
        if sized:
            self.size, self._best, self._keys = min(sized, key=lambda c: c[0])
        self.checks = bool(self._pending)    # documents must be checked one by one
        self._kinds = {KINDS.index(k) for k in flt.kinds}
        self._tiers = {TIERS.index(t) for t in flt.tiers}
        self._session = (flt.session_id or "").encode("utf-8")

    def _conditions(self) -> list[tuple[object, list[bytes]]]:
        """Each condition, named, as the facet keys whose union it allows."""
        f, out = self.flt, []
        if f.session_id is not None:
            out.append(("session", [b"s" + f.session_id.encode("utf-8")]))
        if f.kinds:
            out.append(("kinds", [b"k" + bytes([KINDS.index(k)]) for k in sorted(f.kinds)]))
        if f.tiers:
            out.append(("tiers", [b"t" + bytes([TIERS.index(t)]) for t in sorted(f.tiers)]))
        if f.min_importance:
            out.append(("importance", [b"i" + bytes([i]) for i in range(f.min_importance, 101)]))
        out.extend((("tag", t), [b"g" + t.encode("utf-8")]) for t in dict.fromkeys(f.tags))
        return out

    def passes_pending(self, record: Pending) -> bool:
        return all(not keys.isdisjoint(record.facets) for keys in self._any)

    def materialize(self, limit: int) -> bool:
        """Build the set of allowed (merged) docnos when it has at most ``limit``."""
        if self.size < 0 or self.size > limit:
            return False
        allowed: set[int] = set()
        with self.tx.txn.cursor(db=self.tx.db(FACETS)) as cur:
            for key in self._keys:
                if cur.set_key(key):
                    allowed.update(int.from_bytes(v, "big") for v in cur.iternext_dup(keys=False))
        self.allowed = allowed
        self._pending.discard(self._best)
        self.checks = bool(self._pending)
        return True

    def doc(self, docno: int) -> Doc | None:
        if docno not in self._docs:
            self._docs[docno] = doc(self.tx, docno)
        return self._docs[docno]

    def passes(self, docno: int) -> bool:
        """Whether a merged document passes."""
        if self.allowed is not None and docno not in self.allowed:
            return False
        if not self.checks:
            return True
        verdict = self._verdicts.get(docno)
        if verdict is None:
            verdict = self._verdicts[docno] = self._check(docno)
        return verdict

    def _check(self, docno: int) -> bool:
        raw = raw_doc(self.tx, docno)
        if raw is None:
            return False
        for name in self._pending:
            if name == "session":
                ok = raw[DOC_SESSION:] == self._session
            elif name == "kinds":
                ok = raw[DOC_KIND] in self._kinds
            elif name == "tiers":
                ok = raw[DOC_TIER] in self._tiers
            elif name == "importance":
                ok = raw[DOC_IMPORTANCE] >= self.flt.min_importance
            else:
                with self.tx.txn.cursor(db=self.tx.db(FACETS)) as cur:
                    ok = cur.set_key_dup(b"g" + name[1].encode("utf-8"), docno_key(docno))
            if not ok:
                return False
        return True
