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
async def mcp(store_path):
    """A :class:`helpers.Mcp` client connected in memory to a fresh server on ``store_path``."""
    async with connect(store_path) as m:
        yield m
