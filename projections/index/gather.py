"""What a batch of written messages adds to the index, gathered per list.

A replay hands written messages over in batches; :func:`gather` turns a
batch into its postings gathered per posting list, so that the replay joins
a batch to the lists with one step a list rather than one a posting.  It
uses :func:`~.records.field_entry`, the same definition of a document's
postings as the live path.  Numbers travel as arrays, which a pickle loads
at once (a batch is usually gathered in a second process: :mod:`.worker`).
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from itertools import chain
from typing import NamedTuple

from eventstore.events import Message

from .layout import FIELDS
from .records import field_entry, field_texts, note_tfs

# What gather needs of a message: (docno, content, summary, tags) — cheap to pickle.
Item = tuple[int, str, str | None, tuple[str, ...]]


class GatheredField(NamedTuple):
    """One field of a gathered batch."""

    terms: list[str]                   # every term of the batch in this field
    sizes: array                       # each term's number of postings
    flat: array                        # their docnos, term after term
    flat_lengths: array                # the field's length in each of those documents
    tfs: dict[str, dict[int, int]]     # term → {docno: tf above 1}
    lengths: array                     # each document's length
    exact: list[tuple[bytes, ...]]     # each document's whole-text keys


class Gathered(NamedTuple):
    docnos: list[int]
    fields: list[GatheredField]

    def fits(self, batch: list[tuple[int, Message]]) -> bool:
        """Whether this has the shape :func:`gather` gives, for ``batch``
        (what comes back from another process is checked before use)."""
        return (self.docnos == [d for d, _ in batch] and len(self.fields) == len(FIELDS)
                and all(isinstance(f, GatheredField) for f in self.fields))


def items_of(batch: list[tuple[int, Message]]) -> list[Item]:
    return [(d, m.content, m.metadata.summary, m.metadata.tags) for d, m in batch]


def gather(items: list[Item]) -> Gathered:
    """What a batch of messages, in docno order, adds to the index."""
    docnos = [item[0] for item in items]
    texts_of = [field_texts(*item[1:]) for item in items]
    fields = []
    for f in range(len(FIELDS)):
        lists: defaultdict[str, list[int]] = defaultdict(list)
        tfs: dict[str, dict[int, int]] = {}
        lengths, keys = [], []
        for docno, texts in zip(docnos, texts_of):
            entry = field_entry(f, texts[f])
            lengths.append(entry.length)
            keys.append(entry.exact)
            for term in entry.terms:
                lists[term].append(docno)
            if entry.terms:
                note_tfs(tfs, docno, entry)
        flat = array("Q", chain.from_iterable(lists.values()))
        length_of = dict(zip(docnos, lengths)).__getitem__
        fields.append(GatheredField(list(lists), array("I", map(len, lists.values())), flat,
                                    array("I", map(length_of, flat)), tfs, array("I", lengths), keys))
    return Gathered(docnos, fields)
