"""The id text conversion agrees with python-ulid for every 128-bit value."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from ulid import ULID

from eventstore import ids

# sizes well spread: small, large, and the extremes
id_ints = st.one_of(st.integers(0, (1 << 128) - 1), st.integers(0, 1 << 40),
                    st.sampled_from([0, 1, (1 << 128) - 1, 1 << 127, (1 << 80) - 1]))


@given(id_ints)
def test_key_bytes_convert_to_the_same_text_as_python_ulid(n):
    raw = n.to_bytes(16, "big")
    assert ids.to_str(raw) == str(ULID.from_bytes(raw))


@given(id_ints)
def test_the_text_of_python_ulid_converts_back_to_the_same_key_bytes(n):
    text = str(ULID.from_int(n))
    assert ids.to_bytes(text) == bytes(ULID.from_str(text)) == n.to_bytes(16, "big")


@given(st.lists(id_ints, min_size=1, max_size=48))
def test_ids_given_many_at_once_have_the_text_of_python_ulid(values):
    values = sorted(set(values))
    randomness = b"".join((v & ((1 << 80) - 1)).to_bytes(10, "big") for v in values)
    newest, texts = ids.next_texts(None, [v >> 80 for v in values], randomness)
    assert texts == [str(ULID.from_int(v)) for v in values]
    assert newest == values[-1].to_bytes(16, "big")
    assert [ids.to_bytes(t) for t in texts] == [v.to_bytes(16, "big") for v in values]


_CANONICAL = re.compile("[0-7][0-9A-HJKMNP-TV-Z]{25}")      # what a canonical id is, as a pattern


@given(st.one_of(st.text(alphabet="0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabz\n é", min_size=24, max_size=27),
                 id_ints.map(lambda n: str(ULID.from_int(n))),
                 id_ints.map(lambda n: str(ULID.from_int(n))[:-1] + "\n")))
def test_a_canonical_id_is_what_the_pattern_says(text):
    assert ids.is_canonical(text) == (_CANONICAL.fullmatch(text) is not None)
