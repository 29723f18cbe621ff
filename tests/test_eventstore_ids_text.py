"""The id text conversion agrees with python-ulid for every 128-bit value."""

from __future__ import annotations

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
