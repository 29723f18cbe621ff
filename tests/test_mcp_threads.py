"""Tool calls run on worker threads (server.app.in_thread): what a caller sees when it is cancelled."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from anyio.lowlevel import checkpoint

from server.app import in_thread

pytestmark = pytest.mark.anyio


@pytest.fixture
def pool():
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


async def test_a_call_returns_its_result_and_raises_its_error(pool):
    assert await in_thread(pool, lambda: 42) == 42
    with pytest.raises(ZeroDivisionError):
        await in_thread(pool, lambda: 1 // 0)


async def test_a_cancelled_caller_waits_until_the_call_in_progress_has_ended(pool):
    started, release = threading.Event(), threading.Event()
    scopes: list[anyio.CancelScope] = []
    seen: list[bool] = []

    def work() -> str:
        started.set()
        release.wait(30)
        return "done"

    async def caller() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await in_thread(pool, work)
        seen.append(scope.cancelled_caught)
        seen.append(release.is_set())

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        await anyio.to_thread.run_sync(started.wait)
        scopes[0].cancel()
        await wait_all_tasks_blocked()
        await checkpoint()
        assert seen == []                 # still waiting for the call
        release.set()
    assert seen == [True, True]           # cancelled, and only after the call had ended


async def test_a_call_cancelled_before_it_began_never_runs(pool):
    gate, ran = threading.Event(), []
    blocker = [pool.submit(gate.wait, 30) for _ in range(2)]        # every thread busy
    with anyio.CancelScope() as scope:
        scope.cancel()
        await in_thread(pool, lambda: ran.append(True))
    gate.set()
    for f in blocker:
        f.result()
    pool.shutdown(wait=True)
    assert ran == [] and scope.cancelled_caught
