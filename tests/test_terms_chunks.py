"""The chunked posting lists: encoding, canonical chunking, pending merges."""

from __future__ import annotations

import zlib

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.errors import CorruptStoreError
from eventstore.events import Metadata
from projections import index as terms
from projections.index import FieldEntry, IndexConfig
from projections.index.chunks import Change, cut_list, merge_list
from projections.index.lists import PostingLists
from projections.search import Filters
from server.service import MemoryService

DOCNOS = st.integers(min_value=1, max_value=(1 << 48) - 1)


@given(st.lists(st.tuples(DOCNOS, st.integers(1, 255), st.integers(0, 65535)), min_size=1,
                unique_by=lambda p: p[0]))
def test_a_chunk_decodes_to_what_was_encoded(postings):
    postings.sort()
    docnos, tfs, lengths = (list(x) for x in zip(*postings))
    key = terms.list_prefix(0, "word") + terms.docno_key(docnos[0])
    raw = terms.encode_chunk(key, docnos, tfs, lengths)
    got_docnos, got_tfs, got_lengths = terms.decode_chunk(key, raw)
    assert (got_docnos, list(got_tfs), list(got_lengths)) == (docnos, tfs, lengths)
    assert terms.chunk_count(raw) == len(docnos)


def _seal(key: bytes, body: bytes) -> bytes:
    return body + zlib.crc32(body, zlib.crc32(key)).to_bytes(4, "little")


KEY = terms.list_prefix(0, "word") + terms.docno_key(1)


@pytest.mark.parametrize("raw", [b"", b"\x00\x01\x02", _seal(KEY, b""), _seal(KEY, b"\x10\x01"),
                                 _seal(KEY, b"\x00"), _seal(KEY, b"\x01\x05\x05")],
                         ids=["empty", "shorter than a checksum", "sealed empty", "unknown layout",
                              "no lengths", "wrong length"])
def test_a_malformed_chunk_is_corrupt_store(raw):
    with pytest.raises(CorruptStoreError):
        terms.decode_chunk(KEY, raw)


@given(st.data())
def test_a_chunk_with_any_bit_changed_or_under_another_key_is_corrupt_store(data):
    docnos = [1, 5, 9, 300]
    raw = terms.encode_chunk(KEY, docnos, [1, 2, 1, 1], [4, 4, 7, 300])
    at = data.draw(st.integers(0, len(raw) * 8 - 1))
    flipped = bytearray(raw)
    flipped[at // 8] ^= 1 << (at % 8)
    with pytest.raises(CorruptStoreError):
        terms.decode_chunk(KEY, bytes(flipped))
    with pytest.raises(CorruptStoreError):
        terms.decode_chunk(terms.list_prefix(0, "ward") + terms.docno_key(1), raw)


def _chunks_of(txn, db, prefix: bytes) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in txn.cursor(db=db) if k.startswith(prefix)]


