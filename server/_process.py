"""What a serving process does apart from MCP: settle its heap once it has
imported everything, and hand work to a thread pool from the event loop."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anyio

log = logging.getLogger("convmem")
T = TypeVar("T")


def settle_heap() -> None:
    """Once, when a serving process starts: collect, move every object alive (modules,
    the SDK's pydantic models and schemas) to the collector's permanent generation,
    and turn the collector back on (``convmem serve`` turns it off while importing).

    Python's cyclic collector walks every tracked object in a full (generation 2)
    collection; the ~91,000 objects the imports leave made each one a 20–130 ms
    pause in the middle of a request — the server's largest latency stalls.
    Frozen objects are never walked again; what requests allocate is still
    collected as before, and the objects alive do not grow with the number of
    requests (~800 tracked objects besides the frozen ones after 3,000 writes),
    so nothing unbounded is pinned.  It runs before the store opens; each bulk
    transaction (a replay at open, a replica's catch-up) freezes what is alive
    again when it starts (:mod:`eventstore.bulk`).
    """
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    gc.enable()
    log.debug("heap settled: %d objects frozen in %.1f ms", gc.get_freeze_count(),
              (time.perf_counter() - start) * 1000)


async def in_thread(pool: ThreadPoolExecutor, fn: Callable[[], T]) -> T:
    """``fn()`` on a thread of ``pool``, awaited through one asyncio future: cheaper
    per call than ``anyio.to_thread.run_sync``, which adds a capacity limiter,
    cancel scopes and per-call bookkeeping.  As with that call,
    a caller cancelled while ``fn`` runs waits until it has returned (a write in
    progress ends before the store can close), then is cancelled."""
    future = pool.submit(fn)
    try:
        asyncio.get_running_loop()
    except RuntimeError:                    # another anyio backend: wait in a worker thread
        return await anyio.to_thread.run_sync(future.result)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if not future.cancelled():          # it had begun: let it end first
            with anyio.CancelScope(shield=True):
                await asyncio.wait([asyncio.wrap_future(future)])
        raise
