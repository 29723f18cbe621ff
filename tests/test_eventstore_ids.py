"""Message ids: canonical ULIDs, strictly increasing across restarts and clock steps."""

from __future__ import annotations

import random

import pytest
from helpers import Clock
from hypothesis import given
from hypothesis import strategies as st
from ulid import ULID

from eventstore import ids
from eventstore.events import Metadata
from server.service import MemoryService


def _write(svc: MemoryService, text: str = "hello") -> str:
    return svc.write_message("s", "user", text, Metadata())["message"]["message_id"]


def pool(*randoms: int) -> bytes:
    """Randomness as :func:`ids.next_texts` takes it: 10 bytes an id."""
    return b"".join(r.to_bytes(10, "big") for r in randoms)


def next_id(last: bytes | None, now_ms: int, randomness: int) -> bytes:
    """The bytes of one id given after ``last`` (a batch of one)."""
    newest, _ = ids.next_texts(last, [now_ms], pool(randomness))
    assert newest is not None
    return newest


def test_next_id_is_stamped_with_the_clock_when_nothing_came_before():
    raw = next_id(None, 1_720_843_200_000, 12345)
    assert ULID.from_bytes(raw).milliseconds == 1_720_843_200_000
    assert int.from_bytes(raw, "big") & ((1 << 80) - 1) == 12345


def test_next_id_follows_the_last_id_when_the_clock_stepped_back():
    last = next_id(None, 2_000_000_000_000, 0)
    raw = next_id(last, 1_000_000_000_000, 999)
    assert raw > last
    assert int.from_bytes(raw, "big") == int.from_bytes(last, "big") + 1


def test_next_id_within_one_millisecond_is_still_increasing():
    last = next_id(None, 5, (1 << 80) - 1)
    raw = next_id(last, 5, 0)
    assert raw > last


def test_next_id_refuses_to_wrap_around_the_id_space():
    with pytest.raises(OverflowError):
        next_id(b"\xff" * 16, 0, 0)


def test_ids_are_monotonic_across_reopen_and_a_clock_stepping_back(store_path):
    clock, seen = Clock(), []
    for step in range(3):
        svc = MemoryService(store_path, clock=clock, rng=random.Random(step))
        try:
            seen += [_write(svc) for _ in range(3)]
        finally:
            svc.close()
        clock.now -= 60_000          # the next process starts with an earlier clock
    assert seen == sorted(seen)
    assert len(set(seen)) == len(seen)
    assert all(ids.is_canonical(i) for i in seen)


def test_ids_keep_increasing_within_one_millisecond_whatever_the_randomness(store_path):
    class Descending(random.Random):
        def __init__(self) -> None:
            super().__init__(0)
            self.n = 1 << 80

        def getrandbits(self, k: int) -> int:
            self.n -= 1 << 40
            return self.n

    svc = MemoryService(store_path, clock=Clock(), rng=Descending())
    try:
        got = [_write(svc) for _ in range(5)]
    finally:
        svc.close()
    assert got == sorted(got) and len(set(got)) == 5


@pytest.mark.parametrize("text", [
    "01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "7ZZZZZZZZZZZZZZZZZZZZZZZZZ",
    "00000000000000000000000000",
])
def test_a_canonical_ulid_is_accepted_and_round_trips(text):
    assert ids.is_canonical(text)
    assert ids.to_str(ids.to_bytes(text)) == text


