"""Search records: what the index holds of one message, and the one place
that says what the postings of a document are.

A message's *record* has one :class:`FieldEntry` per field — the field's
length in terms, its distinct terms with their frequencies, and the keys of
its whole texts (for the whole-field match) — and the message's *facet keys*
(its filter values).  :func:`field_entry` is the single definition of a
field's postings: the live projector builds records with it, and the bulk
replay gathers its batches with it (:mod:`.gather`), so the two cannot
produce different bytes.

A record is stored in ``pending`` (docno → CBOR) from its write until the
next merge; search reads pending records as :class:`Pending` values.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import NamedTuple

from eventstore import codec
from eventstore.errors import CorruptStoreError
from eventstore.events import KINDS, ROLES, TIERS, Message, Metadata
from eventstore.memo import Memo
from eventstore.transaction import Tx

from ..tokens import terms
from .layout import FACETS, FIELDS, PENDING, docno_of, exact_key

MAX_TF, MAX_LENGTH = 255, 65535
_ABOVE_ONE = re.compile(rb"[\x02-\xff]")   # a tf byte above 1
_TAGS = FIELDS.index("tags")
_STAT_KEYS = tuple((f"len_{name}", f"n_{name}") for name in FIELDS)


class FieldEntry(NamedTuple):
    """The postings of one field of one document."""

    length: int                  # terms in the field (≤ MAX_LENGTH)
    terms: tuple[str, ...]       # distinct terms, in order of first occurrence
    tfs: bytes                   # each term's frequency (≤ MAX_TF)
    exact: tuple[bytes, ...]     # whole-text keys: the field's texts (each tag on its own)

    def postings(self) -> Iterator[tuple[str, int]]:
        """(term, tf) of each distinct term."""
        return zip(self.terms, self.tfs)


EMPTY = FieldEntry(0, (), b"", ())
# The records this process put in ``pending``, by their bytes: a record is a
# function of its bytes, so one found here is what decoding them would give,
# without the decoding (~60,000 instructions a record under callgrind).  More
# than ``merge_at`` of them: a whole pending set.
_STORED: Memo[bytes, tuple[tuple[FieldEntry, ...], tuple[bytes, ...]]] = Memo(4096)


@dataclass(slots=True)
class Record:
    """A message's search record: every field's entry and its facet keys."""

    fields: list[FieldEntry]
    facets: list[bytes]

    def encode(self) -> bytes:
        """The canonical CBOR of ``[[length, terms joined by NUL, tfs, [whole-text
        keys]] for each field] + [facet keys]``."""
        return codec.dumps([*[(e.length, "\x00".join(e.terms), e.tfs, e.exact) for e in self.fields], self.facets])

    def stored(self) -> bytes:
        """:meth:`encode`, the record remembered by its bytes for :meth:`loaded`
        (written to ``pending`` and soon read back: by a merge, or by the next
        transaction of an import)."""
        raw = self.encode()
        _STORED.keep(raw, (tuple(self.fields), tuple(self.facets)))
        return raw

    @classmethod
    def loaded(cls, raw: bytes) -> Record:
        """:meth:`decode`, or a copy of the record this process stored as
        ``raw`` (its entries are immutable; its lists are its own)."""
        known = _STORED.get(raw)
        return cls.decode(raw) if known is None else cls(list(known[0]), list(known[1]))

    @classmethod
    def decode(cls, raw: bytes) -> Record:
        value = codec.loads(raw)
        if not (type(value) is list and len(value) == len(FIELDS) + 1 and _bytes_list(value[-1])):
            raise CorruptStoreError("a pending search record is not its fields and facet keys")
        return cls([_field_entry(e) for e in value[:-1]], value[-1])


def _bytes_list(value: object) -> bool:
    return type(value) is list and all(type(x) is bytes for x in value)


def _field_entry(value: object) -> FieldEntry:
    """One field of a stored record: ``[length, terms joined by NUL, tfs, whole-text keys]``."""
    if not (type(value) is list and len(value) == 4):
        raise CorruptStoreError("a pending search record has a field of the wrong shape")
    length, joined, tfs, exact = value
    if not (type(length) is int and type(joined) is str and type(tfs) is bytes and _bytes_list(exact)):
        raise CorruptStoreError("a pending search record has a field of the wrong type")
    names = tuple(joined.split("\x00")) if joined else ()
    if len(names) != len(tfs):
        raise CorruptStoreError("a pending search record's terms and frequencies differ in number")
    return FieldEntry(length, names, tfs, tuple(exact))


def field_texts(content: str, summary: str | None, tags: Iterable[str]) -> tuple[list[str], ...]:
    """The texts of each field: content, summary (if any), every tag."""
    return [content], [summary] if summary else [], list(tags)


def texts_of(msg: Message) -> tuple[list[str], ...]:
    return field_texts(msg.content, msg.metadata.summary, msg.metadata.tags)


def field_entry(field: int, texts: list[str]) -> FieldEntry:
    """The postings of one field whose texts are ``texts``."""
    if not texts:
        return EMPTY
    if field == _TAGS:
        return _tags_entry(tuple(texts))
    return _entry(field, texts)


@lru_cache(maxsize=4096)
def _tags_entry(tags: tuple[str, ...]) -> FieldEntry:
    """Tags repeat from message to message (a source's, a tool's): their entries are kept."""
    return _entry(_TAGS, list(tags))


def _entry(field: int, texts: list[str]) -> FieldEntry:
    toks = terms(texts[0]) if len(texts) == 1 else [t for text in texts for t in terms(text)]
    exact = tuple(exact_key(field, text) for text in dict.fromkeys(texts))
    if not toks:
        return FieldEntry(0, (), b"", exact)
    counts = Counter(toks)                 # terms in order of first occurrence
    tfs = counts.values()
    return FieldEntry(min(len(toks), MAX_LENGTH), tuple(counts),
                      bytes(tfs) if max(tfs) <= MAX_TF else bytes(min(n, MAX_TF) for n in tfs), exact)


def note_tfs(tfs: dict[str, dict[int, int]], docno: int, entry: FieldEntry) -> None:
    """Note the document's tfs above 1 (term → {docno: tf}); 1 is implied.
    Most are 1: the few others are found by a scan in C, not a step a term."""
    names, found = entry.terms, entry.tfs
    for m in _ABOVE_ONE.finditer(found):
        i = m.start()
        tfs.setdefault(names[i], {})[docno] = found[i]


def facet_keys(msg: Message) -> list[bytes]:
    """The facet keys of a message: ``s`` + session, ``k`` + kind, ``t`` +
    tier, ``i`` + importance, ``r`` + role, ``g`` + each tag.  They repeat
    from message to message (a session's, a source's): kept by the values
    they come from."""
    m = msg.metadata
    values = (msg.session_id, msg.role, m.memory_kind, m.memory_tier, m.importance, m.tags)
    found = _FACETS.get(values)
    if found is None:
        found = _FACETS.keep(values, tuple(_facet_keys(msg.session_id, msg.role, m)))
    return list(found)


def _facet_keys(session_id: str, role: str, m: Metadata) -> list[bytes]:
    return ([b"s" + session_id.encode("utf-8"), b"k" + bytes([KINDS.index(m.memory_kind)]),
             b"t" + bytes([TIERS.index(m.memory_tier)]), b"i" + bytes([m.importance]),
             b"r" + bytes([ROLES.index(role)])]
            + [tag_key(tag) for tag in dict.fromkeys(m.tags)])


def tag_key(tag: str) -> bytes:
    """The facet key of a tag."""
    return b"g" + tag.encode("utf-8")


_FACETS: Memo[tuple, tuple[bytes, ...]] = Memo(4096)


def record_of(msg: Message) -> Record:
    texts = texts_of(msg)
    return Record([field_entry(f, texts[f]) for f in range(len(FIELDS))], facet_keys(msg))


def entries_of(msg: Message, fields: Iterable[int]) -> dict[int, FieldEntry]:
    """The entries of some fields of a message."""
    texts = texts_of(msg)
    return {f: field_entry(f, texts[f]) for f in fields}


def count(deltas: dict[str, int], entries: Iterable[tuple[int, FieldEntry]], sign: int) -> None:
    """Add (``sign`` +1) or take out (−1) the field statistics of ``entries``
    ((field, entry) pairs): each field's total length and document count."""
    for f, entry in entries:
        length, n = _STAT_KEYS[f]
        deltas[length] = deltas.get(length, 0) + sign * entry.length
        deltas[n] = deltas.get(n, 0) + (sign if entry.exact else 0)


