"""Posting chunks decoded as arrays: the same postings as the one-chunk codec,
refused when damaged, and decoded lists kept between searches never stale."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.errors import CorruptStoreError
from eventstore.events import Metadata
from projections import evaluation
from projections.index import IndexConfig
from projections.index.arrays import DecodedLists, counts, decode_chunks, first_docnos
from projections.index.chunks import chunk_count, cut_list, decode_chunk
from projections.search import Filters
from server.service import MemoryService

PREFIX = b"\x00term\x00"


@st.composite
def posting_lists(draw):
    """A sorted list of distinct docnos (gaps of every width), tfs and lengths."""
    n = draw(st.integers(1, 400))
    gaps = draw(st.lists(st.one_of(st.integers(1, 3), st.integers(1, 300), st.integers(1, 70_000),
                                   st.integers(1, 1 << 33)), min_size=n, max_size=n))
    docnos = list(np.cumsum(gaps).tolist())
    tfs = draw(st.one_of(st.none(), st.lists(st.integers(1, 255), min_size=n, max_size=n)))
    lengths = draw(st.lists(st.one_of(st.integers(1, 255), st.integers(1, 65_535)), min_size=n, max_size=n))
    chunk = draw(st.sampled_from([1, 2, 8, 128]))
    return docnos, tfs, lengths, (1 << 64) // chunk


def reference(items):
    out = ([], [], [])
    for key, raw in items:
        docnos, tfs, lengths = decode_chunk(key, raw)
        out[0].extend(docnos)
        out[1].extend(tfs)
        out[2].extend(lengths)
    return out


@settings(max_examples=150, deadline=None)
@given(posting_lists(), st.data())
def test_chunks_decoded_as_arrays_give_what_the_chunk_codec_gives(lst, data):
    docnos, tfs, lengths, cut = lst
    items = cut_list(PREFIX, docnos, tfs, lengths, cut)
    keys, raws = [k for k, _ in items], [v for _, v in items]
    got = decode_chunks(keys, raws, first_docnos(keys))
    assert [a.tolist() for a in got] == list(reference(items))
    assert counts(raws).tolist() == [chunk_count(r) for r in raws]
    some = sorted(data.draw(st.sets(st.integers(0, len(items) - 1))))
    part = decode_chunks([keys[i] for i in some], [raws[i] for i in some], first_docnos(keys)[some])
    assert [a.tolist() for a in part] == list(reference([items[i] for i in some]))


@pytest.mark.parametrize("where", [0, 1, 7, -5, -1])
def test_a_damaged_chunk_among_many_is_refused(where):
    items = cut_list(PREFIX, list(range(1, 3000, 3)), None, [5] * 1000, (1 << 64) // 64)
    keys, raws = [k for k, _ in items], [bytearray(v) for _, v in items]
    raws[3][where] ^= 0x10
    with pytest.raises(CorruptStoreError):
        decode_chunks(keys, [bytes(r) for r in raws], first_docnos(keys))


def chunks_of(docnos, prefix=PREFIX):
    items = cut_list(prefix, docnos, [1 + d % 7 for d in docnos], [3 + d % 300 for d in docnos], (1 << 64) // 16)
    return [k for k, _ in items], [v for _, v in items]


@pytest.mark.parametrize("change", ["append", "grow the last chunk", "rewrite a middle chunk", "drop the tail",
                                    "remove the first posting"])
def test_a_kept_list_is_decoded_again_from_its_first_changed_chunk(change):
    docnos = list(range(10, 4000, 3))
    changed = {
        "append": docnos + list(range(4000, 4300, 2)),
        "grow the last chunk": docnos + [4001],
        "rewrite a middle chunk": [d for d in docnos if d != 2002],
        "drop the tail": docnos[:900],
        "remove the first posting": docnos[1:],
    }[change]
    kept = DecodedLists(1 << 30)
    keys, raws = chunks_of(docnos)
    kept.get(keys, raws, first_docnos(keys))
    keys, raws = chunks_of(changed)
    assert kept.peek(keys, raws) is None                      # stale: never answered from
    got = kept.get(keys, raws, first_docnos(keys))
    fresh = decode_chunks(keys, raws, first_docnos(keys))
    assert all(a.tolist() == b.tolist() for a, b in zip(got, fresh))
    assert kept.peek(keys, raws) is got


def test_decoded_lists_stay_within_their_budget():
    kept = DecodedLists(200_000)
    for start in range(20):
        keys, raws = chunks_of(list(range(start, start + 6000, 7)), b"\x00t%d\x00" % start)
        kept.get(keys, raws, first_docnos(keys))
        assert kept._held <= kept.budget
    assert 0 < len(kept._entries) < 20


def forget(svc) -> None:
    """Drop what the store's searches kept (decoded lists, spare sums, masks)."""
    with svc.store.read() as tx:
        tx.caches.invalidate()


