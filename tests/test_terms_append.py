"""Postings merged after a list's last one (a live merge's usual case) are
spliced onto the last chunk's bytes: the result must be the chunks that
cutting the whole list at once gives, whatever widths the new values need."""

from __future__ import annotations

import lmdb
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import index as terms
from projections.index import IndexConfig
from projections.index.chunks import Change, boundary, cut_list, merge_list

CUT = IndexConfig(chunk=8).cut      # one docno in 8 is a boundary, so small lists have several chunks
PREFIX = terms.list_prefix(0, "word")
NEIGHBOURS = (terms.list_prefix(0, "wora"), terms.list_prefix(0, "worf"))   # a list before it, one after

# A gap from 1 to past 2**16, so that an appended gap may need a wider array than the chunk's;
# a tf of 1 mostly (a chunk whose tfs are all 1 leaves them out); a length past 255 now and then.
POSTING = st.tuples(st.one_of(st.integers(1, 40), st.integers(200, 70_000)),
                    st.one_of(st.just(1), st.integers(1, 255)), st.one_of(st.integers(0, 255), st.integers(0, 65535)))
BATCHES = st.lists(st.lists(POSTING, min_size=1, max_size=12), min_size=1, max_size=10)


@settings(max_examples=150, deadline=None)
@given(BATCHES, st.booleans())
def test_batches_appended_one_merge_at_a_time_leave_the_canonical_chunks(tmp_path_factory, batches, all_ones):
    env = lmdb.open(str(tmp_path_factory.mktemp("append")), max_dbs=2, map_size=1 << 26)
    try:
        db = env.open_db(b"postings")
        docnos: list[int] = []
        tfs: list[int] = []
        lengths: list[int] = []
        with env.begin(write=True, db=db) as txn, txn.cursor() as cur:
            for neighbour in NEIGHBOURS:
                merge_list(cur, neighbour, Change([1], None, [3]), CUT)
            for batch in batches:
                start = docnos[-1] if docnos else 0
                new = [start + sum(gap for gap, _, _ in batch[:i + 1]) for i in range(len(batch))]
                new_tfs = [1 if all_ones else tf for _, tf, _ in batch]
                new_lengths = [length for _, _, length in batch]
                bounds = {d for d in new if boundary(d, CUT)}
                merge_list(cur, PREFIX, Change(new, None if all_ones else new_tfs, new_lengths,
                                               bounds=bounds if len(batch) % 2 else None), CUT)
                docnos, tfs, lengths = docnos + new, tfs + new_tfs, lengths + new_lengths
            stored = [(k, v) for k, v in txn.cursor(db=db) if k.startswith(PREFIX)]
            assert stored == cut_list(PREFIX, docnos, tfs, lengths, CUT)
            for neighbour in NEIGHBOURS:
                assert [k for k, _ in txn.cursor(db=db) if k.startswith(neighbour)] == [neighbour + terms.docno_key(1)]
    finally:
        env.close()
