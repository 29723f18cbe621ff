"""Read model: typed relation edges, kept in both directions."""

from __future__ import annotations

from strategies import write

from projections import relations

NOWHERE = "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"


def edges(svc, mid) -> set[tuple[str, str, str]]:
    with svc.store.read() as tx:
        return set(relations.edges(tx, mid))


def count(svc, mid) -> int:
    with svc.store.read() as tx:
        return relations.count(tx, mid)


def test_a_relation_is_visible_from_both_ends(svc):
    target = write(svc, "target")
    source = write(svc, "source", relations=(("derived_from", target),))
    assert edges(svc, source) == {("outgoing", "derived_from", target)}
    assert edges(svc, target) == {("incoming", "derived_from", source)}
    assert count(svc, source) == count(svc, target) == 1


def test_relations_of_every_type_and_both_directions_are_kept_apart(svc):
    a = write(svc, "a")
    b = write(svc, "b", relations=(("depends_on", a), ("supersedes", a)))
    svc.update_message(a, None, {"relations": (("related_to", b),)}, None)
    assert edges(svc, a) == {("incoming", "depends_on", b), ("incoming", "supersedes", b),
                             ("outgoing", "related_to", b)}
    assert edges(svc, b) == {("outgoing", "depends_on", a), ("outgoing", "supersedes", a),
                             ("incoming", "related_to", a)}
    assert count(svc, a) == count(svc, b) == 3


def test_an_update_replaces_a_message_relations_whole(svc):
    a, b = write(svc, "a"), write(svc, "b")
    c = write(svc, "c", relations=(("depends_on", a),))
    svc.update_message(c, None, {"relations": (("related_to", b),)}, None)
    assert edges(svc, c) == {("outgoing", "related_to", b)}
    assert edges(svc, a) == set()
    assert edges(svc, b) == {("incoming", "related_to", c)}


def test_deleting_the_source_removes_its_edges_from_both_ends(svc):
    target = write(svc, "target")
    source = write(svc, "source", relations=(("derived_from", target),))
    svc.delete_message(source, None)
    assert edges(svc, target) == set() and count(svc, target) == 0


def test_deleting_the_target_keeps_the_edge_so_context_can_report_it_deleted(svc):
    target = write(svc, "target")
    source = write(svc, "source", relations=(("derived_from", target),))
    svc.delete_message(target, None)
    assert edges(svc, source) == {("outgoing", "derived_from", target)}
    ctx = svc.context(source, 0, 0, 1, frozenset({"derived_from"}))
    assert ctx["relations"] == [{"type": "derived_from", "direction": "outgoing", "depth": 1,
                                 "message_id": target, "status": "deleted"}]


def test_a_relation_to_an_id_that_never_existed_is_kept(svc):
    source = write(svc, "source", relations=(("related_to", NOWHERE),))
    assert edges(svc, source) == {("outgoing", "related_to", NOWHERE)}
    assert edges(svc, NOWHERE) == {("incoming", "related_to", source)}


def test_a_message_may_relate_to_itself_without_duplicating_edges(svc):
    mid = write(svc, "self")
    svc.update_message(mid, None, {"relations": (("related_to", mid),)}, None)
    assert edges(svc, mid) == {("outgoing", "related_to", mid), ("incoming", "related_to", mid)}
    svc.delete_message(mid, None)
    assert edges(svc, mid) == set()


def test_a_message_without_relations_has_no_edges(svc):
    assert edges(svc, write(svc, "alone")) == set()
    assert count(svc, NOWHERE) == 0