@pytest.mark.parametrize("text", [
    "01arz3ndektsv4rrffq69g5fav",      # lower case
    "01ARZ3NDEKTSV4RRFFQ69G5FAv",      # one lower-case letter
    "81ARZ3NDEKTSV4RRFFQ69G5FAV",      # first character above 7: more than 128 bits
    "ZZZZZZZZZZZZZZZZZZZZZZZZZZ",
    "01ARZ3NDEKTSV4RRFFQ69G5FA",       # 25 characters
    "01ARZ3NDEKTSV4RRFFQ69G5FAVX",     # 27 characters
    "01ARZ3NDEKTSV4RRFFQ69G5FAI",      # I, L, O, U are not Crockford digits
    "01ARZ3NDEKTSV4RRFFQ69G5FAL",
    "01ARZ3NDEKTSV4RRFFQ69G5FAO",
    "01ARZ3NDEKTSV4RRFFQ69G5FAU",
    "01ARZ3NDEKTSV4RRFFQ69G5FA\x00",
    "",
    None,
    12345,
    b"01ARZ3NDEKTSV4RRFFQ69G5FAV",
])
def test_a_non_canonical_id_is_rejected(text):
    assert not ids.is_canonical(text)


def test_converting_a_non_canonical_id_to_key_bytes_is_refused():
    with pytest.raises(ValueError):
        ids.to_bytes("01arz3ndektsv4rrffq69g5fav")


def test_key_bytes_of_the_wrong_length_are_refused():
    with pytest.raises(ValueError):
        ids.to_str(b"\x01" * 15)


def test_key_bytes_sort_like_the_canonical_strings():
    rng = random.Random(7)
    texts = [str(ULID.from_int(rng.getrandbits(128))) for _ in range(200)]
    assert sorted(texts) == [ids.to_str(b) for b in sorted(ids.to_bytes(t) for t in texts)]


def test_ids_given_in_one_step_from_the_os_randomness_are_increasing_and_read_it_once(tmp_path, monkeypatch):
    import os
    import random

    from eventstore import transaction
    from eventstore.store import EventStore
    from projections.registry import Projector
    reads = []
    real = os.urandom
    with EventStore(str(tmp_path / "s"), Projector()) as store:
        assert isinstance(store.rng, random.SystemRandom)
        monkeypatch.setattr(transaction.os, "urandom", lambda n: reads.append(n) or real(n))
        given = store.execute(lambda w: w.new_ids([5, 5, 4, 1_700_000_000_000, 7]))
    assert reads == [50]
    assert given == sorted(given) and len(set(given)) == 5


@given(last=st.none() | st.binary(min_size=16, max_size=16),
       times=st.lists(st.integers(0, (1 << 48) + 5), max_size=8),
       seed=st.integers(0, 2**32))
def test_ids_given_as_text_in_one_step_are_the_ids_given_one_by_one(last, times, seed):
    one, together = random.Random(seed), random.Random(seed)
    expected, prev = [], last
    try:
        for t in times:
            prev = next_id(prev, t, one.getrandbits(80))
            expected.append(prev)
    except OverflowError:
        with pytest.raises(OverflowError):
            ids.next_texts(last, times, pool(*(together.getrandbits(80) for _ in times)))
        return
    newest, texts = ids.next_texts(last, times, pool(*(together.getrandbits(80) for _ in times)))
    assert texts == [ids.to_str(raw) for raw in expected]
    assert [ids.to_bytes(t) for t in texts] == expected
    assert newest == (expected[-1] if expected else last)


@given(last=st.none() | st.integers(0, (1 << 128) - 2), now_ms=st.integers(0, (1 << 48) + 5),
       randomness=st.integers(0, (1 << 80) - 1))
def test_an_id_is_its_time_over_its_randomness_or_one_more_than_the_last(last, now_ms, randomness):
    candidate = ((now_ms % (1 << 48)) << 80) | randomness
    made = next_id(None if last is None else last.to_bytes(16, "big"), now_ms, randomness)
    assert int.from_bytes(made, "big") == (candidate if last is None else max(candidate, last + 1))


def test_an_id_given_in_one_step_equal_to_the_last_comes_right_after_it():
    last = next_id(None, 5, 7)
    newest, texts = ids.next_texts(last, [5, 5], pool(7, 0))
    assert [ids.to_bytes(t) for t in texts] == [
        (int.from_bytes(last, "big") + 1).to_bytes(16, "big"), (int.from_bytes(last, "big") + 2).to_bytes(16, "big")]
    assert newest == ids.to_bytes(texts[-1])
