"""The pending records kept between searches (``projections.index.pending_view``):
every snapshot must see exactly the records a plain scan of ``pending`` gives,
however writes, updates, deletes, merges and searches interleave, and a search
of an older snapshot must not see what a newer one added."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore.events import Metadata
from projections import stats
from projections.index import FIELDS, IndexConfig, pending
from projections.index import pending_view as view_module
from projections.index.pending_view import pending_view
from projections.search import Filters
from server.service import MemoryService

SMALL = IndexConfig(merge_at=6, chunk=4)
WORDS = ["alpha", "beta", "gamma", "delta", "plan", "deploy", "support group", "yesterday"]


def _same(tx) -> None:
    """The view this snapshot gets holds what a scan of ``pending`` does, record for record."""
    view = pending_view(tx, stats.read(tx))
    scanned = pending(tx)
    assert [(p.docno, p.tfs, p.lengths, p.exact, p.facets) for p in view.records] == \
        [(p.docno, p.tfs, p.lengths, p.exact, p.facets) for p in scanned]
    assert len(view) == len(scanned)
    assert view.top == (scanned[-1].docno if scanned else 0)
    for p in scanned:
        assert view.get(p.docno) is not None and p.docno in view
        for f, tfs in enumerate(p.tfs):
            for term in tfs:
                assert view.df(f, term) == sum(term in q.tfs[f] for q in scanned)
    for f in range(len(FIELDS)):          # each term's postings as arrays: those of the scan, read-only
        for term in sorted({t for p in scanned for t in p.tfs[f]}) + ["absent"]:
            found = view.postings(f, term)
            assert list(zip(found.docnos.tolist(), found.tfs.tolist(), found.lengths.tolist())) == \
                [(p.docno, p.tfs[f][term], p.lengths[f]) for p in scanned if term in p.tfs[f]]
            assert not any(a.flags.writeable for a in found if len(a))


OPS = st.lists(st.tuples(st.sampled_from(["write", "update", "delete", "search"]), st.integers(0, 50),
                         st.sampled_from(WORDS)), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_every_snapshot_sees_exactly_its_pending_records(ops):
    with tempfile.TemporaryDirectory() as tmp:
        svc = MemoryService(os.path.join(tmp, "s"), index_config=SMALL)
        try:
            ids: list[str] = []
            for op, n, word in ops:
                if op == "write" or not ids:
                    ids.append(svc.write_message(f"s{n % 3}", "user", f"{word} note {n}",
                                                 Metadata())["message"]["message_id"])
                elif op == "update":
                    mid = ids[n % len(ids)]
                    svc.update_message(mid, f"{word} changed {n}", {}, None)
                elif op == "delete":
                    svc.delete_message(ids.pop(n % len(ids)), None)
                else:
                    svc.search(word, Filters(), 0, 5)
                with svc.store.read() as tx:
                    _same(tx)
        finally:
            svc.close()


def test_an_older_snapshot_does_not_see_records_a_newer_search_added(svc):
    for i in range(3):
        svc.write_message("s", "user", f"alpha {i}", Metadata())
    with svc.store.read() as old:
        _same(old)                                  # the kept records: three
        for i in range(2):
            svc.write_message("s", "user", f"alpha later {i}", Metadata())
        with svc.store.read() as new:
            _same(new)                              # five, added to the same kept records
        _same(old)                                  # still three for the older snapshot
        assert len(pending_view(old, stats.read(old))) == 3


def test_an_update_of_a_pending_record_is_seen(svc):
    mid = svc.write_message("s", "user", "alpha beta", Metadata())["message"]["message_id"]
    with svc.store.read() as tx:
        _same(tx)
    svc.update_message(mid, "gamma delta", {}, None)
    with svc.store.read() as tx:
        _same(tx)
        view = pending_view(tx, stats.read(tx))
        assert view.df(0, "gamma") == 1 and view.df(0, "alpha") == 0


def test_results_do_not_depend_on_what_was_kept(svc):
    """A search with the records kept from earlier searches ranks as one that reads them afresh."""
    for i in range(40):
        svc.write_message(f"s{i % 4}", "user", f"{WORDS[i % len(WORDS)]} {WORDS[(i * 3) % len(WORDS)]} {i}",
                          Metadata())
        if i % 7 == 0:
            svc.search("plan deploy", Filters(), 0, 5)
    for word in WORDS:
        kept = svc.search(word, Filters(), 0, 10)
        with svc.store.read() as tx:
            tx.caches.slot(view_module.Epochs).current = None
        fresh = svc.search(word, Filters(), 0, 10)
        assert kept == fresh


FILTERS = st.builds(
    Filters,
    session_id=st.sampled_from([None, "s0", "s1", "nowhere"]),
    kinds=st.frozensets(st.sampled_from(["conversation", "semantic", "procedure"]), max_size=2),
    tiers=st.frozensets(st.sampled_from(["short", "long"]), max_size=1),
    tags=st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True).map(tuple),
    min_importance=st.sampled_from([0, 30, 70]),
    roles=st.frozensets(st.sampled_from(["user", "assistant"]), max_size=1),
    after=st.sampled_from([None, 0, 5, 9]),
    before=st.sampled_from([None, 5, 9, 30]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flt=FILTERS)
def test_the_pending_documents_that_pass_a_filter_are_those_it_passes_one_by_one(pending_store, flt):
    from projections.index.filters import FacetFilter
    with pending_store.store.read() as tx:
        st_ = stats.read(tx)
        fl = FacetFilter(tx, flt, st_["active"], (st_["updates"], st_["deleted"]))
        view = pending_view(tx, st_)
        assert len(view) == 12
        assert view.passing(*fl.pending_conditions()).tolist() == [p.docno for p in view.records
                                                                    if fl.passes_pending(p)]


@pytest.fixture(scope="module")
def pending_store(tmp_path_factory):
    """Twelve pending messages with every facet varied and timestamps 0–11 (``write`` sets them)."""
    from eventstore.events import Message, MessageWritten
    svc = MemoryService(str(tmp_path_factory.mktemp("pend") / "s"), index_config=SMALL_HOLD)
    kinds, tiers = ["conversation", "semantic", "procedure"], ["short", "long"]

    def command(w):
        for i in range(12):
            meta = Metadata(tags=(("a",), ("b",), ("a", "b"), ())[i % 4], memory_kind=kinds[i % 3],
                            memory_tier=tiers[i % 2], importance=(10, 50, 90)[i % 3])
            w.append([MessageWritten(Message(w.new_ids([i])[0], f"s{i % 2}", ("user", "assistant")[i % 2],
                                             f"alpha {i}", i, i, 1, meta))])
    svc.store.execute(command)
    yield svc
    svc.close()


SMALL_HOLD = IndexConfig(merge_at=64, chunk=4)
