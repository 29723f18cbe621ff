"""The link's reading of pulled messages, without a server: each message nats-py
hands to the subscription's callback becomes the record of its stream sequence,
status messages end the request, and only an error status fails it."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from server.replication.layout import Record
from server.replication.link import _Pull, _record

SUBJECT = "convmem.T.g1.m.01J0000000000000000000001"
V1 = "$JS.ACK.T-g1.c1.1.17.17.1720000000123456789.42"
V2 = "$JS.ACK._.ACCHASH.T-g1.c1.1.17.17.1720000000123456789.42.RANDOM"
EVENT = {"Nats-Msg-Id": "17-abcdef", "Nats-Expected-Last-Sequence": "16"}
SEAL = {"Nats-Msg-Id": "seal-1", "Convmem-Kind": "seal"}


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


def message(reply: str, data: bytes, headers: dict[str, str] | None, subject: str = SUBJECT) -> Msg:
    return Msg(Client(), subject, reply, data, headers)


@pytest.mark.parametrize("reply", [V1, V2])
@pytest.mark.parametrize("headers", [EVENT, SEAL])
def test_a_pulled_message_becomes_the_record_of_its_stream_sequence(reply, headers):
    p, sink = pull()
    asyncio.run(p.on_msg(message(reply, b"\xa1event", headers)))
    p.deliver()
    [record] = sink.records
    assert (record.seq, record.pending, record.subject, record.data) == (17, 42, SUBJECT, b"\xa1event")
    assert record.msg_id == headers["Nats-Msg-Id"] and record.kind == headers.get("Convmem-Kind")
    assert record.timestamp == pytest.approx(1720000000.123456789, abs=1e-6)
    assert p.cursor == [18]


@pytest.mark.parametrize("reply", [V1, V2])
def test_what_the_reply_subject_gives_is_what_nats_py_metadata_gives(reply):
    msg = message(reply, b"x", EVENT)
    md = msg.metadata
    record = _record(msg)
    assert (record.seq, record.pending) == (md.sequence.stream, md.num_pending)
    assert record.timestamp == pytest.approx(md.timestamp.timestamp(), abs=1e-6)   # its datetime: to the µs


def test_status_messages_end_the_request_and_only_errors_fail_it():
    for status, description, failed in (("404", "No Messages", ""), ("408", "Request Timeout", ""),
                                        ("409", "Consumer Deleted", "409 Consumer Deleted")):
        p, sink = pull()
        asyncio.run(p.on_msg(message("", b"", {"Status": status, "Description": description}, "_INBOX.x")))
        assert p.done.is_set() and p.failed == failed and not sink.records


def test_messages_before_the_cursor_are_dropped():
    p, sink = pull(cursor=18)
    asyncio.run(p.on_msg(message(V1, b"x", EVENT)))
    p.deliver()
    assert sink.records == [] and p.cursor == [18]