def ranked(svc, query):
    return [(r["message_id"], r["score"]) for r in svc.search(query, Filters(), 0, 10)["results"]]


def test_searches_with_lists_kept_from_earlier_ones_rank_as_a_fresh_process_would(store_path, monkeypatch):
    """Writes, merges, updates and deletes between searches: what the kept
    lists give is always what decoding the store afresh gives."""
    monkeypatch.setattr(evaluation, "WHOLE_MIN", 1)                 # every lookup goes through kept lists
    svc = MemoryService(store_path)
    words = ["deploy", "release", "status", "zebra", "weekly", "report", "alpha", "beta"]
    queries = ["deploy status", "weekly report zebra", "alpha beta release", "status"]
    ids = []
    try:
        for round_ in range(6):
            for i in range(150):
                text = " ".join(words[(i * k + round_) % len(words)] for k in range(1, 2 + i % 5))
                ids.append(svc.write_message(f"s{i % 7}", "user", text, Metadata())["message"]["message_id"])
            for mid in ids[round_ * 40:round_ * 40 + 5]:
                svc.delete_message(mid, None)
            for mid in ids[round_ * 40 + 5:round_ * 40 + 8]:
                svc.update_message(mid, f"zebra status {round_}", {}, None)
            warm = [ranked(svc, q) for q in queries]
            forget(svc)                                                  # nothing kept
            assert [ranked(svc, q) for q in queries] == warm
    finally:
        svc.close()


def ranked_by(svc, flt):
    return [(r["message_id"], r["score"]) for r in svc.search("status item3", flt, 0, 20)["results"]]


def test_facet_arrays_kept_for_a_snapshot_are_never_used_for_another(store_path, monkeypatch):
    """Filtered searches between writes that change kinds and importance: the
    facet lists read as arrays (kept per snapshot) answer as the rows do."""
    from projections import search
    from projections.index import filters, masks
    monkeypatch.setattr(search, "ALLOWED_MAX", 0)                  # never a set: every candidate is asked
    svc = MemoryService(store_path)
    kinds = ("semantic", "procedure", "conversation")
    flts = [Filters(kinds=frozenset(kinds[:2])), Filters(min_importance=50),
            Filters(kinds=frozenset({"procedure"}), min_importance=20)]
    ids = []
    try:
        for round_ in range(4):
            for i in range(200):
                meta = Metadata(memory_kind=kinds[(i + round_) % 3], importance=(i * 37 + round_) % 101)
                ids.append(svc.write_message("s", "user", f"status report item{i % 9}", meta)["message"]["message_id"])
            for mid in ids[round_ * 30:round_ * 30 + 10]:
                svc.update_message(mid, None, {"memory_kind": kinds[round_ % 3], "importance": 90}, None)
            svc.delete_message(ids[round_ * 30 + 11], None)
            for flt in flts:
                with monkeypatch.context() as m:
                    m.setattr(filters, "MASK_AFTER", 0)       # arrays, kept from earlier rounds' searches
                    with_masks = ranked_by(svc, flt)
                with monkeypatch.context() as m:
                    m.setattr(filters, "MASK_AFTER", 1 << 60)
                    m.setattr(masks, "kept", lambda *_: None)  # rows only
                    by_rows = ranked_by(svc, flt)
                assert with_masks == by_rows and by_rows
    finally:
        svc.close()


def test_sum_arrays_handed_from_search_to_search_rank_as_fresh_ones(store_path, monkeypatch):
    """A finished search's sum arrays are zeroed and reused by the next; a
    search that raised after adding to them does not hand them on. Every
    search ranks as with fresh arrays."""
    from projections import search
    svc = MemoryService(store_path)
    queries = ["status item3", "report weekly", "item5", "weekly status report item1", "item3 item4"]
    try:
        for i in range(300):
            svc.write_message(f"s{i % 4}", "user", f"status report item{i % 7} weekly {i}", Metadata())

        def run() -> list:
            out = [ranked(svc, q) for q in queries[:2]]
            with monkeypatch.context() as m:
                m.setattr(search, "_rank_in_context", lambda *a, **k: 1 / 0)      # a bug after the sums were added
                with pytest.raises(ZeroDivisionError), svc.store.read() as tx:
                    search.search(tx, "report weekly item2", Filters(), 10)
            return out + [ranked(svc, q) for q in queries[2:]]
        reused = run()
        monkeypatch.setattr(evaluation, "SPARE", 0)
        forget(svc)
        assert run() == reused and all(reused)
    finally:
        svc.close()


