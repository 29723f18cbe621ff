"""The term index follows updates field by field."""

from __future__ import annotations

from eventstore.events import Metadata
from projections import index as terms
from projections import stats
from projections.index.lists import put_dups
from projections.search import Filters


def found(service, query: str) -> list[str]:
    return [r["message_id"] for r in service.search(query, Filters(), 0, 10)["results"]]


def postings_of(service, field: int, term: str) -> int:
    """The term's postings in the merged lists plus the pending records holding it."""
    prefix = terms.list_prefix(field, term)
    with service.store.read() as tx, tx.txn.cursor(db=tx.db(terms.POSTINGS)) as cur:
        merged = sum(terms.chunk_count(v) for k, v in cur if k.startswith(prefix))
        return merged + sum(term in p.tfs[field] for p in terms.pending(tx))


def test_a_metadata_only_update_moves_tags_and_summary_and_keeps_the_content_indexed_once(service):
    mid = service.write_message("s", "user", "zebra crossing",
                                Metadata(tags=("alpha",), summary="first summary"))["message"]["message_id"]
    with service.store.read() as tx:
        before = stats.read(tx)
    service.update_message(mid, None, {"tags": ("beta",), "summary": "second summary"}, None)
    assert found(service, "zebra") == [mid]
    assert found(service, "beta") == [mid] and found(service, "alpha") == []
    assert found(service, "second") == [mid] and found(service, "first") == []
    assert postings_of(service, 0, "zebra") == 1
    with service.store.read() as tx:
        after = stats.read(tx)
    assert after["len_content"] == before["len_content"] and after["n_summary"] == 1


def test_a_content_update_replaces_the_content_postings(service):
    mid = service.write_message("s", "user", "zebra crossing", Metadata())["message"]["message_id"]
    service.update_message(mid, "giraffe crossing", {}, None)
    assert found(service, "giraffe") == [mid] and found(service, "zebra") == []
    assert postings_of(service, 0, "zebra") == 0 and postings_of(service, 0, "cross") == 1


def test_pairs_said_to_be_newest_are_all_put_even_when_one_is_not(service):
    """A merge appends each docno at the end of its key's duplicates; a pair that
    does not belong at the end is put the ordinary way, with the rest."""
    dk = terms.docno_key

    def put_both(w):
        put_dups(w, terms.FACETS, [(b"zz", dk(5)), (b"zy", dk(9))], newest=True)
        put_dups(w, terms.FACETS, [(b"zz", dk(3)), (b"zz", dk(7)), (b"zx", dk(1))], newest=True)
        with w.txn.cursor(db=w.db(terms.FACETS)) as cur:
            return [(k, int.from_bytes(v, "big")) for k, v in cur if k.startswith(b"z")]
    got = service.store.execute(put_both)
    assert got == [(b"zx", 1), (b"zy", 9), (b"zz", 3), (b"zz", 5), (b"zz", 7)]