def count_lengths(deltas: dict[str, int], field: int, lengths: Iterable[int], keys: Iterable) -> None:
    """Add the statistics of documents given as their lengths and whole-text keys."""
    length, n = _STAT_KEYS[field]
    deltas[length] = deltas.get(length, 0) + sum(lengths)
    deltas[n] = deltas.get(n, 0) + sum(map(bool, keys))


# ------------------------------------------------------------------ reading
@dataclass(frozen=True, slots=True)
class Pending:
    """A pending record as search reads it: shared by every search that
    meets its bytes (:func:`parsed`), so nothing in it can be changed."""

    docno: int
    lengths: tuple[int, ...]
    tfs: tuple[Mapping[str, int], ...]      # read-only views
    exact: frozenset[bytes]
    facets: frozenset[bytes]


_PARSED: Memo[bytes, Pending] = Memo(4096)        # more than ``merge_at`` records: a whole pending set


def pending(tx: Tx) -> list[Pending]:
    """Every pending record (parsed ones are cached by their bytes)."""
    with tx.txn.cursor(db=tx.db(PENDING)) as cur:
        return [parsed(docno_of(k), raw) for k, raw in cur]


def tagged(tx: Tx, tag: str) -> list[int]:
    """The docnos of the live documents tagged ``tag``: the merged ones from
    the tag's facet list, then the pending ones whose record holds its facet
    key (only records whose bytes hold the key's are parsed)."""
    key = tag_key(tag)
    with tx.txn.cursor(db=tx.db(FACETS)) as cur:
        found = [docno_of(dk) for dk in cur.iternext_dup(keys=False)] if cur.set_key(key) else []
    encoded = codec.dumps_bytes(key)
    with tx.txn.cursor(db=tx.db(PENDING)) as cur:
        found += [docno for k, raw in cur
                  if encoded in raw and key in parsed(docno := docno_of(k), raw).facets]
    return found


def parsed(docno: int, raw: bytes) -> Pending:
    """The pending record of ``docno`` stored as ``raw`` (cached by its bytes)."""
    found = _PARSED.get(raw)
    if found is None or found.docno != docno:
        rec = Record.loaded(raw)
        found = Pending(docno, tuple(e.length for e in rec.fields),
                        tuple(MappingProxyType(dict(e.postings())) for e in rec.fields),
                        frozenset(x for e in rec.fields for x in e.exact), frozenset(rec.facets))
        _PARSED.keep(raw, found)
    return found