@settings(max_examples=60, deadline=None)
@given(allowed=st.sets(st.integers(0, 300), max_size=100), done=st.sets(st.integers(0, 400), max_size=20),
       asked=st.lists(st.integers(0, 400), max_size=3000), threshold=st.sampled_from([0, 2048, 10**9]))
def test_an_allowed_set_answers_alike_by_binary_search_and_as_a_bool_array(allowed, done, asked, threshold):
    """Admit's set lookups: by search for few documents, by a bool array over
    the docnos for many (docnos past the greatest allowed one included)."""
    admit = evaluation.Admit(lambda d: np.ones(len(d), bool), np.array(sorted(allowed), np.int64),
                             np.array(sorted(done), np.int64), False)
    asked = [*asked, *allowed, *done]           # every member asked of, besides the others
    docnos = np.array(asked, np.int64)
    expected = [d in allowed or d in done for d in asked]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evaluation, "MASK_LOOKUPS", threshold)
        assert admit.cheap(docnos).tolist() == expected
        assert admit(docnos).tolist() == expected
        assert admit.cheap(docnos).tolist() == expected            # the bool array, once built, again


def test_a_search_of_a_snapshot_already_searched_reads_no_chunks_of_the_lists_kept(store_path, monkeypatch):
    """Lists found to be the store's in a snapshot are not read again in it;
    after a write (a new snapshot) they are read and compared again."""
    from projections import search as ranker
    monkeypatch.setattr(evaluation, "WHOLE_MIN", 1)
    reads: list[bytes] = []
    real = ranker._chunks
    monkeypatch.setattr(ranker, "_chunks", lambda cur, prefix: (reads.append(prefix), real(cur, prefix))[1])
    svc = MemoryService(store_path, index_config=IndexConfig(merge_at=256))
    try:
        for i in range(300):
            svc.write_message(f"s{i % 3}", "user", f"deploy status report {i % 17}", Metadata())
        svc.rebuild()                                            # most of them merged into the lists
        first = ranked(svc, "deploy status")
        assert reads
        reads.clear()
        assert ranked(svc, "deploy status") == first
        assert reads == []
        svc.write_message("s9", "user", "deploy later", Metadata())
        again = ranked(svc, "deploy status")
        assert reads                                             # a new snapshot: read again
        forget(svc)
        assert ranked(svc, "deploy status") == again
    finally:
        svc.close()


def test_facet_arrays_outlive_a_write_that_merges_nothing_but_no_update_or_delete(store_path, monkeypatch):
    """A kept facet array answers after a plain write (no merge: the facet
    lists are as they were) and is read again after an update or a delete of
    a merged document — the rankings always those of the rows."""
    from projections import search
    from projections.index import filters, masks
    monkeypatch.setattr(search, "ALLOWED_MAX", 0)
    kinds = ("semantic", "procedure", "conversation")
    flt = Filters(kinds=frozenset(kinds[:2]))
    built: list[int] = []
    real = masks.facet_docnos
    monkeypatch.setattr(masks, "facet_docnos", lambda tx, key: (built.append(1), real(tx, key))[1])
    svc = MemoryService(store_path, index_config=IndexConfig(merge_at=64, chunk=16))

    def both() -> list:
        with monkeypatch.context() as m:
            m.setattr(filters, "MASK_AFTER", 0)
            with_masks = ranked_by(svc, flt)
        with monkeypatch.context() as m:
            m.setattr(filters, "MASK_AFTER", 1 << 60)
            m.setattr(masks, "kept", lambda *_: None)
            by_rows = ranked_by(svc, flt)
        assert with_masks == by_rows and by_rows
        return by_rows
    try:
        ids = [svc.write_message("s", "user", f"status report item{i % 9}",
                                 Metadata(memory_kind=kinds[i % 3]))["message"]["message_id"] for i in range(240)]
        both()                                               # the first 192 merged, 48 pending
        built.clear()
        svc.write_message("s", "user", "status item3 again", Metadata(memory_kind="semantic"))
        both()
        assert not built                                     # the same facet lists: the array kept
        target = ids[2]                                      # merged, a conversation: filtered out
        assert target not in [mid for mid, _ in both()]
        built.clear()
        svc.update_message(target, "status item3 item3 item3", {"memory_kind": "semantic"}, None)
        assert target in [mid for mid, _ in both()]          # now the best, and it passes
        assert built                                         # read again after the update
        built.clear()
        svc.delete_message(ids[1], None)
        both()
        assert built
        built.clear()
        best = svc.write_message("s", "user", "status item3 item3 item3 item3",
                                 Metadata(memory_kind="procedure"))["message"]["message_id"]
        for i in range(70):                                  # a merge: the facet lists grow
            svc.write_message("s", "user", f"filler {i}", Metadata(memory_kind="conversation"))
        assert best in [mid for mid, _ in both()]
        assert built
    finally:
        svc.close()
