"""A bulk transaction's posting lists cut and encoded column-wise: the bytes of the list-by-list codec."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.index.chunks import cut_list
from projections.index.columns import ColumnLists, _chunks
from projections.index.gather import Gathered, gathered_field
from projections.index.layout import FIELDS, list_prefix
from projections.index.records import FieldEntry

TERMS = ["deploy", "b", "東京", "ÿx", "a", "retry"]
# Documents: a docno (gaps up to past 2**32) and, per field, (term, tf) pairs and a length.
DOCS = st.lists(st.tuples(
    st.integers(1, 1 << 40),
    st.lists(st.lists(st.tuples(st.sampled_from(TERMS), st.integers(1, 255)), max_size=4),
             min_size=len(FIELDS), max_size=len(FIELDS)),
    st.integers(1, 65535)), max_size=60, unique_by=lambda d: d[0])


def _entry(pairs: list[tuple[str, int]], length: int) -> FieldEntry:
    tfs = dict(pairs)
    return FieldEntry(length, tuple(tfs), bytes(tfs.values()), ())


def _expected(field: int, docs: list, cut: int) -> list[tuple[bytes, bytes]]:
    """The chunks of every list of one field, cut and encoded list by list."""
    lists: dict[str, list[tuple[int, int, int]]] = {}
    for docno, fields, length in sorted(docs):
        for term, tf in dict(fields[field]).items():
            lists.setdefault(term, []).append((docno, tf, length))
    out = []
    for term in sorted(lists):
        docnos, tfs, lengths = (list(x) for x in zip(*lists[term]))
        out += cut_list(list_prefix(field, term), docnos, None if set(tfs) == {1} else tfs, lengths, cut)
    return out


@settings(max_examples=200, deadline=None)
@given(docs=DOCS, chunk=st.sampled_from([1, 2, 3, 128]), excluded=st.sets(st.integers(0, 59), max_size=5))
def test_columns_cut_and_encode_the_chunks_the_list_by_list_codec_does(docs, chunk, excluded):
    cut = (1 << 64) // chunk
    lists = ColumnLists(cut)
    gone = {docs[i][0] for i in excluded if i < len(docs)}
    for docno, fields, length in docs:            # any order: as whole records
        for f, pairs in enumerate(fields):
            lists.add(f, docno, _entry(pairs, length))
    kept = [d for d in docs if d[0] not in gone]
    for f in range(len(FIELDS)):
        assert _chunks(f, lists.column(f), cut) == _expected(f, docs, cut)
    # excluded documents are left out of batches, not of records: as batches, they go
    batches = ColumnLists(cut)
    ordered = sorted(docs)
    batches.add_batch(Gathered([d for d, _, _ in ordered],
                               [gathered_field([_entry(fields[f], length) for _, fields, length in ordered])
                                for f in range(len(FIELDS))]))
    if gone:
        batches.exclude(gone)
    for f in range(len(FIELDS)):
        assert _chunks(f, batches.column(f), cut) == _expected(f, kept, cut)


@settings(max_examples=60, deadline=None)
@given(docs=DOCS, chunk=st.sampled_from([1, 3, 128]), split=st.integers(0, 60), later=st.booleans())
def test_lists_put_into_stored_chunks_leave_the_chunks_of_all_their_postings(tmp_path_factory, docs, chunk, split,
                                                                             later):
    """Two bulk transactions' lists: the second's after the first's (re-cut from
    each list's last chunk), or among them (merged list by list)."""
    import lmdb

    from eventstore.transaction import Tx
    cut = (1 << 64) // chunk
    ordered = sorted(docs) if later else docs
    steps = [ordered[:split], ordered[split:]]
    env = lmdb.open(str(tmp_path_factory.mktemp("lists")), max_dbs=2, map_size=1 << 26)
    try:
        db = env.open_db(b"postings")
        for step in steps:
            with env.begin(write=True) as txn:
                lists = ColumnLists(cut)
                for docno, fields, length in step:
                    for f, pairs in enumerate(fields):
                        lists.add(f, docno, _entry(pairs, length))
                lists.put(Tx(txn, {"postings": db}))
        with env.begin() as txn:
            stored = list(txn.cursor(db=db))
    finally:
        env.close()
    assert stored == [item for f in range(len(FIELDS)) for item in _expected(f, docs, cut)]


@settings(max_examples=200, deadline=None)
@given(postings=st.lists(st.tuples(st.integers(0, 70_000), st.integers(0, 2**48 - 1)), max_size=60),
       ascending=st.booleans())
def test_the_list_order_is_the_lexsort_of_ranks_then_docnos(postings, ascending):
    import numpy as np

    from projections.index.columns import list_order
    if ascending:
        postings = [(rank, docno) for (rank, _), docno in zip(postings, sorted(d for _, d in postings))]
    ranks = np.array([r for r, _ in postings], dtype=np.uint32)
    docnos = np.array([d for _, d in postings], dtype=np.uint64)
    terms = int(ranks.max()) + 1 if postings else 0
    assert list_order(ranks, docnos, terms).tolist() == np.lexsort((docnos, ranks)).tolist()
