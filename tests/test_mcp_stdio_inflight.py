"""Where the stdio fast path runs a call (server._inflight.InFlight): a brief call alone
on the event loop's thread, anything else on the pool; every answer written whole,
a cancelled call's not at all, and the drain waits for all of them."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest

from server._inflight import InFlight
from server._stdio import StdoutLines

pytestmark = pytest.mark.anyio
TIMEOUT = 30                # a bound against hanging, not a timing assertion


@pytest.fixture
def pipe():
    read_end, write_end = os.pipe()
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


def _refused() -> bytes:
    return b"refused\n"


async def test_a_brief_call_alone_runs_on_the_loops_thread_and_anything_else_on_the_pool(pipe):
    read_end, write_end = pipe
    flight = InFlight(StdoutLines(write_end))
    ran: dict[str, int] = {}
    release = threading.Event()

    def answer(name: str, wait: bool = False):
        def run() -> bytes:
            ran[name] = threading.get_ident()
            if wait:
                release.wait(TIMEOUT)
            return name.encode() + b"\n"
        return run

    with ThreadPoolExecutor(max_workers=4) as pool:
        flight.start("a", pool, answer("alone"), _refused, brief=True)
        assert ran["alone"] == threading.get_ident()                # answered before start returned
        flight.start("b", pool, answer("held", wait=True), _refused)
        flight.start("c", pool, answer("beside"), _refused, brief=True)     # another call is in flight
        release.set()
        with anyio.fail_after(TIMEOUT):
            await flight.drain()
        flight.handed("d")                                           # a request at the SDK
        flight.start("e", pool, answer("beside the sdk's"), _refused, brief=True)
        flight.answered("d")
        with anyio.fail_after(TIMEOUT):
            await flight.drain()
    assert ran["held"] != threading.get_ident()
    assert ran["beside"] != threading.get_ident()
    assert ran["beside the sdk's"] != threading.get_ident()
    assert sorted(os.read(read_end, 1 << 16).splitlines()) == [b"alone", b"beside", b"beside the sdk's", b"held"]


async def test_a_cancelled_call_runs_unanswered_and_a_call_after_the_stop_is_refused(pipe):
    read_end, write_end = pipe
    flight = InFlight(StdoutLines(write_end))
    started, release = threading.Event(), threading.Event()
    stored: list[str] = []

    def slow() -> bytes:
        started.set()
        release.wait(TIMEOUT)
        stored.append("slow")
        return b"slow\n"

    with ThreadPoolExecutor(max_workers=2) as pool:
        flight.start(10, pool, slow, _refused)
        await anyio.to_thread.run_sync(started.wait, TIMEOUT)
        flight.cancel(10)
        release.set()
        with anyio.fail_after(TIMEOUT):
            await flight.drain()
    flight.close()
    flight.start(11, pool, lambda: b"never\n", _refused, brief=True)
    assert stored == ["slow"]
    assert os.read(read_end, 1 << 16) == b"refused\n"
