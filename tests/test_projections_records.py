"""A search record encodes as the canonical CBOR of its fields and facet keys,
and decoding gives the record back."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from strategies import metadata

from eventstore import codec
from eventstore.events import Message
from projections.index.records import EMPTY, FieldEntry, Record, record_of

_CHARS = st.characters(exclude_categories=("Cs",))          # what a validated text holds
_TERMS = st.lists(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1,
                          max_size=12), max_size=40, unique=True)


@st.composite
def entries(draw) -> FieldEntry:
    names = draw(_TERMS)
    tfs = bytes(draw(st.lists(st.integers(1, 255), min_size=len(names), max_size=len(names))))
    exact = tuple(draw(st.lists(st.binary(min_size=17, max_size=17), max_size=3)))
    return draw(st.sampled_from([EMPTY, FieldEntry(draw(st.integers(0, 65535)), tuple(names), tfs, exact)]))


@given(st.lists(entries(), min_size=3, max_size=3), st.lists(st.binary(max_size=300), max_size=30))
def test_a_record_encodes_as_dumps_does_and_decodes_back(fields, facets):
    rec = Record(fields, facets)
    raw = rec.encode()
    assert raw == codec.dumps([[e.length, "\x00".join(e.terms), e.tfs, list(e.exact)] for e in fields] + [facets])
    assert Record.decode(raw) == rec


@given(st.text(_CHARS, max_size=400), st.text(_CHARS, min_size=1, max_size=30), metadata([]))
def test_a_message_record_encodes_as_dumps_does(content, session, meta):
    rec = record_of(Message("0" * 26, session, "user", content, 1, 1, 1, meta))
    assert rec.encode() == codec.dumps([[e.length, "\x00".join(e.terms), e.tfs, list(e.exact)]
                                        for e in rec.fields] + [rec.facets])


def test_a_record_stored_here_loads_as_a_copy_of_its_own():
    rec = record_of(Message("0" * 26, "s", "user", "the pottery class on Friday", 1, 1, 1))
    raw = rec.stored()
    first = Record.loaded(raw)
    assert first == rec == Record.decode(raw)
    first.fields[0] = EMPTY                 # a replay changes a held record in place
    first.facets.append(b"x")
    assert Record.loaded(raw) == Record.decode(raw)
