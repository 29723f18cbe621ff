"""The link's fast path for pulled messages, without a server: a message as nats-py's parser
hands it over gives the same record as the same message through nats-py's own ``Msg``."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import replace

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from server.replication.layout import Record
from server.replication.link import _headers, _Pull, _record

SUBJECT = b"convmem.T.g1.m.01J0000000000000000000001"
V1 = b"$JS.ACK.T-g1.c1.1.17.17.1720000000123456789.42"
V2 = b"$JS.ACK._.ACCHASH.T-g1.c1.1.17.17.1720000000123456789.42.RANDOM"
EVENT = b"NATS/1.0\r\nNats-Msg-Id: 17-abcdef\r\nNats-Expected-Last-Sequence: 16\r\n\r\n"
SEAL = b"NATS/1.0\r\nNats-Msg-Id: seal-1\r\nConvmem-Kind: seal\r\n\r\n"


class Sink:
    def __init__(self) -> None:
        self.records: list[Record] = []

    def _on_records(self, generation: int, records: list[Record]) -> None:
        self.records += records


def pull(cursor: int = 1) -> tuple[_Pull, Sink]:
    sink = Sink()
    p = _Pull(sink, 1, [cursor])  # type: ignore[arg-type]
    p.begin(10)
    return p, sink


def slow_record(reply: bytes, data: bytes, headers: bytes) -> Record:
    parsed = asyncio.run(Client()._process_headers(headers))
    return _record(Msg(_client=Client(), subject=SUBJECT.decode(), reply=reply.decode(), data=data, headers=parsed))


def test_nats_py_still_calls_the_method_the_fast_path_replaces():
    params = list(inspect.signature(Client._process_msg).parameters)
    assert params == ["self", "sid", "subject", "reply", "data", "headers"]


@pytest.mark.parametrize("reply", [V1, V2])
@pytest.mark.parametrize("headers", [EVENT, SEAL])
def test_a_message_read_raw_is_the_record_nats_py_makes_of_it(reply, headers):
    p, sink = pull()
    assert p.on_raw(SUBJECT, reply, b"\xa1event", headers)
    p.deliver()
    slow = slow_record(reply, b"\xa1event", headers)   # its time through a datetime: to the microsecond
    assert [replace(r, timestamp=slow.timestamp) for r in sink.records] == [slow]
    assert sink.records[0].timestamp == pytest.approx(slow.timestamp, abs=1e-6)
    assert sink.records[0].seq == 17 and sink.records[0].pending == 42 and p.cursor == [18]


def test_status_messages_end_the_request_and_only_errors_fail_it():
    for status, failed in ((b"NATS/1.0 404 No Messages\r\n\r\n", ""), (b"NATS/1.0 408 Request Timeout\r\n\r\n", ""),
                           (b"NATS/1.0 409 Consumer Deleted\r\n\r\n", "409 Consumer Deleted")):
        p, sink = pull()
        assert p.on_raw(b"_INBOX.x", b"", b"", status)
        assert p.done.is_set() and p.failed == failed and not sink.records


def test_what_the_fast_path_does_not_read_takes_the_usual_way():
    p, _ = pull()
    assert not p.on_raw(SUBJECT, b"not.a.js.reply", b"x", EVENT)
    assert not p.on_raw(SUBJECT, V1, b"x", b"HTTP/1.1 200\r\n\r\n")
    assert p.count == 0
    assert _headers(None) == (None, "", {})


def test_messages_before_the_cursor_are_dropped():
    p, sink = pull(cursor=18)
    assert p.on_raw(SUBJECT, V1, b"x", EVENT)
    p.deliver()
    assert sink.records == [] and p.cursor == [18]
