"""Shared fixtures: real LMDB stores in temp directories, always closed, and an
MCP client connected in memory to a server on one (helpers are in helpers.py)."""

from __future__ import annotations

import pytest
from helpers import connect

from server.service import MemoryService


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store_path(tmp_path) -> str:
    return str(tmp_path / "store")


@pytest.fixture
def service(store_path):
    svc = MemoryService(store_path)
    try:
        yield svc
    finally:
        svc.close()


@pytest.fixture
def svc(store_path):
    """A service with a reproducible clock and id randomness."""
    from strategies import open_service

    service = open_service(store_path)
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def transport(request) -> str:
    """How the ``mcp`` fixture reaches the server: ``memory`` unless a module
    parametrizes it (``TRANSPORTS`` in helpers.py: ``memory`` and ``http``)."""
    return getattr(request, "param", "memory")


@pytest.fixture
async def mcp(store_path, transport):
    """A :class:`helpers.Mcp` client connected to a fresh server on ``store_path``:
    in memory, or (``transport == "http"``) to a real ``convmem serve --http``
    child on a loopback port through the SDK's HTTP client."""
    async with connect(store_path, transport=transport) as m:
        yield m