OPS = st.lists(st.tuples(st.booleans(), st.lists(st.integers(1, 400), min_size=1, max_size=30)),
               min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_any_sequence_of_merges_leaves_the_canonical_chunks(tmp_path_factory, ops):
    """Adding and removing postings in any batches gives the same bytes as
    cutting the final list in one go: the chunks depend on the postings alone."""
    _merge_and_compare(str(tmp_path_factory.mktemp("chunks")), ops)


def _merge_and_compare(path: str, ops) -> None:
    env = lmdb.open(path, max_dbs=2, map_size=1 << 26)
    db = env.open_db(b"postings")
    prefix, neighbour = terms.list_prefix(0, "word"), terms.list_prefix(0, "wore")
    live: dict[int, tuple[int, int]] = {}
    with env.begin(write=True, db=db) as txn, txn.cursor() as cur:
        merge_list(cur, neighbour, Change([5, 9], None, [3, 3]), CUT)   # a list right after
        for adding, batch in ops:
            batch = sorted(set(batch))
            if adding:
                batch = [d for d in batch if d not in live]
                if not batch:
                    continue
                tfs, lengths = [d % 3 + 1 for d in batch], [d % 300 for d in batch]
                merge_list(cur, prefix, Change(batch, tfs, lengths), CUT)
                live.update(zip(batch, zip(tfs, lengths)))
            else:
                gone = {d for d in batch if d in live}
                if not gone:
                    continue
                merge_list(cur, prefix, Change([], None, [], gone), CUT)
                for d in gone:
                    del live[d]
        docnos = sorted(live)
        expected = cut_list(prefix, docnos, [live[d][0] for d in docnos],
                            [live[d][1] for d in docnos], CUT) if docnos else []
        assert _chunks_of(txn, db, prefix) == expected
        assert len(_chunks_of(txn, db, neighbour)) == 1
    env.close()


class _Tx:
    def __init__(self, txn, dbs) -> None:
        self.txn, self.dbs = txn, dbs

    def db(self, name: str):
        return self.dbs[name]


def _postings_after(path: str, lists: PostingLists, how: str) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(path, max_dbs=2, map_size=1 << 26)
    try:
        db = env.open_db(terms.POSTINGS.encode())
        with env.begin(write=True) as txn:
            getattr(lists, how)(_Tx(txn, {terms.POSTINGS: db}))
            return list(txn.cursor(db=db))
    finally:
        env.close()


TERM = st.sampled_from(["a", "ab", "abc", "b", "é", "東京", "z" * 40])
ENTRIES = st.lists(st.tuples(st.integers(0, 2), st.lists(st.tuples(TERM, st.integers(1, 255)), max_size=6,
                                                         unique_by=lambda p: p[0]), st.integers(1, 300)),
                   min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(ENTRIES)
def test_appending_lists_to_an_empty_index_writes_what_merging_them_would(tmp_path_factory, entries):
    lists = PostingLists(CUT)
    for docno, (field, postings, length) in enumerate(entries, 1):
        lists.add(field, docno, FieldEntry(length, tuple(t for t, _ in postings), bytes(tf for _, tf in postings), ()))
    appended = _postings_after(str(tmp_path_factory.mktemp("append")), lists, "append")
    merged = _postings_after(str(tmp_path_factory.mktemp("merge")), lists, "write")
    assert appended == merged


CUT = IndexConfig(chunk=8).cut      # one docno in 8 is a boundary, so small lists have several chunks


def _search(svc: MemoryService, ids: list[str], query: str, flt: Filters) -> list[tuple]:
    """Results with each id replaced by its place in the writing order."""
    return [(ids.index(r["message_id"]), r["score"], r["score_breakdown"])
            for r in svc.search(query, flt, 0, 20)["results"]]


TEXTS = ["deploy failed on the billing service", "billing retries with backoff",
         "ERR_CONN_RESET while deploying", "東京の天気は晴れ", "weekly billing report",
         "the deploy went fine", "backoff settings for retries"]


def _fill(svc: MemoryService) -> list[str]:
    ids = [svc.write_message(f"s{i % 2}", "user", TEXTS[i % len(TEXTS)] + f" item{i}",
                             Metadata(tags=("ops",) if i % 3 else (), importance=i % 100))
           ["message"]["message_id"] for i in range(40)]
    svc.update_message(ids[3], "billing moved to a new queue", {}, None)
    svc.update_message(ids[5], None, {"summary": "deploy summary", "tags": ("release",)}, None)
    svc.delete_message(ids[7], None)
    return ids


@pytest.mark.parametrize("merge_at", [1, 6])
def test_scores_do_not_depend_on_whether_a_document_is_merged(tmp_path, merge_at):
    queries = ["billing", "deploy backoff", "ERR_CONN_RESET", "東京", "item12", "deploy summary"]
    filters = [Filters(), Filters(session_id="s1"), Filters(tags=("ops",)), Filters(min_importance=20)]
    runs = []
    for at in (10**6, merge_at):                 # all pending / merged every `at` writes
        svc = MemoryService(str(tmp_path / f"store{at}"), index_config=IndexConfig(merge_at=at))
        try:
            ids = _fill(svc)
            runs.append([_search(svc, ids, q, f) for q in queries for f in filters])
            with svc.store.read() as tx:
                pending = len(terms.pending(tx))
        finally:
            svc.close()
        assert pending == {10**6: 39, 6: 4, 1: 0}[at]    # 40 written, one deleted
    assert runs[0] == runs[1]


def test_a_merge_empties_pending_into_the_lists(tmp_path):
    svc = MemoryService(str(tmp_path / "store"), index_config=IndexConfig(merge_at=4))
    try:
        for i in range(9):
            svc.write_message("s", "user", f"zebra number {i}", Metadata())
        with svc.store.read() as tx:
            assert [p.docno for p in terms.pending(tx)] == [9]
            prefix = terms.list_prefix(0, "zebra")
            with tx.txn.cursor(db=tx.db(terms.POSTINGS)) as cur:
                merged = sum(terms.chunk_count(v) for k, v in cur if k.startswith(prefix))
        assert merged == 8
        assert len(svc.search("zebra", Filters(), 0, 20)["results"]) == 9
    finally:
        svc.close()
