"""The stdio transport's two ends (server._stdio) on real pipes.

Stdout: lines put from worker threads (the fast path's answers) and written by
the event loop (the SDK's), into a pipe nobody reads for a while, come out whole
and each thread's in its order.  Stdin: the lines are taken as they arrive, while
the SDK is not receiving; a message for the SDK stops the reading until the SDK
has received it.
"""

from __future__ import annotations

import os
import threading

import anyio
import pytest

from server._stdio import LineTooLong, MessageReader, StdinLines, StdoutLines
from server.service import MemoryService
from tools.hostile import hostile_lines, stdio_lines

pytestmark = pytest.mark.anyio
TIMEOUT = 30                # a bound against hanging, not a timing assertion


async def test_lines_from_threads_and_the_loop_into_a_full_pipe_come_out_whole_and_in_order():
    read_end, write_end = os.pipe()
    out = StdoutLines(write_end)
    by_thread = {t: [f"{t} {i} ".encode() + b"x" * (20_000 + 997 * i) + b"\n" for i in range(40)] for t in range(4)}
    refused: list[bytes] = []

    def put_all(lines: list[bytes]) -> None:
        refused.extend(line for line in lines if not out.put(line))

    threads = [threading.Thread(target=put_all, args=(lines,)) for lines in by_thread.values()]
    loop_lines = [f"loop {i} ".encode() + b"y" * 150_000 + b"\n" for i in range(3)]
    received = bytearray()
    reader = threading.Thread(target=lambda: received.extend(_read_all(read_end)))

    async def write_all() -> None:
        for line in loop_lines:
            await out.write(line)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            reader.start()                  # reading while they write: the pipe (64 KiB) fills and drains
            for thread in threads:
                thread.start()
            tg.start_soon(write_all)
            for thread in threads:
                await anyio.to_thread.run_sync(thread.join)
        await out.close(TIMEOUT)
    os.close(write_end)
    await anyio.to_thread.run_sync(reader.join)
    os.close(read_end)
    assert not refused
    lines = [line + b"\n" for line in bytes(received).split(b"\n")[:-1]]
    assert sorted(lines) == sorted([*loop_lines, *(line for ls in by_thread.values() for line in ls)])
    for t, sent in by_thread.items():
        assert [line for line in lines if line.startswith(f"{t} ".encode())] == sent
    assert [line for line in lines if line.startswith(b"loop")] == loop_lines


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


async def test_lines_are_taken_as_they_arrive_and_a_message_for_the_sdk_holds_the_rest_back():
    read_end, write_end = os.pipe()
    taken: list[str] = []
    arrived = anyio.Event()

    def take(message: str) -> bool:
        if not message.startswith("fast"):
            return False
        taken.append(message)
        arrived.set()
        return True

    async def unreadable(exc: Exception) -> None:
        raise AssertionError(exc)

    reader = MessageReader(StdinLines(read_end), str.strip, unreadable, take=take)
    try:
        with anyio.fail_after(TIMEOUT):
            os.write(write_end, b"sdk 1\n")
            assert await reader.receive() == "sdk 1"
            os.write(write_end, b"fast 1\n")          # nobody receives: the loop takes it all the same
            await arrived.wait()
            assert taken == ["fast 1"]
            arrived = anyio.Event()
            os.write(write_end, b"fast 2\nsdk 2\nfast 3\n")
            await arrived.wait()
            assert taken == ["fast 1", "fast 2"]      # "fast 3" waits behind "sdk 2"
            assert await reader.receive() == "sdk 2"
            assert taken == ["fast 1", "fast 2", "fast 3"]
            os.close(write_end)
            with pytest.raises(anyio.EndOfStream):
                await reader.receive()
    finally:
        await reader.aclose()
        os.close(read_end)


# ------------------------------------------------------------------ hostile lines, end to end
def test_a_line_nested_or_numbered_past_every_parser_is_answered_and_serving_goes_on(store_path, tmp_path):
    report = stdio_lines(store_path, str(tmp_path / "stderr.log"))
    assert set(report["lines"]) == set(hostile_lines())
    for name, answer in report["lines"].items():
        assert answer["code"] in (-32700, -32600), (name, answer)
        assert answer["id"] is None and len(answer["message"]) < 100, (name, answer)    # nothing of the line
        assert report["writes_after"][name], name
    assert report["exit"] == 0
    assert b"Traceback" not in (tmp_path / "stderr.log").read_bytes()
    service = MemoryService(store_path)
    try:
        assert [m["content"] for m in service.history("s", 100, None)["history"]] == list(hostile_lines())
    finally:
        service.close()


def test_a_line_past_the_bound_is_dropped_as_it_arrives_and_reported_in_its_place():
    read_end, write_end = os.pipe()
    lines = StdinLines(read_end, max_line=1000)
    got: list[str | LineTooLong] = []

    def feed(data: bytes) -> None:
        os.write(write_end, data)
        lines.read()
        while (line := lines.line()) is not None:
            got.append(line)
    try:
        feed(b"short\n" + b"x" * 999 + b"\n")
        for _ in range(20):                     # 20,000 bytes of one line, arriving in parts
            feed(b"y" * 1000)
        feed(b"y\nafter\n" + b"z" * 1001 + b"\n" + b"w" * 3000)
        os.close(write_end)
        lines.read()
        while (line := lines.line()) is not None:
            got.append(line)
    finally:
        os.close(read_end)
    assert [g if isinstance(g, str) else "TOO LONG" for g in got] == [
        "short\n", "x" * 999 + "\n", "TOO LONG", "after\n", "TOO LONG", "TOO LONG"]
