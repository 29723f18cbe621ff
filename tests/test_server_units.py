"""Small pieces of the server layer on their own: content ranges, cursors, the lock, unreadable lines."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.errors import ValidationError
from server import cursors
from server._rwlock import RWLock
from server.app import _unreadable_reply
from server.views import range_end as _range_end

SECRET = b"k" * 32


# -------------------------------------------------------------- content ranges
def boundaries(data: bytes) -> list[int]:
    return [i for i in range(len(data) + 1) if i == len(data) or data[i] & 0xC0 != 0x80]


@settings(max_examples=300, deadline=None)
@given(text=st.text(min_size=0, max_size=40), limit=st.integers(1, 12), pick=st.integers(0, 1000))
def test_a_content_range_is_whole_code_points_within_the_limit_or_exactly_one(text, limit, pick):
    data = text.encode("utf-8")
    starts = boundaries(data)
    offset = starts[pick % len(starts)]
    end = _range_end(data, offset, limit)
    assert end in starts and offset <= end <= len(data)
    piece = data[offset:end].decode("utf-8")
    if offset < len(data):
        assert piece
    if end - offset > limit:
        assert len(piece) == 1 and end - offset - limit <= 3
    elif end < len(data):
        nxt = min(s for s in starts if s > end)       # one more code point would not fit
        assert nxt - offset > limit


@given(text=st.text(min_size=1, max_size=20))
def test_an_offset_inside_a_code_point_or_past_the_end_is_refused(text):
    data = text.encode("utf-8")
    for offset in range(len(data) + 3):
        if offset in boundaries(data):
            continue
        with pytest.raises(ValidationError, match="content_offset"):
            _range_end(data, offset, 4)


# --------------------------------------------------------------------- cursors
def test_a_cursor_round_trips_only_for_its_view_scope_and_store():
    c = cursors.encode(SECRET, "history", "s", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert cursors.decode(SECRET, c, "history", "s") == "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    for secret, view, scope in ((b"x" * 32, "history", "s"), (SECRET, "sessions", "s"),
                                (SECRET, "history", "t")):
        with pytest.raises(ValidationError, match="cursor"):
            cursors.decode(secret, c, view, scope)


@given(st.data())
def test_any_single_character_change_to_a_cursor_is_refused(data):
    c = cursors.encode(SECRET, "history", "session", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    i = data.draw(st.integers(0, len(c)))
    ch = data.draw(st.characters(codec="utf-8"))
    forged = data.draw(st.sampled_from([c[:i] + ch + c[i:], c[:i] + c[i + 1:], c[:i] + ch + c[i + 1:]]))
    if forged == c:
        return
    with pytest.raises(ValidationError, match="cursor"):
        cursors.decode(SECRET, forged, "history", "session")


# ------------------------------------------------------------------------ lock
def test_an_exclusive_holder_waits_for_readers_and_blocks_new_ones():
    lock, order = RWLock(), []
    reading, release_reader = threading.Event(), threading.Event()

    def reader():
        with lock.shared():
            reading.set()
            release_reader.wait()
            order.append("reader done")

    def writer():
        with lock.exclusive():
            order.append("writer")

    r = threading.Thread(target=reader)
    r.start()
    reading.wait()
    w = threading.Thread(target=writer)
    w.start()
    while not lock._waiting:          # the writer is queued behind the reader
        pass

    def late_reader():
        with lock.shared():
            order.append("late reader")
    lr = threading.Thread(target=late_reader)
    lr.start()
    release_reader.set()
    for t in (r, w, lr):
        t.join(timeout=10)
    assert order == ["reader done", "writer", "late reader"]


# ------------------------------------------------------------ unreadable lines
class _Unparsed(Exception):
    def __init__(self, line):
        super().__init__("unparsed")
        self.line = line

    def errors(self):
        return [{"type": "json_invalid", "input": self.line}]


@pytest.mark.parametrize("line, rid, code", [
    ('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":"\\ud800"}}', 7, -32600),
    ('{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"x":"\\udfff"}}', "a", -32600),
    ('{"jsonrpc":"2.0","id":true,"method":"x"}', None, -32600),
    ("not json at all", None, -32700),
    ("[1, 2]", None, -32600),
])
def test_an_unreadable_request_is_answered_with_its_id(line, rid, code):
    reply = _unreadable_reply(_Unparsed(line))
    assert (reply.id, reply.error.code) == (rid, code)


def test_an_unreadable_notification_or_response_gets_no_answer():
    assert _unreadable_reply(_Unparsed('{"jsonrpc":"2.0","method":"notifications/x","params":"\\ud800"}')) is None
    assert _unreadable_reply(_Unparsed('{"jsonrpc":"2.0","id":3,"result":"\\ud800"}')) is None


@pytest.mark.parametrize(("content", "patch", "words"), [
    ("", {}, "content: must"),
    ("\ud800", {}, "content: must be valid Unicode"),
    (None, {"importance": 101}, "metadata.importance: must"),
    (None, {"tags": ("a", "a")}, "metadata.tags: must not repeat"),
    ("fine", {"relations": (("related_to", "not an id"),)}, r"metadata\.relations\[\]\.message_id: must"),
])
def test_an_update_with_bad_input_is_refused_before_the_commit_and_changes_nothing(
        tmp_path, monkeypatch, content, patch, words):
    import io

    from strategies import open_service, write

    from server import transfer

    def export_text(service) -> str:
        out = io.StringIO()
        transfer.export(service, out)
        return out.getvalue()
    svc = open_service(str(tmp_path / "s"))
    try:
        mid = write(svc, "original text", tags=("t",))
        before = export_text(svc)

        def committed(*args, **kwargs):
            raise AssertionError("a refused update reached the commit")
        monkeypatch.setattr(svc, "submit", committed)
        with pytest.raises(ValidationError, match=words) as refused:
            svc.update_message(mid, content, patch, None)
        assert "original" not in refused.value.message and "not an id" not in refused.value.message
        monkeypatch.undo()
        assert export_text(svc) == before
    finally:
        svc.close()
