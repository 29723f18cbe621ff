"""Ids turned into text a batch at once (``codec.remember_ids``, used by the
replay) decode to what one by one gives, whatever the batch holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import canonical_ids

from eventstore import codec
from eventstore.events import Message, MessageDeleted, MessageWritten

written = st.builds(lambda mid, n: MessageWritten(Message(mid, "s", "user", f"text {n}", n, n)),
                    canonical_ids, st.integers(0, 1 << 40))
events = st.one_of(written, canonical_ids.map(MessageDeleted))


@settings(max_examples=200)
@given(st.lists(events, min_size=16, max_size=60), st.lists(st.binary(max_size=40), max_size=4))
def test_remembered_ids_decode_as_one_by_one(batch, garbage):
    raws = [codec.encode_event(e) for e in batch]
    codec.remember_ids(raws + garbage)          # bytes of any shape are only not prepared
    assert [codec.decode_event(raw) for raw in raws] == batch
