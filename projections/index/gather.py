"""What a batch of written messages adds to the index, gathered per list.

A replay hands written messages over in batches; :func:`gather` turns a
batch into its postings as columns — each posting's term (a number within
the batch), tf, and the document's length — document after document, which
the replay sorts into posting lists all at once (:mod:`.columns`).  It uses
:func:`~.records.field_entry`, the same definition of a document's postings
as the live path.  Numbers travel as arrays, which a pickle loads at once
(a batch is usually gathered in a second process: :mod:`.worker`).
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from itertools import accumulate, count
from typing import NamedTuple

from eventstore.events import Message

from .layout import FIELDS
from .records import FieldEntry, field_entry, field_texts

# What gather needs of a message: (docno, content, summary, tags) — cheap to pickle.
Item = tuple[int, str, str | None, tuple[str, ...]]


class GatheredField(NamedTuple):
    """One field of a gathered batch: its postings document after document."""

    terms: list[str]                   # the batch's distinct terms in this field (a term's number: its place)
    ids: array                         # each posting's term number, document after document
    counts: array                      # each document's number of postings (distinct terms)
    tfs: bytes                         # each posting's tf
    lengths: array                     # each document's length
    exact: list[tuple[bytes, ...]]     # each document's whole-text keys

    def entries(self, at: list[int]) -> list[FieldEntry]:
        """The entries of the documents at ``at`` (their places in the batch):
        those :func:`gathered_field` was given, back from the columns."""
        starts = list(accumulate(self.counts, initial=0))
        return [FieldEntry(self.lengths[j], tuple(self.terms[i] for i in self.ids[starts[j]:starts[j + 1]]),
                           self.tfs[starts[j]:starts[j + 1]], self.exact[j]) for j in at]


class Gathered(NamedTuple):
    docnos: list[int]
    fields: list[GatheredField]

    def fits(self, batch: list[tuple[int, Message]]) -> bool:
        """Whether this has the shape :func:`gather` gives, for ``batch``
        (what comes back from another process is checked before use)."""
        return (self.docnos == [d for d, _ in batch] and len(self.fields) == len(FIELDS)
                and all(isinstance(f, GatheredField) and len(f.counts) == len(batch) == len(f.lengths)
                        and len(f.ids) == len(f.tfs) == sum(f.counts) for f in self.fields))


def items_of(batch: list[tuple[int, Message]]) -> list[Item]:
    return [(d, m.content, m.metadata.summary, m.metadata.tags) for d, m in batch]


def gather(items: list[Item]) -> Gathered:
    """What a batch of messages, in docno order, adds to the index."""
    texts_of = [field_texts(*item[1:]) for item in items]
    return Gathered([item[0] for item in items],
                    [gathered_field([field_entry(f, texts[f]) for texts in texts_of]) for f in range(len(FIELDS))])


def gathered_field(entries: list[FieldEntry]) -> GatheredField:
    """The postings of one field of some documents (their entries, in docno order)."""
    numbers: defaultdict[str, int] = defaultdict(count().__next__)     # a new term gets the next number
    ids, counts = array("I"), array("I")
    for entry in entries:
        ids.extend(map(numbers.__getitem__, entry.terms))
        counts.append(len(entry.terms))
    return GatheredField(list(numbers), ids, counts, b"".join([e.tfs for e in entries]),
                         array("I", [e.length for e in entries]), [e.exact for e in entries])
