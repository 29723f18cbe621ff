"""Read model: the full-text index over content, summary and tags.

One module per part, each readable on its own:

* :mod:`.layout` — the sub-databases, key layout, field numbers, checksums;
* :mod:`.config` — :class:`IndexConfig`, the tuning knobs;
* :mod:`.chunks` — the posting-chunk codec, and cutting/merging lists into chunks;
* :mod:`.records` — a message's search record (:class:`FieldEntry` per field,
  facet keys): **the** definition of a document's postings, used by the live
  path and the replay alike; pending records as search reads them;
* :mod:`.lists` — posting lists gathered in memory and written;
* :mod:`.docs` — the ``docs`` table (what filters and tie-breaks need);
* :mod:`.live` — the projector: index, re-index, unindex (:class:`IndexWork`,
  imported from there: this package's import leaves the write path out, as
  the replay's second process imports it and needs only the records);
* :mod:`.bulk` — a replay's index work, held in memory and written in large steps;
* :mod:`.gather` and :mod:`.worker` — a replay's batches gathered per list,
  mostly in a second process;
* :mod:`.filters` — search filters answered from the facet lists;
* :mod:`.arrays` — posting chunks decoded as arrays, many at a time, and
  decoded lists kept between searches;
* :mod:`.masks` — facet lists as arrays (query side).

The query-side modules (:mod:`.filters`, :mod:`.arrays`, :mod:`.masks`) use
numpy and are imported by the ranker only, never by this package's import:
the write path and the replay's second process do not load numpy.

Sub-databases: ``postings`` (posting chunks), ``pending`` (records written
since the last merge), ``exact`` (whole-field text hashes → docnos), ``docs``
(docno → id, kind, tier, importance, timestamp, session) and ``facets``
(filter value → docnos).  Field lengths and counts live in ``stats``.  The
ranker that reads all this is :mod:`projections.search`.
"""

from .chunks import Chunk, boundary, chunk_count, decode_chunk, encode_chunk
from .config import DEFAULT, IndexConfig
from .docs import Doc, doc, sessions_of
from .layout import DOCS, EXACT, FACETS, FIELDS, PENDING, POSTINGS, SPECS, docno_key, exact_key, list_prefix
from .records import FieldEntry, Pending, Record, pending, record_of, tagged

__all__ = [
    "DEFAULT", "DOCS", "EXACT", "FACETS", "FIELDS", "PENDING", "POSTINGS", "SPECS", "Chunk", "Doc",
    "FieldEntry", "IndexConfig", "Pending", "Record", "boundary", "chunk_count",
    "decode_chunk", "doc", "docno_key", "encode_chunk", "exact_key", "list_prefix", "pending", "record_of",
    "sessions_of", "tagged",
]
